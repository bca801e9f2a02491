"""Operands are drawn and quantized once, and the reference decodes those same objects; the FP8
rowwise quantizer; the grouped reference with idle experts."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fp4bench import formats
from fp4bench.workload.operands import FP8_MAX, FP8Rowwise, dequantize, fp8_rowwise_quantize, make_operands, quantize
from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem
from fp4bench.reference.dense import (decoded_activations, decoded_weights, expert_slice, reference_gemm,
                                unquantized_gemm)

DENSE = GemmProblem(24, 40, 64)
GROUPED = GroupedProblem((3, 0, 5, 0, 2), n=32, k=64)


def _bytes(q) -> list[torch.Tensor]:
    return [getattr(q, f.name) for f in dataclasses.fields(q)]


def test_operands_are_seeded_and_quantized_once():
    x = make_operands(DENSE, "nvfp4", "nvfp4", seed=3)
    y = make_operands(DENSE, "nvfp4", "nvfp4", seed=3)
    z = make_operands(DENSE, "nvfp4", "nvfp4", seed=4)
    for qx, qy in ((x.qa, y.qa), (x.qw, y.qw)):
        assert all(torch.equal(u, v) for u, v in zip(_bytes(qx), _bytes(qy)))
    assert not torch.equal(x.a, z.a)
    assert x.a.dtype == torch.bfloat16 and x.a.shape == (24, 64) and x.w.shape == (40, 64)
    assert float(x.a.float().std()) > 0.5  # realistic magnitudes, not zeros
    # the stored quantized objects are exactly quantize() of the stored originals
    for q, orig in ((x.qa, x.a), (x.qw, x.w)):
        assert all(torch.equal(u, v) for u, v in zip(_bytes(q), _bytes(quantize(orig, "nvfp4"))))


def test_reference_decodes_the_stored_bytes_not_the_originals():
    ops = make_operands(DENSE, "nvfp4", "nvfp4", seed=1)
    before = reference_gemm(ops)
    # decode: e2m1 x e4m3 (exact) / global scale, then fp32 matmul
    torch.testing.assert_close(before, dequantize(ops.qa) @ dequantize(ops.qw).t(), rtol=0, atol=0)
    # flip one stored FP4 code: a reference that re-quantized ops.w would not notice
    ops.qw.data[0, 0] ^= 0x07
    after = reference_gemm(ops)
    changed = (after != before).any(dim=0)
    assert changed.tolist() == [True] + [False] * (DENSE.n - 1)  # exactly output column 0 moved


def test_bf16_operands_are_not_quantized():
    ops = make_operands(DENSE, "bf16", "bf16", seed=1)
    assert ops.qa is None and ops.qw is None
    torch.testing.assert_close(decoded_activations(ops), ops.a.float(), rtol=0, atol=0)
    torch.testing.assert_close(reference_gemm(ops), ops.a.float() @ ops.w.float().t(), rtol=0, atol=0)
    torch.testing.assert_close(unquantized_gemm(ops), reference_gemm(ops), rtol=0, atol=0)


def test_quantize_and_dequantize_reject_unknown_input():
    with pytest.raises(ValueError, match="unknown format 'fp6'"):
        quantize(torch.zeros(2, 16), "fp6")
    with pytest.raises(TypeError, match="not a quantized operand: Tensor"):
        dequantize(torch.zeros(2, 16))
    with pytest.raises(TypeError, match="unknown problem type"):
        make_operands("m1n2k3", "bf16", "bf16")


# --- FP8 rowwise -------------------------------------------------------------------------------

E4M3_REL = 2.0 ** -4  # e4m3: 3 stored mantissa bits -> unit roundoff 2^-4 for normal values
E4M3_SUBNORMAL_HALF_STEP = 2.0 ** -10  # smallest subnormal is 2^-9


def test_fp8_rowwise_scale_per_row_and_decode_error():
    gen = torch.Generator().manual_seed(0)
    mags = torch.tensor([1e-3, 1.0, 37.0, 1e4]).unsqueeze(1)  # rows of very different size
    x = (torch.randn(4, 96, generator=gen) * mags).to(torch.bfloat16)
    q = fp8_rowwise_quantize(x)
    assert isinstance(q, FP8Rowwise) and q.data.dtype == torch.float8_e4m3fn and q.scale.shape == (4, 1)
    amax = x.float().abs().amax(dim=1, keepdim=True)
    torch.testing.assert_close(q.scale, amax / FP8_MAX, rtol=0, atol=0)
    # each row's largest element lands on the top code
    assert torch.equal(q.data.float().abs().amax(dim=1), torch.full((4,), FP8_MAX))
    err = (dequantize(q) - x.float()).abs()
    limit = E4M3_REL * x.float().abs() + E4M3_SUBNORMAL_HALF_STEP * q.scale
    assert bool((err <= limit * (1 + 1e-6)).all())


def test_fp8_rowwise_clamps_before_the_cast_and_handles_zero_rows():
    # a row of fp32-subnormal size: amax / (amax / 448) rounds to 448.003 in fp32 (above the top
    # code); the quantizer must clamp, whatever the cast does with out-of-range values
    x = torch.tensor([[1e-38, 1e-38 / 3, -1e-38 / 7, 0.0], [0.0, 0.0, 0.0, 0.0]])
    scale = x.abs().amax(dim=1, keepdim=True) / FP8_MAX
    assert float((x[0, 0] / scale[0])) > FP8_MAX
    q = fp8_rowwise_quantize(x)
    assert float(q.data[0].float().abs().max()) == FP8_MAX
    assert bool(torch.isfinite(q.data.float()).all())
    # an all-zero row gets decode scale 1 and zero codes (never 0/0)
    assert float(q.scale[1]) == 1.0 and not bool(q.data[1].float().any())


def test_fp8_operands_reference_decodes_rowwise():
    ops = make_operands(DENSE, "fp8", "fp8", seed=2)
    expected = (ops.qa.data.float() * ops.qa.scale) @ (ops.qw.data.float() * ops.qw.scale).t()
    torch.testing.assert_close(reference_gemm(ops), expected, rtol=0, atol=0)


# --- grouped -----------------------------------------------------------------------------------


@pytest.mark.parametrize("wfmt", ["nvfp4", "mxfp4"])
def test_grouped_reference_with_idle_experts_is_per_expert_matmul(wfmt):
    ops = make_operands(GROUPED, "nvfp4", wfmt, seed=5)
    assert ops.offsets.tolist() == [0, 3, 3, 8, 8, 10]
    assert ops.a.shape == (10, 64) and ops.w.shape == (5, 32, 64)
    if wfmt == "nvfp4":  # one global scale per expert, as checkpoints store weight_scale_2
        assert ops.qw.global_scale.shape == (5, 1, 1)
        assert ops.qw.global_scale.unique().numel() == 5
    ref = reference_gemm(ops)
    assert ref.shape == (10, 32)
    a = dequantize(ops.qa)
    w_all = dequantize(ops.qw)  # every expert decoded at once: independent of expert_slice
    for e, (lo, hi) in enumerate(zip(ops.offsets[:-1].tolist(), ops.offsets[1:].tolist())):
        if hi > lo:
            torch.testing.assert_close(ref[lo:hi], a[lo:hi] @ w_all[e].t(), rtol=0, atol=0)
    unq = unquantized_gemm(ops)
    for e, (lo, hi) in enumerate([(0, 3), (3, 8), (8, 10)]):
        expert = [0, 2, 4][e]
        torch.testing.assert_close(unq[lo:hi], ops.a[lo:hi].float() @ ops.w[expert].float().t(), rtol=0, atol=0)


def test_expert_slice_keeps_a_shared_global_scale():
    w = torch.randn(3, 8, 32).to(torch.bfloat16)
    q = formats.nvfp4_quantize(w)  # one 0-d global scale for all experts
    s = expert_slice(q, 1, 3)
    assert s.global_scale.dim() == 0
    torch.testing.assert_close(dequantize(s), dequantize(q)[1], rtol=0, atol=0)


def test_moe_operands_shapes_and_routing():
    p = MoEProblem(hidden=64, inter=32, num_experts=4, top_k=2, topk_ids=((0, 1), (2, 3), (1, 2)))
    ops = make_operands(p, "nvfp4", "nvfp4", seed=0)
    assert ops.w.shape == (4, 64, 64) and ops.w2.shape == (4, 64, 32)
    assert ops.topk_ids.tolist() == [[0, 1], [2, 3], [1, 2]]
    torch.testing.assert_close(ops.topk_weights.sum(dim=1), torch.ones(3))
    assert decoded_weights(ops).shape == (4, 64, 64)


@pytest.mark.parametrize("fmt, per_expert", [("nvfp4", True), ("nvfp4", False), ("mxfp4", False), ("fp8", False)])
def test_chunked_quantization_is_bit_identical(monkeypatch, fmt, per_expert):
    """Large operands are quantized in expert chunks (memory); the bytes must not change."""
    import fp4bench.workload.operands as o

    x = (torch.randn(12, 32, 64, generator=torch.Generator().manual_seed(5)) * 3).to(torch.bfloat16)
    whole = o.quantize(x, fmt, per_expert)
    monkeypatch.setattr(o, "CHUNK_ELEMENTS", 32 * 64 * 5)  # 5 experts per chunk: 3 uneven chunks
    chunked = o.quantize(x, fmt, per_expert)
    for f in dataclasses.fields(whole):
        a, b = getattr(whole, f.name), getattr(chunked, f.name)
        if a.dtype == torch.float8_e4m3fn:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        assert torch.equal(a, b), f.name
