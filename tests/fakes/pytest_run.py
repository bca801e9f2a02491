"""A pytest run of the real benchmark file, in-process with ``pytester``, and the steady
backends that make its timings predictable on a shared CPU.

``steady-spin`` (loaded with ``--fp4-plugin fakes.pytest_run``) is a bf16 backend whose call is a
fixed 1 ms ``clock.spin`` (a busy-wait on the real clock, exactly 1 ms of a simulated one), so
verdicts do not depend on how busy the machine is; ``steady-spin-2`` is a
second one that a slowdown of the first must leave alone. ``TINY`` and ``GATE`` are the option
sets of a small run and of a gated one, ``STEADY_RUN`` a small run of ``steady-spin``; the helpers
save, copy and scale steady candidates.
The ``bench`` and ``isolated_registry`` fixtures are in tests/conftest.py; the fixtures here
(import them into a test module to use them): ``sim_clock`` runs a test's runs of steady
backends on a simulated clock (their timing costs no time), ``quick_runs`` spares in-process
runs two costs no test is about, and ``shared_runs`` / ``shared_run`` give one run to several
tests of a module.
"""

from __future__ import annotations

import copy
import functools
import gc
import json
from pathlib import Path

import pytest
import pytest_benchmark.plugin
import torch

from fp4bench import clock
# imported with this module, before any pytester run: a module first imported inside a run is
# dropped after it, and a later run would register its plugins into a new registry module, not
# the one ``isolated_registry`` (tests/conftest.py) restores
from fp4bench.backends import registry  # noqa: F401
from fp4bench.backends.base import Availability, Prepared, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16

BENCH_FILE = (Path(__file__).resolve().parents[2] / "bench" / "test_fp4_gemm.py").read_text()
# GLM-5 shared-expert dense GEMMs at decode batch 1, TP 8: M1 N512 K6144 and M1 N6144 K256
# Plugins nothing here is about, and that are slow in an inline run of this torch-heavy process:
# the unraisable/thread-exception checks each force a full gc.collect; hypothesis' plugin imports
# hypothesis, which pytester drops after every run, so each run would import it again.
QUIET = ["-p", "no:cacheprovider", "-p", "no:unraisableexception", "-p", "no:threadexception",
         "-p", "no:hypothesispytest", "-p", "no:xdist", "-p", "no:xdist.looponfail"]
TINY = ["-p", "fp4bench.plugin", *QUIET, "-rs", "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-time-budget", "0.05",
        "--fp4-min-samples", "3", "--fp4-kinds", "dense"]
# The steady backend's runs: the GLM-5 shared-expert GEMMs at TP 32 (M1 N128 K6144, M1 N6144 K64),
# a quarter of TP 8's weights, and no replays: what such a run costs beyond its timing (none on
# ``sim_clock``) is making and checking its operands
_STEADY = ["-p", "fp4bench.plugin", *QUIET, "-rs", "--fp4-batches", "1", "--fp4-tp", "32", "--fp4-time-budget", "0.05",
           "--fp4-kinds", "dense", "--fp4-plugin", "fakes.pytest_run", "--fp4-backends", "steady-spin",
           "--fp4-replays", "0"]
STEADY_RUN = [*_STEADY, "--fp4-min-samples", "3"]
GATE = [*_STEADY, "--fp4-min-samples", "15",
        # CPU wall clock on a shared machine drifts between runs more than the GPU default
        # 5 % floor allows; the regressions injected below are +67 %
        "--fp4-floor", "20"]
GATE_IDS = ["test_fp4_gemm.py::test_dense[steady-spin-default-glm-5-b1-tp32-uniform-shared_gate_up-m1n128k6144]",
            "test_fp4_gemm.py::test_dense[steady-spin-default-glm-5-b1-tp32-uniform-shared_down-m1n6144k64]"]


class SteadySpin(TorchBF16):
    """Correct bf16 output (computed once in prepare), then a fixed busy-wait per call.

    ``slow_first`` makes the first prepared case 1.7x slower: a suspect that the confirm step
    re-measures at normal speed."""

    name = "steady-spin"
    kinds = frozenset({"dense"})
    api = "test-only: precomputed torch.mm result + 1 ms clock.spin"

    def __init__(self) -> None:
        self.spin_s, self.slow_first, self.prepares = 1e-3, False, 0

    def availability(self, device: torch.device) -> Availability:
        return Availability.yes(torch.__version__)

    def prepare(self, problem, operands, device) -> Prepared:
        prep = super().prepare(problem, operands, device)
        self.prepares += 1
        torch.mm(prep.args["a"], prep.args["wt"], out=prep.out)
        prep.args["result"] = prep.out.clone()
        prep.args["spin_s"] = self.spin_s * (1.7 if self.slow_first and self.prepares == 1 else 1.0)
        return prep

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        prepared.out.copy_(prepared.args["result"])
        clock.spin(prepared.args["spin_s"])
        return prepared.out


class OtherSpin(SteadySpin):
    """A second steady backend: the one a slowdown of ``steady-spin`` must leave alone."""

    name = "steady-spin-2"


STEADY = SteadySpin()
BACKENDS = [STEADY, OtherSpin()]


@pytest.fixture
def quick_runs(monkeypatch: pytest.MonkeyPatch):
    """In-process runs without two costs no test here is about. Every window releases its
    operands with a full ``gc.collect``, which in this torch-heavy process walks every object the
    test session holds (a third of a second each): the objects alive now are frozen (left out of
    every collection) for the test. pytest-benchmark asks py-cpuinfo for this machine's CPU on
    every save (a subprocess): asked once per test session."""
    monkeypatch.setattr(pytest_benchmark.plugin, "get_cpu_info", _cpu_info)
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _cpu_info() -> dict:
    return copy.deepcopy(_first_cpu_info())


@functools.cache
def _first_cpu_info() -> dict:
    return _REAL_CPU_INFO()


_REAL_CPU_INFO = pytest_benchmark.plugin.get_cpu_info


@pytest.fixture
def sim_clock(quick_runs):
    """The test's in-process runs on a simulated clock: a steady backend's call takes exactly its
    1 ms, without spending it, so a run's timings, windows and verdicts are the same on a busy
    machine as on an idle one. Only for runs of steady backends: a real backend's call (torch-bf16)
    takes no simulated time."""
    with clock.using(clock.SimClock()) as c:
        yield c



@pytest.fixture(scope="module")
def shared_runs() -> dict:
    """The runs several tests of one module assert different things on (``shared_run``)."""
    return {}


def shared_run(runs: dict, bench, *args: str) -> tuple[pytest.RunResult, Path]:
    """``bench.runpytest(*args)`` and the folder it ran in: run by the first test that asks, the
    same result and files for every later test of the module (``runs``: ``shared_runs``)."""
    if args not in runs:
        runs[args] = (bench.runpytest(*args), bench.path)
    return runs[args]


def outcomes_of(res) -> dict:
    """passed / failed / errors (the empty grouped and moe parametrizations are always skipped)."""
    return {k: v for k, v in res.parseoutcomes().items() if k in ("passed", "failed", "errors")}


def save_candidate(bench, name="base.json", *extra) -> dict:
    res = bench.runpytest(*GATE, "--fp4-save-baseline", name, *extra)
    assert res.ret == 0, res.stdout.str()
    return json.loads((bench.path / name).read_text())


_SAVED: dict[str, dict] = {}


def steady_baseline(bench, name="base.json") -> dict:
    """A steady-spin candidate written to ``name``: saved by the first test that needs one,
    copied by the others (its 1 ms timings are the same on every run)."""
    if "base" not in _SAVED:
        _SAVED["base"] = save_candidate(bench, "first-save.json")
    data = json.loads(json.dumps(_SAVED["base"]))
    (bench.path / name).parent.mkdir(parents=True, exist_ok=True)
    write_json(bench, name, data)
    return data


def write_json(bench, name, data) -> str:
    (bench.path / name).write_text(json.dumps(data))
    return name



def faster_baseline(data: dict, factor: float) -> dict:
    """The same file with every sample of every window (and so the median) multiplied by ``factor``."""
    for b in data["benchmarks"]:
        b["stats"]["data"] = [x * factor for x in b["stats"]["data"]]
        b["stats"]["median"] *= factor
    for name, ws in data["fp4bench"].get("windows", {}).items():
        data["fp4bench"]["windows"][name] = [[x * factor for x in w] for w in ws]
    return data
