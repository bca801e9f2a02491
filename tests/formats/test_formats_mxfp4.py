"""MXFP4 quantize/dequantize with both scale rules (OCP MX v1.0)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench.formats import MXFP4, mxfp4_dequantize, mxfp4_quantize, unpack_fp4

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def block(*head: float) -> list[float]:
    return list(head) + [0.0] * (32 - len(head))


def codes_of(q: MXFP4) -> torch.Tensor:
    return unpack_fp4(q.data).reshape(*q.scales.shape, 32)


def half_spacing(u: torch.Tensor) -> torch.Tensor:
    """Worst-case |u - RNE_sat(u)| on the E2M1 grid (0.25 / 0.5 / 1 by binade; u - 6 above 6)."""
    return torch.where(u < 2, 0.25, torch.where(u < 4, 0.5, torch.where(u <= 6, 1.0, u - 6)))


@pytest.mark.parametrize("device", DEVICES)
def test_golden_rceil_vs_floor(device: str) -> None:
    # amax 7.5:  rceil e = ceil(log2 1.25) = 1 (byte 128): 7.5/2 = 3.75 -> 4, -3/2 -> -1.5, 0.9/2 = 0.45 -> 0.5
    #            floor e = floor(log2 7.5) - 2 = 0 (byte 127): 7.5 saturates to 6, -3, 0.9 -> 1.0
    # amax 13:   rceil e = ceil(log2 2.17) = 2 (129): 13/4 = 3.25 -> 3;  floor e = 3 - 2 = 1 (128): 6.5 -> 6
    # amax 6:    both e = 0 (127; rceil hits the exact power of two 6/6 = 1): codes unchanged
    # amax 3:    both e = -1 (126): 3/0.5 = 6
    x = torch.tensor([block(7.5, -3.0, 0.9), block(13.0), block(6.0, -0.25, 5.0), block(3.0, 1.25)], device=device)
    r = mxfp4_quantize(x, scale_rounding="rceil")
    f = mxfp4_quantize(x, scale_rounding="floor")
    assert r.scales.device.type == device and r.scales.dtype == torch.uint8
    assert r.scales.flatten().tolist() == [128, 129, 127, 126]
    assert f.scales.flatten().tolist() == [127, 128, 127, 126]
    rc, fc = codes_of(r).cpu(), codes_of(f).cpu()
    assert rc[0, 0, :3].tolist() == [0x6, 0xB, 0x1] and fc[0, 0, :3].tolist() == [0x7, 0xD, 0x2]
    assert rc[1, 0, 0].item() == 0x5 and fc[1, 0, 0].item() == 0x7
    assert rc[2, 0, :3].tolist() == fc[2, 0, :3].tolist() == [0x7, 0x8, 0x6]  # 5 -> tie -> 4
    assert rc[3, 0, :2].tolist() == fc[3, 0, :2].tolist() == [0x7, 0x4]  # 1.25/0.5 = 2.5 -> 2
    rd, fd = mxfp4_dequantize(r).cpu(), mxfp4_dequantize(f).cpu()
    assert rd[0, :3].tolist() == [8.0, -3.0, 1.0] and fd[0, :3].tolist() == [6.0, -3.0, 1.0]
    assert rd[1, 0].item() == 12.0 and fd[1, 0].item() == 12.0


def test_exponent_clamp_and_extremes() -> None:
    tiny = 6 * 2.0 ** -127          # fp32 subnormal; both rules give e = -127 exactly (byte 0)
    x = torch.tensor([block(tiny, -tiny / 4), block(1e-42), block(1e30, -1e29)])
    for rule in ("rceil", "floor"):
        q = mxfp4_quantize(x, scale_rounding=rule)
        assert q.scales[0, 0].item() == 0 and codes_of(q)[0, 0, :2].tolist() == [0x7, 0xB]  # 6, -1.5
        assert mxfp4_dequantize(q)[0, :2].tolist() == [tiny, -tiny / 4]
        assert q.scales[1, 0].item() == 0 and codes_of(q)[1, 0, 0].item() == 0  # clamped at -127
    # 1e30: rceil e = ceil(log2(1e30 / 6)) = ceil(97.07) = 98 (byte 225);
    #       floor e = floor(log2 1e30) - 2 = floor(99.66) - 2 = 97 (byte 224)
    assert mxfp4_quantize(x, scale_rounding="rceil").scales[2, 0].item() == 225
    assert mxfp4_quantize(x, scale_rounding="floor").scales[2, 0].item() == 224


def test_all_zero_blocks() -> None:
    x = torch.tensor([block(*([-0.0] * 32)), block(1.0, -1.0)])
    for rule in ("rceil", "floor"):
        q = mxfp4_quantize(x, scale_rounding=rule)
        assert q.scales[0, 0].item() == 0 and not codes_of(q)[0].any()  # byte 0, codes +0
        assert torch.equal(mxfp4_dequantize(q)[0], torch.zeros(32))
        assert q.scales[1, 0].item() != 0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(-100, 100), st.integers(0, 2**31 - 1),
       st.sampled_from(["rceil", "floor"]))
def test_scale_rule_and_error_bound(rows: int, blocks: int, log2_mag: int, seed: int, rule: str) -> None:
    gen = torch.Generator().manual_seed(seed)
    k = 32 * blocks
    x = torch.randn(rows, k, generator=gen) * 2.0 ** log2_mag
    q = mxfp4_quantize(x, scale_rounding=rule)
    assert q.data.shape == (rows, k // 2) and q.scales.shape == (rows, blocks)
    xb = x.double().reshape(rows, blocks, 32)
    amax = xb.abs().amax(-1)
    e = q.scales.double() - 127
    u_max = amax / torch.exp2(e)
    unclamped = e > -127
    if rule == "rceil":   # smallest power of two with amax / 2^e <= 6: nothing saturates
        assert bool((u_max <= 6).all())
        assert bool((u_max[unclamped] > 3).all())
    else:                 # OCP floor: amax / 2^e in [4, 8), values above 6 saturate
        assert bool(((u_max[unclamped] >= 4) & (u_max[unclamped] < 8)).all())
    # Division and multiplication by 2^e are exact, so the only error is E2M1 rounding:
    # |x - deq| <= half_spacing(|x| / 2^e) * 2^e, with no slack needed.
    scale = torch.exp2(e).unsqueeze(-1)
    deq = mxfp4_dequantize(q).double().reshape(xb.shape)
    assert bool(((xb - deq).abs() <= half_spacing(xb.abs() / scale) * scale).all())


def test_bf16_matches_float32_and_input_untouched() -> None:
    x = torch.randn(16, 128, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    before = x.clone()
    a, b = mxfp4_quantize(x), mxfp4_quantize(x.float())
    assert torch.equal(a.data, b.data) and torch.equal(a.scales, b.scales)
    assert torch.equal(x, before)
    w = torch.randn(2, 4, 64, generator=torch.Generator().manual_seed(4))
    q = mxfp4_quantize(w)
    assert q.scales.shape == (2, 4, 2) and mxfp4_dequantize(q).shape == (2, 4, 64)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_bitwise() -> None:
    x = torch.randn(128, 256, generator=torch.Generator().manual_seed(8)) * 1e-3
    for rule in ("rceil", "floor"):
        a, b = mxfp4_quantize(x, scale_rounding=rule), mxfp4_quantize(x.cuda(), scale_rounding=rule)
        assert torch.equal(a.data, b.data.cpu()) and torch.equal(a.scales, b.scales.cpu())
        assert torch.equal(mxfp4_dequantize(a), mxfp4_dequantize(b).cpu())


@pytest.mark.parametrize("x, kwargs, match", [
    (torch.zeros(2, 48), {}, r"K=48.*32"),
    (torch.zeros(2, 32, dtype=torch.int64), {}, "floating-point"),
    (torch.tensor([block(1.0, float("nan"))]), {}, r"non-finite.*\(0, 1\)"),
    (torch.ones(2, 32), {"scale_rounding": "even"}, "'rceil' or 'floor'"),
])
def test_bad_input_raises(x: torch.Tensor, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mxfp4_quantize(x, **kwargs)


def test_dequantize_rejects_nan_scale_and_container_checks_shapes() -> None:
    q = mxfp4_quantize(torch.ones(2, 64))
    bad = MXFP4(q.data, q.scales.clone().fill_(0xFF))
    with pytest.raises(ValueError, match="0xFF"):
        mxfp4_dequantize(bad)
    with pytest.raises(ValueError, match="uint8"):
        MXFP4(q.data, q.scales.float())
    with pytest.raises(ValueError, match="different shapes"):
        MXFP4(q.data, q.scales[:, :1])
