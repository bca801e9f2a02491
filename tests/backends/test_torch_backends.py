"""The pure-torch rows (torch-bf16, torch-reference, torch-fp8) on a CPU: gating, buffers, and a
passing correctness check through the real CaseRunner on tiny dense and grouped problems."""

from __future__ import annotations

import pytest
import torch

from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.registry import all_backends, get_backend
from fp4bench.run.case import MEASURED, CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem

CPU = torch.device("cpu")
FAST = TimingConfig(mode="cpu", warmup_calls=1, min_samples=3, max_samples=3, time_budget_s=0.0,
                    target_rel_ci=None)
PROBLEMS = [GemmProblem(5, 48, 64), GemmProblem(1, 16, 32),
            GroupedProblem((3, 0, 5, 0, 2), n=32, k=64), GroupedProblem((0, 1), n=16, k=32)]


@pytest.fixture(scope="module")
def runner() -> CaseRunner:
    return CaseRunner(CPU, FAST)


@pytest.mark.parametrize("name", ["torch-bf16", "torch-reference"])
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.id)
def test_cpu_rows_pass_their_check(runner, name, problem):
    b = get_backend(name)
    assert b.availability(CPU).ok
    res = runner.run(b, problem, DEFAULT_TACTIC)
    assert res.status == MEASURED, res.reason
    assert res.check.kind == "ok" and 0 < res.check.worst_bound_ratio <= 1
    # quantization loss vs the unquantized product is recorded, not judged
    if name == "torch-bf16":
        assert res.check.e2e_sqnr_db > 40  # bf16 in, bf16 out
    else:
        assert 10 < res.check.e2e_sqnr_db < 30  # two NVFP4 operands: ~18 dB on Gaussian data


def test_bf16_dense_writes_the_prepared_buffer():
    p = GemmProblem(4, 16, 32)
    b = get_backend("torch-bf16")
    prep = b.prepare(p, make_operands(p, "bf16", "bf16"), CPU)
    assert prep.out.dtype == torch.bfloat16 and prep.out.shape == (4, 16)
    assert b.run(prep, DEFAULT_TACTIC) is prep.out  # so the verify poisoning can see unwritten rows


def test_bf16_grouped_offsets_and_alignment():
    b = get_backend("torch-bf16")
    p = GroupedProblem((3, 0, 5), n=16, k=32)
    prep = b.prepare(p, make_operands(p, "bf16", "bf16"), CPU)
    assert prep.args["offs"].dtype == torch.int32 and prep.args["offs"].tolist() == [3, 3, 8]
    assert b.unsupported_reason(GroupedProblem((1, 1), n=16, k=20)) == \
        "torch._grouped_mm needs K % 8 == 0 (16-byte rows), K = 20"
    assert b.unsupported_reason(GroupedProblem((1, 1), n=16, k=24)) is None
    assert b.unsupported_reason(GemmProblem(1, 16, 20)) is None  # torch.mm has no such rule


def test_reference_backend_shares_the_operands():
    b = get_backend("torch-reference")
    p = GemmProblem(4, 16, 32)
    ops = make_operands(p, "nvfp4", "nvfp4")
    prep = b.prepare(p, ops, CPU)
    assert prep.args["ops"] is ops
    assert b.run(prep, DEFAULT_TACTIC) is prep.out and prep.out.dtype == torch.bfloat16


def test_fp8_row_is_gated_on_cpu_with_a_reason():
    b = get_backend("torch-fp8")
    a = b.availability(CPU)
    assert not a.ok and "no CUDA device" in a.reason
    assert b.unsupported_reason(GemmProblem(1, 24, 32)) == \
        "FP8 _scaled_mm needs K % 16 == 0 and N % 16 == 0 (K=32, N=24)"
    assert b.unsupported_reason(GemmProblem(1, 32, 32)) is None


def test_moe_problems_are_not_run_by_the_torch_rows():
    from fp4bench.workload.problems import MoEProblem

    p = MoEProblem(hidden=32, inter=16, num_experts=2, top_k=1, topk_ids=((0,), (1,)))
    for name in ("torch-bf16", "torch-reference", "torch-fp8"):
        assert get_backend(name).unsupported_reason(p) == f"{name} does not run moe problems"
    assert {"torch-bf16", "torch-reference", "torch-fp8"} <= {b.name for b in all_backends()}
