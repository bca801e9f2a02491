"""One runner factory: the pytest session and a worker process build their ``CaseRunner`` from
the same ``RunnerSettings`` (``run.factory``), and nothing else in the package builds one."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
import torch

import fp4bench
from fp4bench.plugin.settings import runner_settings
from fp4bench.run.factory import case_runner, isolated_runner, open_device
from fp4bench.measure.copies import MIN_COPIES
from fp4bench.measure.replays import DEFAULT_REPLAYS
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.worker.child import Child

pytest_plugins = ["pytester"]

SRC = Path(fp4bench.__file__).parent


@pytest.fixture
def settings(pytester) -> RunnerSettings:
    config = pytester.parseconfig("--fp4-seed", "7", "--fp4-min-copies", "3", "--fp4-l2", "hot",
                                  "--fp4-time-budget", "0.2", "--fp4-min-samples", "5")
    return runner_settings(config, torch.device("cpu"))


def test_the_session_settings_travel_to_a_worker_unchanged(settings):
    assert (settings.seed, settings.min_copies, settings.cold_l2) == (7, 3, False)
    assert (settings.timing.mode, settings.timing.time_budget_s, settings.timing.min_samples) == ("cpu", 0.2, 5)
    wire = json.loads(json.dumps(settings.to_init()))  # as the worker reads its init line
    assert RunnerSettings.from_init(wire) == settings


def test_a_worker_builds_the_runner_the_session_builds(settings):
    here = case_runner(settings, *open_device(settings.device))
    there = Child(settings.to_init()).runner
    for attr in ("timing", "cold_l2", "seed", "min_copies", "cpu_copies", "replays", "peaks"):
        assert getattr(there, attr) == getattr(here, attr), attr
    assert isolated_runner(settings, sys.executable, 5.0).measurement() == here.measurement()


def test_an_init_without_fields_takes_the_defaults():
    s = RunnerSettings.from_init({})
    assert s == RunnerSettings() and s.to_init()["device"] is None
    assert s.min_copies is None and Child({"device": "cpu"}).runner.min_copies == MIN_COPIES  # on a GPU
    assert Child({"device": "cpu"}).runner.cpu_copies == 1 and s.replays == DEFAULT_REPLAYS


def test_bad_factory_inputs_are_named():
    with pytest.raises(ValueError, match="--fp4-device: 'gpu7' is not a torch device"):
        open_device("gpu7", option="--fp4-device")
    with pytest.raises(ValueError, match="case timeout must be > 0 seconds, got 0"):
        isolated_runner(RunnerSettings(device="cpu"), sys.executable, 0)


def test_only_the_factory_builds_a_case_runner():
    builds = []
    for p in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "CaseRunner":
                builds.append(f"{p.relative_to(SRC)}:{node.lineno}")
    assert builds and all(b.startswith("run/factory.py:") for b in builds), builds
