"""NVFP4 quantize/dequantize (kernel "encode" convention)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench.formats import NVFP4, e2m1_decode, e2m1_encode, nvfp4_dequantize, nvfp4_global_scale, nvfp4_quantize, unpack_fp4

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
E4M3_SUB = 2.0 ** -9  # smallest E4M3 subnormal


def codes_of(q: NVFP4) -> torch.Tensor:
    return unpack_fp4(q.data)


def scale_bytes(q: NVFP4) -> list:
    return q.scales.view(torch.uint8).flatten().tolist()


def half_spacing(u: torch.Tensor) -> torch.Tensor:
    """Worst-case RNE-with-saturation error on the E2M1 grid at magnitude u (grid units).

    Spacing is 0.5 below 2, 1 on [2, 4), 2 on [4, 6] -> half of it; above 6 the result is 6 and
    the error is exactly u - 6.
    """
    return torch.where(u < 2, 0.25, torch.where(u < 4, 0.5, torch.where(u <= 6, 1.0, u - 6)))


def check_error_bound(x: torch.Tensor, q: NVFP4) -> None:
    """|x - deq| per element, derived from the format.

    With s = float(SF_b) and g the global scale, an element is stored as RNE_sat(u) with
    u = |x| * g / s, and decoded as e2m1 * s / g. So |x - deq| = |u - RNE_sat(u)| * s / g,
    bounded by ``half_spacing(u) * s / g``. fp32 arithmetic adds at most a few 2^-24 relative
    errors (x * (g/s) and (e2m1 * s) / g), covered by a 2^-20 * (u + 6) slack.
    Blocks whose scale is 0 decode to exactly 0; that happens only when g * amax_b / 6 <= 2^-10
    (half the smallest E4M3 subnormal, the tie rounding to even = 0).
    """
    k = x.shape[-1]
    xb = x.double().reshape(*x.shape[:-1], k // 16, 16)
    deq = nvfp4_dequantize(q).double().reshape(xb.shape)
    s = q.scales.double().unsqueeze(-1)
    g = q.global_scale.double()
    g = g if g.dim() == 0 else g.unsqueeze(-1)
    zero = (s == 0).expand_as(xb)
    assert torch.all(deq[zero] == 0)
    amax_b = xb.abs().amax(-1, keepdim=True)
    assert torch.all((g * amax_b / 6)[s == 0] <= 2.0 ** -10)
    unit = torch.where(s == 0, 1.0, s / g)
    u = xb.abs() / unit
    bound = (half_spacing(u) + 2.0 ** -20 * (u + 6)) * unit
    err = (xb - deq).abs()
    ok = (err <= bound) | zero
    assert bool(ok.all()), f"max excess {(err - bound)[~ok].max().item()}"


@pytest.mark.parametrize("device", DEVICES)
def test_golden_default_global_scale(device: str) -> None:
    # gs = 2688 / 6 = 448. Block 0 (amax 6): SF = e4m3(448 * 6/6) = 448 (byte 0x7E), output scale
    # 448/448 = 1, so codes are the plain E2M1 encodings. Block 1 (amax 3): SF = 224 (0x76), output
    # scale 2, so each x is doubled before rounding.
    b0 = [6, -6, 3, -1.5, 0.75, 1.25, 0.25, -0.25, 5, 2.5, 3.5, -1.75, 0, -0.0, 4, 0.5]
    b1 = [3, -1.5, 0.375, 0.625, 1.25, 2.5, 0.1, 2.9, -0.1, 1.0, -2.0, 0.2, 0.3, 1.75, 2.25, -0.75]
    c0 = [0x7, 0xF, 0x5, 0xB, 0x2, 0x2, 0x0, 0x8, 0x6, 0x4, 0x6, 0xC, 0x0, 0x8, 0x6, 0x1]
    # 2x: 6, -3, 0.75->1, 1.25->1, 2.5->2, 5->4, 0.2->0, 5.8->6, -0.2->-0, 2, -4, 0.4->0.5, 0.6->0.5, 3.5->4, 4.5->4, -1.5
    c1 = [0x7, 0xD, 0x2, 0x2, 0x4, 0x6, 0x0, 0x7, 0x8, 0x4, 0xE, 0x1, 0x1, 0x6, 0x6, 0xB]
    x = torch.tensor([b0 + b1], device=device)
    q = nvfp4_quantize(x)
    assert q.global_scale.dim() == 0 and q.global_scale.item() == 448.0
    assert q.data.shape == (1, 16) and q.scales.shape == (1, 2) and q.data.device.type == device
    assert scale_bytes(q) == [0x7E, 0x76]
    assert codes_of(q).flatten().tolist() == c0 + c1
    want = torch.cat((e2m1_decode(torch.tensor(c0, dtype=torch.uint8)),
                      e2m1_decode(torch.tensor(c1, dtype=torch.uint8)) / 2))
    assert torch.equal(nvfp4_dequantize(q).cpu().flatten(), want)


def test_golden_scale_rounding_down_saturates_the_block_max() -> None:
    # gs = 1, amax 5: SF argument 5/6 = 0.8333 -> E4M3 0.8125 (byte 0x35, the nearer of 0.8125 and
    # 0.875). 5 / 0.8125 = 6.15 -> saturates to code 7, decoding to 6 * 0.8125 = 4.875.
    x = torch.tensor([[5.0, -1.0] + [0.0] * 14])
    q = nvfp4_quantize(x, global_scale=1.0)
    assert scale_bytes(q) == [0x35]
    assert codes_of(q)[0, :2].tolist() == [0x7, 0xA]  # -1/0.8125 = -1.23 -> -1.0
    assert nvfp4_dequantize(q)[0, :2].tolist() == [4.875, -0.8125]


def test_external_global_scale_clamps_block_scale_to_448() -> None:
    # gs = 1 and amax 6000: SF argument 1000 > 448 must be clamped BEFORE the e4m3 cast.
    x = torch.tensor([[6000.0, -100.0, 896.0] + [0.0] * 13])
    q = nvfp4_quantize(x, global_scale=torch.tensor(1.0))
    assert scale_bytes(q) == [0x7E]  # 448, not NaN (0x7F)
    # 6000/448 = 13.4 -> 6 (saturated); -100/448 = -0.223 -> -0; 896/448 = 2 exactly
    assert codes_of(q)[0, :3].tolist() == [0x7, 0x8, 0x4]
    assert nvfp4_dequantize(q)[0, :3].tolist() == [2688.0, -0.0, 896.0]


def test_subnormal_block_scales() -> None:
    # gs = 1: amax 6 * 2^-9 -> SF = 2^-9 (byte 0x01, the smallest E4M3 subnormal);
    # amax 6 * 3 * 2^-9 -> SF = 3 * 2^-9 (byte 0x03).
    blk0 = [6 * E4M3_SUB, -3 * E4M3_SUB] + [0.0] * 14
    blk1 = [18 * E4M3_SUB, 4.5 * E4M3_SUB] + [0.0] * 14
    q = nvfp4_quantize(torch.tensor([blk0 + blk1]), global_scale=1.0)
    assert scale_bytes(q) == [0x01, 0x03]
    assert codes_of(q)[0, [0, 1, 16, 17]].tolist() == [0x7, 0xD, 0x7, 0x3]
    assert nvfp4_dequantize(q)[0, [0, 1, 16, 17]].tolist() == [6 * E4M3_SUB, -3 * E4M3_SUB,
                                                                 18 * E4M3_SUB, 4.5 * E4M3_SUB]


def test_block_scale_that_rounds_to_zero() -> None:
    # gs = 1, amax 6 * 2^-10: SF argument 2^-10 ties between 0 and 2^-9 and rounds to even (0):
    # scale 0, codes 0 (also for the negative element), decoded 0. Slightly larger rounds to 2^-9.
    blk0 = [6 * 2.0 ** -10, -2.0 ** -10] + [0.0] * 14
    blk1 = [1.25 * 6 * 2.0 ** -10] + [0.0] * 15
    q = nvfp4_quantize(torch.tensor([blk0 + blk1]), global_scale=1.0)
    assert scale_bytes(q) == [0x00, 0x01]
    assert codes_of(q)[0, :16].tolist() == [0] * 16
    assert torch.equal(nvfp4_dequantize(q)[0, :16], torch.zeros(16))
    # Block 1: SF argument 1.25 * 2^-10 rounds up to 2^-9; 7.5 * 2^-10 / 2^-9 = 3.75 -> 4.0 (0x6).
    assert codes_of(q)[0, 16].item() == 0x6
    assert nvfp4_dequantize(q)[0, 16].item() == 4 * E4M3_SUB


def test_all_zero_blocks_and_tensor() -> None:
    x = torch.tensor([[0.0] * 8 + [-0.0] * 8 + [1.0, -2.0] + [0.0] * 14])
    q = nvfp4_quantize(x)
    assert scale_bytes(q)[0] == 0 and codes_of(q)[0, :16].tolist() == [0] * 16
    assert scale_bytes(q)[1] != 0
    z = nvfp4_quantize(-torch.zeros(3, 32))
    assert z.global_scale.item() == 1.0  # documented choice for amax == 0
    assert not z.scales.view(torch.uint8).any() and not z.data.any()
    assert torch.equal(nvfp4_dequantize(z), torch.zeros(3, 32))


def test_global_scale_helper() -> None:
    assert nvfp4_global_scale(torch.tensor(6.0)).item() == 448.0
    assert nvfp4_global_scale(0.0).item() == 1.0
    got = nvfp4_global_scale(torch.tensor([[2688.0], [0.0]]))
    assert got.dtype == torch.float32 and got.flatten().tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="finite"):
        nvfp4_global_scale(torch.tensor(float("nan")))
    with pytest.raises(ValueError, match=">= 0"):
        nvfp4_global_scale(-1.0)


def test_default_scales_never_saturate_beyond_e4m3_rounding() -> None:
    # With gs = 2688/amax the SF argument v = gs*amax_b/6 is <= 448, and for normal E4M3 scales
    # (v >= 2^-6) rounding moves v by at most half an ulp = 2^-4 * 2^floor(log2 v) <= v/16, so
    # s >= v * 15/16 and the block max maps to u = 6 v / s <= 6.4: saturation error <= 0.4 units.
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 256, generator=gen) * torch.exp2(torch.randint(-12, 4, (64, 16, 1), generator=gen)
                                                            ).expand(64, 16, 16).reshape(64, 256)
    q = nvfp4_quantize(x)
    s = q.scales.double()
    u_max = x.double().reshape(64, 16, 16).abs().amax(-1) * q.global_scale.double() / s
    normal = s >= 2.0 ** -6
    assert normal.any() and (~normal).any()  # the data covers both regimes
    assert u_max[normal].max() <= 6.4
    assert u_max[normal].max() > 6.0  # ...and the rounding-down case does occur on random data
    check_error_bound(x, q)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(-30, 30), st.integers(0, 2**31 - 1),
       st.sampled_from([None, 1.0, 0.01, 1e4]))
def test_dequantize_error_bound(rows: int, blocks: int, log2_mag: int, seed: int, gs: float | None) -> None:
    gen = torch.Generator().manual_seed(seed)
    k = 16 * blocks
    spread = torch.exp2(torch.randint(-14, 1, (rows, blocks, 1), generator=gen).float()).expand(rows, blocks, 16)
    x = torch.randn(rows, k, generator=gen) * spread.reshape(rows, k) * 2.0 ** log2_mag
    q = nvfp4_quantize(x, global_scale=gs)
    assert q.data.shape == (rows, k // 2) and q.scales.shape == (rows, blocks)
    assert q.data.dtype == torch.uint8 and q.scales.dtype == torch.float8_e4m3fn
    assert not torch.isnan(q.scales.float()).any()
    check_error_bound(x, q)
    # Composition check against the independent rule: codes = RNE_sat(x * (gs / s)).
    s = q.scales.float().unsqueeze(-1)
    oscale = torch.where(s == 0, 0.0, q.global_scale / s)
    want = e2m1_encode((x.reshape(rows, blocks, 16) * oscale)).masked_fill(s == 0, 0)
    assert torch.equal(codes_of(q), want.reshape(rows, k))


def test_per_expert_global_scale() -> None:
    gen = torch.Generator().manual_seed(5)
    w = torch.randn(3, 8, 64, generator=gen) * torch.tensor([1.0, 1e-3, 50.0]).view(3, 1, 1)
    gs = nvfp4_global_scale(w.abs().amax(dim=(1, 2), keepdim=True))
    q = nvfp4_quantize(w, global_scale=gs)
    assert q.global_scale.shape == (3, 1, 1)
    for e in range(3):
        qe = nvfp4_quantize(w[e], global_scale=gs[e, 0, 0])
        assert torch.equal(q.data[e], qe.data)
        assert torch.equal(q.scales[e].view(torch.uint8), qe.scales.view(torch.uint8))
        assert torch.equal(nvfp4_dequantize(q)[e], nvfp4_dequantize(qe))
    check_error_bound(w, q)


def test_bf16_input_and_non_contiguous_input() -> None:
    x = torch.randn(32, 64, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    a, b = nvfp4_quantize(x), nvfp4_quantize(x.float())
    assert torch.equal(a.data, b.data) and torch.equal(a.scales.view(torch.uint8), b.scales.view(torch.uint8))
    t = x.float().t().contiguous().t()  # non-contiguous view of the same values
    c = nvfp4_quantize(t)
    assert torch.equal(c.data, b.data)
    before = x.clone()
    nvfp4_quantize(x)
    assert torch.equal(x, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_bitwise() -> None:
    x = torch.randn(256, 512, generator=torch.Generator().manual_seed(11)).to(torch.bfloat16)
    a, b = nvfp4_quantize(x), nvfp4_quantize(x.cuda())
    assert b.data.is_cuda and b.scales.is_cuda and b.global_scale.is_cuda
    assert torch.equal(a.data, b.data.cpu())
    assert torch.equal(a.scales.view(torch.uint8), b.scales.view(torch.uint8).cpu())
    assert torch.equal(nvfp4_dequantize(a), nvfp4_dequantize(b).cpu())


@pytest.mark.parametrize("x, kwargs, match", [
    (torch.zeros(4, 24), {}, r"K=24.*\(4, 24\).*16"),
    (torch.zeros(4, 0), {}, "positive multiple"),
    (torch.tensor(1.0), {}, "0-d"),
    (torch.zeros(2, 16, dtype=torch.int32), {}, "floating-point"),
    (torch.tensor([[float("nan")] + [0.0] * 15]), {}, r"non-finite.*\(0, 0\)"),
    (torch.tensor([[1.0] * 15 + [float("inf")]]), {"global_scale": 1.0}, r"non-finite.*\(0, 15\)"),
    (torch.ones(2, 16), {"global_scale": 0.0}, "> 0"),
    (torch.ones(2, 16), {"global_scale": float("nan")}, "finite"),
    (torch.ones(2, 16), {"global_scale": torch.ones(3, 1)}, r"broadcast to \(2, 1\)"),
    (torch.ones(2, 16), {"global_scale": torch.ones(2, 16)}, "broadcast"),
])
def test_bad_input_raises(x: torch.Tensor, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        nvfp4_quantize(x, **kwargs)


@pytest.mark.parametrize("x_shape, gs_shape, ok", [
    ((2, 16), (), True), ((2, 16), (1,), True), ((2, 16), (2, 1), True), ((2, 16), (1, 1), True),
    ((2, 16), (2,), False),  # aligned from the right: 2 against the trailing 1
    ((2, 16), (1, 2, 1), False),  # a leading 1 still adds a dimension to the result
    ((2, 16), (3, 1), False), ((2, 16), (2, 16), False), ((16,), (1,), True), ((16,), (2,), False),
    ((3, 2, 16), (3, 1, 1), True), ((3, 2, 16), (1, 2, 1), True), ((3, 2, 16), (3, 2, 1), True),
    ((3, 2, 16), (2, 1), True), ((3, 2, 16), (3, 1), False),
    ((0, 16), (1, 1), True), ((0, 16), (0, 1), True), ((1, 16), (0, 1), False), ((0, 16), (2, 1), False),
])
def test_global_scale_broadcast_rule_edges(x_shape, gs_shape, ok) -> None:
    import re

    from fp4bench.formats.nvfp4 import _check_broadcast

    target = (*x_shape[:-1], 1)
    gs = torch.ones(gs_shape)
    if ok:
        _check_broadcast(gs, torch.Size(x_shape), "NVFP4")
    else:
        with pytest.raises(ValueError, match=re.escape(f"NVFP4: global_scale of shape {gs_shape} must broadcast to "
                                                       f"{target} (x.shape[:-1] + (1,))")):
            _check_broadcast(gs, torch.Size(x_shape), "NVFP4")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=4), st.lists(st.integers(0, 3), max_size=4))
def test_global_scale_broadcast_rule_is_numpys(lead: list[int], gs_shape: list[int]) -> None:
    """The rule is broadcasting that leaves ``x.shape[:-1] + (1,)`` as it is (numpy's
    ``broadcast_shapes`` as the independent oracle)."""
    import numpy as np

    from fp4bench.formats.nvfp4 import _check_broadcast

    target = (*lead, 1)
    try:
        expect = np.broadcast_shapes(tuple(gs_shape), target) == target
    except ValueError:
        expect = False
    try:
        _check_broadcast(torch.empty(gs_shape), torch.Size((*lead, 16)), "f")
        got = True
    except ValueError:
        got = False
    assert got == expect


def test_global_scale_check_does_not_load_sympy(monkeypatch) -> None:
    """``torch.broadcast_shapes`` imports sympy (half a second a worker); per-expert scales are
    checked without it."""
    def refuse(*shapes):
        raise AssertionError("torch.broadcast_shapes called")

    monkeypatch.setattr(torch, "broadcast_shapes", refuse)
    x = torch.randn(3, 2, 32, generator=torch.Generator().manual_seed(5))
    q = nvfp4_quantize(x, global_scale=torch.full((3, 1, 1), 100.0))
    assert q.global_scale.shape == (3, 1, 1) and NVFP4(q.data, q.scales, q.global_scale).shape == x.shape


def test_container_validates_dtypes() -> None:
    q = nvfp4_quantize(torch.randn(2, 32))
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        NVFP4(q.data, q.scales.view(torch.uint8), q.global_scale)
    with pytest.raises(ValueError, match="different shapes"):
        NVFP4(q.data[:, :8], q.scales, q.global_scale)
    with pytest.raises(ValueError, match="float32"):
        NVFP4(q.data, q.scales, q.global_scale.double())
