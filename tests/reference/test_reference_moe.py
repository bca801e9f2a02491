"""reference_moe: routing, gate/up convention, decoded bytes, modelled intermediate rounding."""

from __future__ import annotations

import pytest
import torch

from fp4bench import formats
from fp4bench.workload.operands import Operands, dequantize, make_operands
from fp4bench.workload.problems import GemmProblem, MoEProblem
from fp4bench.reference.moe import reference_moe, routed_intermediate_amax, unquantized_moe


def _problem(t: int = 6, e: int = 5, k: int = 2, h: int = 64, i: int = 32, seed: int = 0) -> MoEProblem:
    g = torch.Generator().manual_seed(seed)
    ids = tuple(tuple(torch.randperm(e, generator=g)[:k].tolist()) for _ in range(t))
    return MoEProblem(hidden=h, inter=i, num_experts=e, top_k=k, topk_ids=ids)


def _naive(ops: Operands) -> torch.Tensor:
    """Token-by-token, slot-by-slot loop on fully decoded weights (tiny shapes only)."""
    x = dequantize(ops.qa) if ops.qa is not None else ops.a.float()
    w1 = dequantize(ops.qw) if ops.qw is not None else ops.w.float()
    w2 = dequantize(ops.qw2) if ops.qw2 is not None else ops.w2.float()
    inter = ops.problem.inter
    out = torch.zeros(ops.problem.num_tokens, ops.problem.hidden)
    for t in range(ops.problem.num_tokens):
        for slot in range(ops.problem.top_k):
            e = int(ops.topk_ids[t, slot])
            h = w1[e] @ x[t]
            act = torch.nn.functional.silu(h[:inter]) * h[inter:]
            out[t] += ops.topk_weights[t, slot] * (w2[e] @ act)
    return out


@pytest.mark.parametrize("act_fmt,w_fmt", [("bf16", "mxfp4"), ("nvfp4", "nvfp4"), ("bf16", "bf16")])
def test_fp32_path_matches_naive_loop(act_fmt: str, w_fmt: str) -> None:
    ops = make_operands(_problem(), act_fmt, w_fmt, seed=3)
    got = reference_moe(ops, intermediate="fp32")
    want = _naive(ops)
    # Same decoded fp32 operands, different summation order only: K <= 64 terms per dot
    # product, error ~ K * 2^-24 relative to the term magnitudes -> 1e-5 is generous.
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert float(got.abs().max()) > 0


def test_gate_rows_come_first() -> None:
    """silu is applied to x @ w[:, :I]: a strongly negative gate half silences the expert."""
    p = _problem(t=4, e=3, k=1)
    ops = make_operands(p, "bf16", "bf16", seed=1)
    ops.a = ops.a.abs()                        # x > 0 elementwise
    w = ops.w.clone()
    w[:, : p.inter] = -1.0                     # gate pre-activation = -sum|x| (about -50): silu ~ 0
    ops.w = w
    silenced = reference_moe(ops, intermediate="fp32")
    assert float(silenced.abs().max()) < 1e-12 * float(ops.w2.float().abs().max() + 1)
    swapped = w.clone()
    swapped[:, : p.inter], swapped[:, p.inter:] = w[:, p.inter:], w[:, : p.inter]
    ops.w = swapped                            # the same rows as "up" instead leave a live output
    assert float(reference_moe(ops, intermediate="fp32").abs().max()) > 1e-3


def test_bf16_intermediate_is_modelled() -> None:
    ops = make_operands(_problem(t=8, h=128, i=64), "bf16", "mxfp4", seed=2)
    exact = reference_moe(ops, intermediate="fp32")
    kernel_like = reference_moe(ops, intermediate="bf16")
    diff = (kernel_like - exact).abs()
    # Three bf16 roundings (gate/up, activation, down output) each move a value by <= 2^-9
    # relative; propagated through sums of same-sign-agnostic terms the output moves by a few
    # 2^-9 of the *term* magnitudes, bounded here by 2^-6 of max|out|. It must move at all.
    assert float(diff.max()) > 0
    assert float(diff.max()) <= 2 ** -6 * float(exact.abs().max())


def test_nvfp4_intermediate_requantizes_with_the_given_scale() -> None:
    ops = make_operands(_problem(t=8, h=128, i=64), "nvfp4", "nvfp4", seed=4)
    with pytest.raises(ValueError, match="fc2_act_global_scale"):
        reference_moe(ops, intermediate="nvfp4")
    gs = formats.nvfp4_global_scale(routed_intermediate_amax(ops))
    fp4 = reference_moe(ops, intermediate="nvfp4", fc2_act_global_scale=gs)
    bf16 = reference_moe(ops, intermediate="bf16")
    cos = torch.nn.functional.cosine_similarity(fp4.flatten(), bf16.flatten(), dim=0)
    # NVFP4 re-quantization of the intermediate: E2M1 keeps ~2 significant bits per element,
    # vLLM/FlashInfer tests accept cosine > 0.95 for FP4 intermediates.
    assert 0.95 < float(cos) < 1.0
    per_expert = torch.full((ops.problem.num_experts,), float(gs))
    same = reference_moe(ops, intermediate="nvfp4", fc2_act_global_scale=per_expert)
    assert torch.equal(same, fp4)


def test_routed_intermediate_amax_matches_loop() -> None:
    ops = make_operands(_problem(), "bf16", "mxfp4", seed=5)
    x, w1, inter = ops.a.float(), dequantize(ops.qw), ops.problem.inter
    best = 0.0
    for t in range(ops.problem.num_tokens):
        for e in ops.topk_ids[t].tolist():
            h = (w1[e] @ x[t]).to(torch.bfloat16).float()
            best = max(best, float((torch.nn.functional.silu(h[:inter]) * h[inter:]).abs().max()))
    assert float(routed_intermediate_amax(ops)) == pytest.approx(best, rel=1e-6)


def test_only_active_experts_are_decoded() -> None:
    """Expert 4 gets no token; its scales are NaN (0xFF) and must never be decoded."""
    ids = ((0, 1), (2, 3), (1, 0))
    p = MoEProblem(hidden=64, inter=32, num_experts=5, top_k=2, topk_ids=ids)
    ops = make_operands(p, "bf16", "mxfp4", seed=6)
    ops.qw.scales[4] = 0xFF
    ops.qw2.scales[4] = 0xFF
    out = reference_moe(ops)
    assert bool(torch.isfinite(out).all())
    with pytest.raises(ValueError, match="0xFF"):
        dequantize(ops.qw)


def test_quantization_loss_is_fp4_sized() -> None:
    ops = make_operands(_problem(t=8, e=4, h=256, i=128), "bf16", "mxfp4", seed=7)
    ref, plain = reference_moe(ops), unquantized_moe(ops)
    cos = float(torch.nn.functional.cosine_similarity(ref.flatten(), plain.flatten(), dim=0))
    # MXFP4 weights (W4A16) vs bf16 weights: (cosine >= 0.97);
    # strictly below 1 because the weights really were quantized.
    assert 0.97 < cos < 0.9999


def test_bad_inputs_name_the_problem() -> None:
    ops = make_operands(_problem(), "bf16", "mxfp4")
    with pytest.raises(ValueError, match="intermediate"):
        reference_moe(ops, intermediate="fp16")
    with pytest.raises(ValueError, match="activation"):
        reference_moe(ops, activation="gelu")
    with pytest.raises(ValueError, match="fc2_act_global_scale"):
        reference_moe(ops, intermediate="nvfp4", fc2_act_global_scale=torch.ones(3))
    dense = make_operands(GemmProblem(4, 32, 64), "bf16", "bf16")
    with pytest.raises(TypeError, match="MoE operands"):
        reference_moe(dense)


def test_error_bound_covers_the_roundings_it_models() -> None:
    """Dropping every intermediate rounding moves the result by less than the bound, which
    allows one full bf16 ulp per intermediate (each rounding is at most half of one)."""
    from fp4bench.reference.moe import moe_error_bound

    ops = make_operands(_problem(t=8, h=128, i=64), "bf16", "mxfp4", seed=8)
    ref = reference_moe(ops, intermediate="bf16")
    bound = moe_error_bound(ops, ref, "bf16")
    exact = reference_moe(ops, intermediate="fp32")
    assert bool(((exact - ref).abs() <= bound).all())
    assert float(bound.max()) < 0.25 * float(ref.abs().max())   # still far below an O(|ref|) bug


def test_the_fused_nvfp4_intermediate_skips_only_the_bf16_store_of_gate_and_up() -> None:
    """``nvfp4-fused`` (TRT-LLM-gen: SwiGLU on GEMM1's fp32 accumulators) differs from ``nvfp4`` only by
    the E2M1 codes the bf16 store of gate and up moves, and needs the fc2 scale as ``nvfp4`` does."""
    ops = make_operands(_problem(t=8, h=128, i=64), "nvfp4", "nvfp4", seed=4)
    gs = formats.nvfp4_global_scale(routed_intermediate_amax(ops))
    with pytest.raises(ValueError, match="intermediate='nvfp4-fused' needs fc2_act_global_scale"):
        reference_moe(ops, intermediate="nvfp4-fused")
    fused = reference_moe(ops, intermediate="nvfp4-fused", fc2_act_global_scale=gs)
    stored = reference_moe(ops, intermediate="nvfp4", fc2_act_global_scale=gs)
    assert not torch.equal(fused, stored)  # the bf16 store moves some E2M1 codes
    cos = torch.nn.functional.cosine_similarity(fused.flatten(), stored.flatten(), dim=0)
    assert float(cos) > 0.99  # a few flipped codes of one FP4 step, not another computation
