"""``fp4bench.testing.slowdown``: named backends wrapped in place, each call followed by busy time
worth a fraction of the call's own time (the CUDA spin is checked on a GPU; the wiring on CPU)."""

from __future__ import annotations

import pytest
import torch

from fp4bench.backends import registry
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.case import MEASURED, CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.problems import GemmProblem
from fp4bench.testing import slowdown
from fp4bench.testing.slowdown import ENV, Slowed, Spin, parse_spec

PROBLEM = GemmProblem(m=4, n=64, k=128)


@pytest.fixture(autouse=True)
def _isolated_registry(monkeypatch):
    registry.all_backends()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))


def test_parse_spec():
    assert parse_spec("torch-bf16=0.05, fault-nan=1") == {"torch-bf16": 0.05, "fault-nan": 1.0}


@pytest.mark.parametrize("text, match", [("", "is not set"), ("torch-bf16", "BACKEND=FRACTION"),
                                         ("torch-bf16=0", r"fraction in \(0, 10\]"), ("=0.1", "BACKEND=FRACTION"),
                                         ("torch-bf16=x", "BACKEND=FRACTION")])
def test_parse_spec_errors(text, match):
    with pytest.raises(ValueError, match=match):
        parse_spec(text)


def test_plugin_replaces_the_named_backend_under_its_name(monkeypatch):
    plain = registry.get_backend("torch-bf16")
    monkeypatch.setenv(ENV, "torch-bf16=0.25")
    registry.load_plugin("fp4bench.testing.slowdown")
    slowed = registry.get_backend("torch-bf16")
    assert isinstance(slowed, Slowed) and slowed.inner is plain and slowed.fraction == 0.25
    assert (slowed.name, slowed.kinds, slowed.act_format) == (plain.name, plain.kinds, plain.act_format)
    assert registry.test_only() == {"torch-bf16": "torch-bf16 (torch.mm / torch._grouped_mm + test-only slowdown 0.25)"}
    assert registry.test_only(["torch-reference"]) == {}
    # loading it again re-wraps the plain backend: the slowdowns do not compound
    monkeypatch.setenv(ENV, "torch-bf16=0.5")
    registry.load_plugin("fp4bench.testing.slowdown")
    again = registry.get_backend("torch-bf16")
    assert again.inner is plain and again.fraction == 0.5


def test_unknown_backend_is_named(monkeypatch):
    monkeypatch.setenv(ENV, "no-such-backend=0.05")
    with pytest.raises(ValueError, match="unknown backend 'no-such-backend'"):
        registry.load_plugin("fp4bench.testing.slowdown")


class _RecordingSpin(Spin):
    """Measures a fixed 2 ms per call and records the busy time asked for, instead of spinning."""

    def __init__(self) -> None:
        super().__init__()
        self.measured: list[str] = []
        self.added: list[float] = []

    def call_seconds(self, call, device) -> float:
        call()
        self.measured.append(device.type)
        return 2e-3

    def add(self, seconds: float, device: torch.device) -> None:
        self.added.append(seconds)


def test_each_call_adds_the_fraction_of_the_measured_call_time():
    spin = _RecordingSpin()
    slowed = Slowed(registry.get_backend("torch-bf16"), 0.05, spin)
    runner = CaseRunner(torch.device("cpu"), TimingConfig(mode="cpu", min_samples=3, max_samples=3, time_budget_s=0))
    res = runner.run(slowed, PROBLEM, DEFAULT_TACTIC)
    assert res.status == MEASURED and res.check.ok  # the wrapper returns the backend's own output
    assert spin.measured == ["cpu"]  # once per (problem, tactic): at the correctness check
    assert spin.added and all(s == pytest.approx(1e-4) for s in spin.added)
    assert "test-only slowdown 0.05" in res.extra_info["api"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_the_spin_adds_the_fraction_on_the_gpu():
    dev = torch.device("cuda")
    plain = registry.get_backend("torch-bf16")
    runner = CaseRunner(dev, TimingConfig(time_budget_s=0.5))
    problem = GemmProblem(m=64, n=4096, k=4096)
    base = runner.run(plain, problem, DEFAULT_TACTIC).timing.median_s
    runner.drop_prepared()
    slowed = runner.run(Slowed(plain, 0.5), problem, DEFAULT_TACTIC).timing.median_s
    assert 1.35 < slowed / base < 1.7, (base, slowed)


def test_module_has_no_backends_of_its_own():
    assert not hasattr(slowdown, "BACKENDS")
