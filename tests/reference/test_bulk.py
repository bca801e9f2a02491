"""The bulk tier's tolerance (``reference.bulk``): a simulated correct fused MoE that rounds every
intermediate differently from the reference passes it, with the path's reference as production builds
it (``reference_and_bound``); its numbers sit far above the recorded correct kernels and far below a
layout bug; and a bad path is named."""

from __future__ import annotations

import math

import pytest
import torch

from fp4bench import formats
from fp4bench.measure.verify import OK, classify
from fp4bench.reference.bound import reference_and_bound
from fp4bench.reference.bulk import BF16_U, gemm_bulk, moe_bulk
from fp4bench.reference.moe import decoded_expert_weight, routed_intermediate_amax
from fp4bench.workload.operands import dequantize, make_operands
from fp4bench.workload.problems import MoEProblem

#: the lowest SQNR a correct kernel recorded against the same-bytes reference (docs/flashinfer-moe.md:
#: the SM90 W4A16 CUTLASS fused MoE on H200, GLM-5 and gpt-oss-120b, every tactic; the dense rows the same)
RECORDED_CORRECT_SQNR_DB = 55.6
#: small tensors: torch's thread pool costs more than it saves (conftest ``one_thread``)
pytestmark = pytest.mark.usefixtures("one_thread")


def _ops(fmt=("bf16", "mxfp4"), t=6, e=4, k=2, h=512, i=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = tuple(tuple(torch.randperm(e, generator=g)[:k].tolist()) for _ in range(t))
    return make_operands(MoEProblem(hidden=h, inter=i, num_experts=e, top_k=k, topk_ids=ids), *fmt, seed=seed)


def _kernel(ops, site, gs2=None) -> torch.Tensor:
    """A fused MoE token by token that passes each intermediate (gate, up, activation, GEMM2 row) through
    ``site`` and re-quantizes the activation to NVFP4 with ``gs2`` when given; stores bf16."""
    x = dequantize(ops.qa) if ops.qa is not None else ops.a.float()
    inter = ops.problem.inter
    experts = range(ops.problem.num_experts)
    w1 = [decoded_expert_weight(ops.qw, ops.w, e) for e in experts]
    w2 = [decoded_expert_weight(ops.qw2, ops.w2, e) for e in experts]
    out = torch.zeros(ops.problem.num_tokens, ops.problem.hidden)
    for t in range(ops.problem.num_tokens):
        for slot in range(ops.problem.top_k):
            e = int(ops.topk_ids[t, slot])
            h = w1[e] @ x[t]
            act = torch.nn.functional.silu(site(h[:inter])) * site(h[inter:])
            if gs2 is None:
                act = site(act)
            else:
                act = dequantize(formats.nvfp4_quantize(act[None], global_scale=gs2))[0]
            out[t] += ops.topk_weights[t, slot] * site(w2[e] @ act)
    return out.to(torch.bfloat16).float()


def _one_u_off(seed):
    """Every value moved by up to one bf16 rounding (2^-8 relative), in a random direction."""
    g = torch.Generator().manual_seed(seed)
    return lambda v: v * (1 + BF16_U * (2 * torch.rand(v.shape, generator=g) - 1))


def _check(out, ref):
    return classify(out, out, ref.out, ref.bound, ref.bulk)


@pytest.mark.parametrize("site_name", ["fp32", "one-u-off"])
def test_a_correct_bf16_path_kernel_that_rounds_every_intermediate_differently_passes(site_name):
    """The worst legitimate case of the bf16 path: no intermediate rounded where the reference rounds
    (fp32 throughout), or each one moved by a full bf16 rounding."""
    ops = _ops()
    ref = reference_and_bound(ops, {"intermediate": "bf16"})
    out = _kernel(ops, (lambda v: v) if site_name == "fp32" else _one_u_off(1))
    res = _check(out, ref)
    assert res.kind == OK, res.detail
    rel = float((out - ref.out).norm() / ref.out.norm())
    assert 1e-3 < rel < ref.bulk.relative / 2  # it moved the output, and the tolerance holds it by 2x


@pytest.mark.parametrize("intermediate", ["nvfp4", "nvfp4-fused"])
def test_a_correct_nvfp4_path_kernel_that_rounds_gate_and_up_differently_passes(intermediate):
    """The NVFP4 paths: gate/up each moved by a bf16 rounding before the re-quantization (the E2M1 codes
    near a tie flip), and the GEMM2 row likewise."""
    ops = _ops(("nvfp4", "nvfp4"))
    gs2 = formats.nvfp4_global_scale(float(routed_intermediate_amax(ops)))
    ref = reference_and_bound(ops, {"intermediate": intermediate, "fc2_act_global_scale": gs2})
    out = _kernel(ops, _one_u_off(2), gs2=torch.as_tensor(gs2, dtype=torch.float32))
    res = _check(out, ref)
    assert res.kind == OK, res.detail
    rel = float((out - ref.out).norm() / ref.out.norm())
    assert 3e-3 < rel < ref.bulk.relative / 2


def test_a_kernel_off_by_a_few_percent_everywhere_fails_the_bulk_tier_only():
    """A systematic 3 % error (a scale slightly off) stays within the loose elementwise bound of the MoE."""
    ops = _ops()
    ref = reference_and_bound(ops, {"intermediate": "bf16"})
    out = (ref.out * 1.03).to(torch.bfloat16).float()
    res = _check(out, ref)
    assert res.worst_bound_ratio <= 1.0 and res.detail.startswith("bulk tier: relative error 0.03")
    assert "over the tolerance 0.02" in res.detail and "(5.1 bf16 roundings; ||out-ref||/||ref||)" in res.detail


def test_the_tolerances_sit_between_correct_kernels_and_layout_bugs():
    correct = 10 ** (-RECORDED_CORRECT_SQNR_DB / 20)  # 1.66e-3
    assert moe_bulk("bf16").relative == pytest.approx(5.1 * 2 ** -8) and moe_bulk("bf16").relative > 10 * correct
    nvfp4 = 2 * 2 ** -8 + math.sqrt(2 * 2.1 * 2 ** -8)
    assert moe_bulk("nvfp4").relative == moe_bulk("nvfp4-fused").relative == pytest.approx(nvfp4)
    assert moe_bulk("nvfp4").relative > 50 * correct and moe_bulk("nvfp4").relative < 0.5 / 3  # faults: 0.5-1
    assert gemm_bulk(1).relative == 2 ** -8 > 2 * correct  # one rounding: rigorous, 2.3x the measured RMS
    assert gemm_bulk(2).why == "2 bf16 roundings of the output" and gemm_bulk(1).floor == 0.0


def test_an_unknown_path_is_named():
    with pytest.raises(ValueError, match=r"moe_bulk: unknown intermediate 'fp16'; known: \['bf16', 'fp32'"):
        moe_bulk("fp16")


def test_a_reference_of_every_kind_carries_its_bulk_tolerance():
    moe = reference_and_bound(_ops(t=2, h=64, i=32), {"intermediate": "fp32"})
    assert moe.bulk.relative == BF16_U and moe.bulk.floor > 0 and moe.bulk.why == "1 bf16 roundings"
