"""Rotating operand copies (``measure.copies``, ``CaseRunner._rotating_calls``): every cold-L2
case on a GPU averages at least ``min_copies`` placements, each copy its own allocation, within
a memory budget that depends on the GPU's total memory only."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from fp4bench.backends.base import Prepared, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16
from fp4bench.run.case import CaseRunner, measurement_of
from fp4bench.measure.holdings import tensors_of
from fp4bench.run.operand_copies import copied_fields, operand_copy
from fp4bench.measure.copies import MAX_COPIES, MEMORY_FRACTION, copy_count
from fp4bench.measure.timing import TimingConfig
from fp4bench.measure.verify import OK, CheckResult
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem, Origin
from fakes.paths import ROOT


def copy_bytes(ops) -> int:
    """The bytes a rotating copy allocates: one clone of each tensor of its copied fields."""
    return sum(t.numel() * t.element_size() for t in tensors_of([getattr(ops, n) for n in copied_fields(ops)]))

GIB = 1 << 30
H200_L2 = 62914560  # bytes, the fingerprint's l2_bytes
H200_TOTAL = int(139.8 * GIB)
# GLM-5 grouped bf16 rows at batch 1: 8 active experts of 256 (footprints as recorded on the H200)
GATE_UP_B1 = GroupedProblem((1,) * 8 + (0,) * 248, n=4096, k=6144, origin=Origin("glm-5", 1, 1, "uniform", "gate_up"))
BF16_GATE_UP_COPY = 256 * 4096 * 6144 * 2 + 8 * 6144 * 2  # every expert's bf16 weights + activations


def h200(**kw) -> int:
    return copy_count(l2_bytes=H200_L2, total_bytes=H200_TOTAL, **kw)


def test_a_case_of_three_l2s_or_more_gets_the_minimum_not_one_copy():
    footprint = GATE_UP_B1.bytes_moved("bf16", "bf16")
    assert footprint >= 3 * H200_L2  # the L2 alone asks for one copy
    assert h200(footprint_bytes=footprint, copy_bytes=BF16_GATE_UP_COPY) == 4
    assert h200(footprint_bytes=footprint, copy_bytes=BF16_GATE_UP_COPY, min_copies=1) == 1


def test_the_l2_target_still_sets_small_cases_and_the_cap_holds():
    # dense rows as recorded on the H200: 50.4 MB -> 4 copies, 25.2 MB -> 8, 12.6 MB -> 15
    assert [h200(footprint_bytes=f, copy_bytes=f) for f in (50352128, 25180160, 12597248)] == [4, 8, 15]
    assert h200(footprint_bytes=1e6, copy_bytes=1e6) == MAX_COPIES


def test_the_memory_budget_bounds_the_count_from_total_memory():
    # 4 copies of GLM-5's bf16 grouped layer need 48 GiB: 40 % of an H200 holds them, 25 % would not
    assert math.floor(0.25 * H200_TOTAL / BF16_GATE_UP_COPY) == 2
    assert h200(footprint_bytes=4e8, copy_bytes=20 * GIB) == 2  # 55.9 GiB of budget
    assert h200(footprint_bytes=4e8, copy_bytes=60 * GIB) == 1  # never fewer than one
    assert copy_count(l2_bytes=H200_L2, total_bytes=80 * GIB, footprint_bytes=4e8, copy_bytes=12 * GIB) == 2


class _Copies(TorchBF16):
    """torch-bf16's prepare on whatever device the operands are on; ``run`` returns the weights
    it read, so a test sees which allocation each rotating callable uses."""

    name = "copies-probe"

    def prepare(self, problem, operands, device):
        return Prepared(problem, torch.empty(0), {"w": operands.w})

    def run(self, prepared, tactic):
        return prepared.args["w"]


@pytest.fixture
def gpu_like(monkeypatch):
    """A runner that takes the CUDA path of ``_rotating_calls`` on CPU tensors: an H200's L2 and
    total memory; reading the free memory is an error."""
    props = SimpleNamespace(L2_cache_size=H200_L2, total_memory=H200_TOTAL)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)

    def no_free_memory(*a, **k):
        raise AssertionError("the copy count must not depend on the free memory")

    monkeypatch.setattr(torch.cuda, "mem_get_info", no_free_memory)

    def make(**kw) -> CaseRunner:
        runner = CaseRunner(torch.device("cpu"), TimingConfig(mode="cpu"), **kw)
        runner.device = SimpleNamespace(type="cuda", index=0)
        return runner

    return make


def _weights(runner: CaseRunner, problem, ops):
    backend = _Copies()
    prep = backend.prepare(problem, ops, None)
    runner._check_prepared = lambda *a: CheckResult(OK)  # _Copies computes nothing to check
    fns, bad = runner._rotating_calls(backend, problem, ops, prep, Tactic(None, "default"))
    assert bad is None
    return [fn() for fn in fns]


def test_rotating_calls_give_min_copies_distinct_allocations_on_a_gpu(gpu_like):
    ops = make_operands(GemmProblem(4, 64, 64), "bf16", "bf16")  # small bytes to clone, large footprint below
    ws = _weights(gpu_like(), GATE_UP_B1, ops)
    assert len(ws) == 4
    assert len({w.data_ptr() for w in ws}) == 4  # each copy its own allocation
    assert all(torch.equal(w, ops.w) for w in ws)  # of the same bytes
    assert len(_weights(gpu_like(min_copies=6), GATE_UP_B1, ops)) == 6


def test_hot_l2_and_the_budget_on_the_gpu_path(gpu_like, monkeypatch):
    ops = make_operands(GemmProblem(4, 64, 64), "bf16", "bf16")
    assert len(_weights(gpu_like(cold_l2=False), GATE_UP_B1, ops)) == 1
    # the budget counts the bytes a copy clones: 0.4 x total / copy_bytes
    runner = gpu_like()
    fit = int(MEMORY_FRACTION * H200_TOTAL // copy_bytes(ops))
    assert fit > MAX_COPIES and len(_weights(runner, GATE_UP_B1, ops)) == 4
    big = SimpleNamespace(L2_cache_size=H200_L2, total_memory=int(2.5 * copy_bytes(ops) / MEMORY_FRACTION))
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: big)
    assert len(_weights(runner, GATE_UP_B1, ops)) == 2


def test_a_copy_clones_what_its_formats_read_and_counts_those_bytes():
    fp8 = make_operands(GroupedProblem((2, 0, 1), n=64, k=32), "fp8", "fp8")
    c = operand_copy(fp8)
    cloned = (c.a, c.qa.data, c.qa.scale, c.qw.data, c.qw.scale, c.offsets)
    originals = (fp8.a, fp8.qa.data, fp8.qa.scale, fp8.qw.data, fp8.qw.scale, fp8.offsets)
    assert all(x.data_ptr() != y.data_ptr() and torch.equal(x, y) for x, y in zip(cloned, originals))
    assert c.w is fp8.w  # the bf16 originals of quantized weights: the quantizer's input, shared
    assert copy_bytes(fp8) == sum(t.numel() * t.element_size() for t in originals)
    bf16 = make_operands(GroupedProblem((2, 0, 1), n=64, k=32), "bf16", "bf16")
    assert operand_copy(bf16).w.data_ptr() != bf16.w.data_ptr()  # bf16 weights are what a bf16 row reads
    assert copy_bytes(bf16) == sum(t.numel() * t.element_size() for t in (bf16.a, bf16.w, bf16.offsets))


def test_the_copy_rule_is_part_of_the_measurement():
    assert measurement_of("cuda", True, "graph") == {"l2": "cold", "timer": "graph", "min_copies": 4,
                                                     "copy_memory": MEMORY_FRACTION}
    assert measurement_of("cuda", True, "graph", 2)["min_copies"] == 2
    assert measurement_of("cuda", False, "graph", 4) == {"l2": "hot", "timer": "graph", "min_copies": 1}
    assert measurement_of("cpu", True, "cpu", 4)["min_copies"] == 1
    assert CaseRunner(torch.device("cpu"), TimingConfig(mode="cpu"), min_copies=3).measurement()["min_copies"] == 1
    with pytest.raises(ValueError, match="min_copies"):
        CaseRunner(torch.device("cpu"), TimingConfig(mode="cpu"), min_copies=0)


def test_an_isolated_run_records_the_rule_its_worker_uses():
    from fp4bench.run.worker.pool import IsolatedRunner, WorkerSpec

    init = {"device": "cuda:0", "cold_l2": True, "timing": {"mode": "graph"}, "min_copies": 5}
    assert IsolatedRunner(WorkerSpec(init=init)).measurement()["min_copies"] == 5


def test_a_baseline_timed_another_copy_rule_is_refused_one_without_it_judged_with_a_note():
    from fp4bench.gate.compatibility import (ONE_PLACEMENT, IncompatibleBaseline, check_same_measurement,
                                             measurement_notes)

    now = measurement_of("cuda", True, "graph")
    with pytest.raises(IncompatibleBaseline, match="min_copies=1, this run with min_copies=4"):
        check_same_measurement({**now, "min_copies": 1}, now)
    with pytest.raises(IncompatibleBaseline, match="copy_memory"):
        check_same_measurement({**now, "copy_memory": 0.25}, now)
    old = {"l2": "cold", "timer": "graph"}
    check_same_measurement(old, now)  # not refused
    assert measurement_notes(old, now) == [ONE_PLACEMENT]
    assert measurement_notes(now, now) == []
    assert measurement_notes({"l2": "hot", "timer": "graph"}, measurement_of("cuda", False, "graph")) == []


def test_the_committed_h200_baseline_is_judged_with_the_one_placement_note():

    from fp4bench.gate.baseline import load_baseline
    from fp4bench.gate.compare import compare
    from fp4bench.gate.compatibility import ONE_PLACEMENT

    base = load_baseline(ROOT / "baselines" / "nvidia-h200" / "approved.json")
    assert "min_copies" not in base.sweep
    name, rec = next(iter(base.benchmarks.items()))
    result = compare(base, {name: (rec.windows, rec.extra_info)}, current_sweep=measurement_of("cuda", True, "graph"))
    assert ONE_PLACEMENT in result.notes
    assert ONE_PLACEMENT not in compare(base, {name: (rec.windows, rec.extra_info)}).notes  # nothing to compare with
