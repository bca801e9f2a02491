"""CaseRunner: availability gate -> shape gate -> operands -> prepare -> check -> time, with the
outcome of each step recorded (skip / unsupported / failed / measured)."""

from __future__ import annotations

import math

import pytest
import torch

from fp4bench.backends.base import Availability, Prepared, Tactic, TacticUnsupported
from fp4bench.backends.registry import get_backend
from fp4bench.backends.builtin.torch_reference import TorchReference
from fp4bench.run.case import FAILED, MEASURED, SKIPPED, UNSUPPORTED, CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.workload.problems import GemmProblem, GroupedProblem, Origin

CPU = torch.device("cpu")
FAST = TimingConfig(mode="cpu", min_samples=3, max_samples=5, time_budget_s=0.0, target_rel_ci=None)
DENSE = GemmProblem(16, 32, 64, Origin("glm-5", 16, 1, "uniform", "shared_down"))


class Counting(TorchReference):
    """torch-reference that counts its calls, optionally failing in one of the steps."""

    name = "counting"

    def __init__(self, available: bool = True, raise_tactic: bool = False, corrupt: bool = False):
        self.available, self.raise_tactic, self.corrupt = available, raise_tactic, corrupt
        self.prepares = self.runs = 0

    def availability(self, device):
        return Availability.yes("9.9") if self.available else Availability.no("library xyz is not installed")

    def tactics(self, problem, device):
        return [Tactic(None, "default"), Tactic(256, "tile256")]

    def prepare(self, problem, operands, device):
        self.prepares += 1
        return super().prepare(problem, operands, device)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        self.runs += 1
        if self.raise_tactic and tactic.value == 256:
            raise TacticUnsupported("tile 256 needs K >= 256")
        out = super().run(prepared, tactic)
        if self.corrupt:
            out[-1, -1] = out[-1, -1] * 1.5 + 1.0
        return out


def _runner() -> CaseRunner:
    return CaseRunner(CPU, FAST)


def test_unavailable_backend_is_skipped_before_any_work():
    b = Counting(available=False)
    res = _runner().run(b, DENSE, Tactic(None, "default"))
    assert res.status == SKIPPED
    assert res.reason == "counting: library xyz is not installed"
    assert b.prepares == 0 and b.runs == 0 and res.timing is None


def test_unsupported_shape_is_skipped_with_the_backends_reason():
    bf16 = get_backend("torch-bf16")
    res = _runner().run(bf16, GroupedProblem((2, 1), n=16, k=20), Tactic(None, "default"))
    assert res.status == SKIPPED
    assert res.reason == "torch-bf16: torch._grouped_mm needs K % 8 == 0 (16-byte rows), K = 20"


def test_wrong_kind_is_skipped():
    class DenseOnly(Counting):
        kinds = frozenset({"dense"})

    res = _runner().run(DenseOnly(), GroupedProblem((2, 1), n=16, k=32), Tactic(None, "default"))
    assert res.status == SKIPPED and res.reason == "counting: counting does not run grouped problems"


def test_tactic_that_cannot_initialize_is_unsupported_data_not_a_crash():
    b = Counting(raise_tactic=True)
    r = _runner()
    res = r.run(b, DENSE, Tactic(256, "tile256"))
    assert res.status == UNSUPPORTED
    assert res.reason == "tile 256 needs K >= 256"
    assert res.extra_info["availability"] == "unsupported: tile 256 needs K >= 256"
    assert res.extra_info["tactic"] == "tile256" and res.timing is None
    # the other tactic of the same backend on the same problem still runs
    assert r.run(b, DENSE, Tactic(None, "default")).status == MEASURED


def test_failing_check_fails_and_is_not_timed():
    b = Counting(corrupt=True)
    res = _runner().run(b, DENSE, Tactic(None, "default"))
    assert res.status == FAILED
    assert res.reason.startswith("mismatch: 1/512 elements beyond the bound")
    assert res.timing is None and b.runs == 2  # the two checked calls, nothing timed
    assert res.extra_info["check"] == "mismatch" and res.check.worst_bound_ratio > 1


def test_measured_case_extra_info():
    b = Counting()
    res = _runner().run(b, DENSE, Tactic(None, "default"))
    assert res.status == MEASURED and res.reason == "" and res.check.ok
    x = res.extra_info
    assert x["backend"] == "counting" and x["backend_version"] == "9.9" and x["tactic"] == "default"
    assert x["problem"] == DENSE.id and x["kind"] == "dense" and (x["m"], x["n"], x["k"]) == (16, 32, 64)
    assert (x["model"], x["batch"], x["role"]) == ("glm-5", 16, "shared_down")
    assert x["act_format"] == x["weight_format"] == "nvfp4"
    assert x["availability"] == "ok" and x["check"] == "ok" and x["check_detail"] == ""
    for key in ("max_rel_err", "worst_bound_ratio", "sqnr_db", "e2e_cosine", "e2e_sqnr_db"):
        assert isinstance(x[key], float) and math.isfinite(x[key]), key
    assert 0 < x["worst_bound_ratio"] <= 1
    assert x["timer"] == "cpu perf_counter" and x["rotating_copies"] == 1
    assert x["stopped_by"] in ("budget", "max_samples")
    assert x["l2"] == "hot"  # no rotating copies on a CPU
    assert x["flops"] == 2 * 16 * 32 * 64
    assert x["bytes"] == DENSE.bytes_moved("nvfp4", "nvfp4")
    med = res.timing.median_s
    assert x["tflops"] == pytest.approx(x["flops"] / med / 1e12)
    assert x["tbps"] == pytest.approx(x["bytes"] / med / 1e12)
    assert "pct_peak_compute" not in x  # no peak table for a CPU
    assert 3 <= len(res.timing.samples_s) <= 5 and all(s > 0 for s in res.timing.samples_s)
    # the timed calls ran after the two checked ones
    assert b.runs >= 2 + FAST.warmup_calls + 1 + 3


def test_grouped_extra_info():
    p = GroupedProblem((3, 0, 5), n=16, k=32)
    res = _runner().run(Counting(), p, Tactic(None, "default"))
    assert res.status == MEASURED
    assert res.extra_info["tokens_per_expert"] == [3, 0, 5] and res.extra_info["active_experts"] == 2


def test_operands_and_reference_are_cached_and_shared_across_backends():
    r = _runner()
    ops = r.operands(DENSE, "nvfp4", "nvfp4")
    assert r.operands(DENSE, "nvfp4", "nvfp4") is ops  # quantized once
    assert r.reference(ops) is r.reference(ops)
    prep = TorchReference().prepare(DENSE, ops, CPU)
    assert prep.args["ops"] is ops  # the backend gets the very objects the reference decodes
    # a tiny cache evicts the least recently used
    small = CaseRunner(CPU, FAST, cache_size=1)
    first = small.operands(DENSE, "nvfp4", "nvfp4")
    small.operands(GemmProblem(8, 32, 64), "nvfp4", "nvfp4")
    assert small.operands(DENSE, "nvfp4", "nvfp4") is not first


def test_prepare_runs_once_per_backend_and_problem_across_tactics():
    """A tactic sweep reuses the prepared layouts; a new problem or backend prepares afresh."""
    r = CaseRunner(CPU, FAST, replays=0)
    b, other = Counting(), Counting()
    for t in b.tactics(DENSE, CPU):
        assert r.run(b, DENSE, t).status == MEASURED
    assert b.prepares == 1  # CPU: no rotating copies, so exactly one prepare for both tactics
    r.run(other, DENSE, Tactic(None, "default"))
    assert other.prepares == 1
    r.run(b, GemmProblem(8, 32, 64, Origin("glm-5", 8, 1, "uniform", "shared_down")), Tactic(None, "default"))
    r.run(b, DENSE, Tactic(None, "default"))
    assert b.prepares == 3  # the cache holds one entry: back to DENSE prepares again
    # the replays' second operand set: two more prepares (its own and the case's again), once
    # per backend and problem, shared by every tactic like the case's own
    replayed = Counting()
    for t in replayed.tactics(DENSE, CPU):
        assert _runner().run(replayed, DENSE, t).status == MEASURED
    assert replayed.prepares == 6  # two runners: 3 each
    r2, again = _runner(), Counting()
    for t in again.tactics(DENSE, CPU):
        res = r2.run(again, DENSE, t)
        # FAST has no time budget: the fewest replays, each operand set twice (measure.replays)
        assert res.status == MEASURED and res.extra_info["replays"] == 4 and res.extra_info["replays_failed"] == 0
    assert again.prepares == 3


def test_only_the_reference_opts_out_of_graph_timing():
    """Every GPU backend is timed inside CUDA graphs (launch gaps excluded); an opt-out on one of
    them would silently turn its µs-scale numbers into launch-bound event timing."""
    from fp4bench.backends.registry import all_backends

    opted_out = {b.name for b in all_backends() if b.no_graph_reason is not None}
    assert opted_out == {"torch-reference"}
    assert "not graph-capturable" in TorchReference.no_graph_reason


def test_moe_reference_carries_the_unquantized_layer_for_the_end_to_end_metric():
    """MoE cases record e2e cosine/SQNR against the bf16 layer, like dense and grouped cases."""
    from fp4bench.measure.verify import cosine
    from fp4bench.workload.problems import MoEProblem
    from fp4bench.reference.moe import unquantized_moe

    p = MoEProblem(hidden=64, inter=32, num_experts=4, top_k=2, topk_ids=((0, 1), (2, 3), (1, 2), (3, 0)))
    r = _runner()
    ops = r.operands(p, "bf16", "mxfp4")
    ref = r.reference(ops)
    assert ref.unquantized is not None
    torch.testing.assert_close(ref.unquantized, unquantized_moe(ops))
    c = cosine(ref.unquantized, ref.out)
    # 4-bit weights with an 8-bit power-of-two scale per 32: a few % quantization loss, never exact
    assert 0.9 < c < 1.0
