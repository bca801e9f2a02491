"""E2M1 encode/decode and FP4 packing against the spec (OCP MX v1.0)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench.formats import e2m1_decode, e2m1_encode, pack_fp4, unpack_fp4

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])

# Doc section 1 table: code -> value, written out by hand (not derived from the implementation).
CODE_VALUES = {0x0: 0.0, 0x1: 0.5, 0x2: 1.0, 0x3: 1.5, 0x4: 2.0, 0x5: 3.0, 0x6: 4.0, 0x7: 6.0,
               0x8: -0.0, 0x9: -0.5, 0xA: -1.0, 0xB: -1.5, 0xC: -2.0, 0xD: -3.0, 0xE: -4.0, 0xF: -6.0}
# Doc section 1.1: every tie point and the code it must round to (ties to the even mantissa).
TIES = {0.25: 0x0, 0.75: 0x2, 1.25: 0x2, 1.75: 0x4, 2.5: 0x4, 3.5: 0x6, 5.0: 0x6}


def threshold_encode(x: torch.Tensor) -> torch.Tensor:
    """Independent encoder: the doc's interval table (vLLM ``cast_to_fp4`` style).

    The magnitude code counts crossed thresholds; ``>`` at ties that round down (0.25, 1.25,
    2.5, 5) and ``>=`` at ties that round up (0.75, 1.75, 3.5). Sign from signbit (0x8 for -0).
    """
    a = x.double().abs()
    mag = ((a > 0.25).int() + (a >= 0.75).int() + (a > 1.25).int() + (a >= 1.75).int()
           + (a > 2.5).int() + (a >= 3.5).int() + (a > 5.0).int())
    return (mag + 8 * torch.signbit(x).int()).to(torch.uint8)


@pytest.mark.parametrize("device", DEVICES)
def test_decode_matches_doc_table(device: str) -> None:
    codes = torch.arange(16, dtype=torch.uint8, device=device)
    got = e2m1_decode(codes)
    assert got.dtype == torch.float32 and got.device.type == device
    for c, v in CODE_VALUES.items():
        assert got[c].item() == v and math.copysign(1, got[c].item()) == math.copysign(1, v), hex(c)


@pytest.mark.parametrize("device", DEVICES)
def test_round_trip_on_grid(device: str) -> None:
    codes = torch.arange(16, dtype=torch.uint8, device=device)
    assert torch.equal(e2m1_encode(e2m1_decode(codes)), codes)  # -0.0 -> 0x8 as the hardware does
    grid = torch.tensor(sorted(set(CODE_VALUES.values())), device=device)
    assert torch.equal(e2m1_decode(e2m1_encode(grid)), grid)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_every_tie_goes_to_even_mantissa(sign: float) -> None:
    x = torch.tensor([sign * t for t in TIES])
    want = torch.tensor([c | (0x8 if sign < 0 else 0) for c in TIES.values()], dtype=torch.uint8)
    assert torch.equal(e2m1_encode(x), want)  # every expected code has mantissa bit 0


def test_neighbours_of_ties_round_to_nearest() -> None:
    ties = torch.tensor(list(TIES), dtype=torch.float32)
    above = torch.nextafter(ties, torch.full_like(ties, 10.0))
    below = torch.nextafter(ties, torch.zeros_like(ties))
    # Just above a tie rounds up to the next grid value; just below rounds down.
    assert e2m1_decode(e2m1_encode(above)).tolist() == [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
    assert e2m1_decode(e2m1_encode(below)).tolist() == [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0]


def test_saturation() -> None:
    big = [6.0, 6.0001, 7.0, 100.0, 1e30, torch.finfo(torch.float32).max]
    x = torch.tensor(big + [-v for v in big])
    assert e2m1_encode(x).tolist() == [0x7] * len(big) + [0xF] * len(big)


def test_negative_zero_policy() -> None:
    # Sign is kept: -0.0 and negatives that round to zero give 0x8 (hardware behaviour, doc 1.1).
    x = torch.tensor([0.0, -0.0, -1e-30, -0.1, -0.25, 0.25, 1e-45])
    assert e2m1_encode(x).tolist() == [0x0, 0x8, 0x8, 0x8, 0x8, 0x0, 0x0]


def test_matches_threshold_table_on_many_random_values() -> None:
    gen = torch.Generator().manual_seed(1234)
    uniform = torch.rand(200_000, generator=gen) * 14 - 7
    wide = torch.randn(50_000, generator=gen) * torch.exp2(torch.randint(-30, 30, (50_000,), generator=gen).float())
    ties = torch.tensor(list(TIES))
    ties = torch.cat((ties, -ties))
    near = torch.cat((ties, torch.nextafter(ties, ties * 2), torch.nextafter(ties, ties * 0)))
    grid = torch.tensor(list(CODE_VALUES.values()))
    x = torch.cat((uniform, wide, near, grid, torch.nextafter(grid, grid + 1), torch.nextafter(grid, grid - 1)))
    got, want = e2m1_encode(x), threshold_encode(x)
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{bad.numel()} mismatches, e.g. x={x[bad[0]].item()} got {got[bad[0]].item()} want {want[bad[0]].item()}"


finite32 = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=200, deadline=None)
@given(st.lists(finite32, min_size=1, max_size=64))
def test_encode_is_nearest_saturating_and_agrees_with_table(values: list[float]) -> None:
    x = torch.tensor(values, dtype=torch.float32)
    codes = e2m1_encode(x)
    assert torch.equal(codes, threshold_encode(x))
    dec = e2m1_decode(codes).double()
    xd = x.double()
    grid = torch.tensor([v for v in CODE_VALUES.values()], dtype=torch.float64)
    best = (xd.clamp(-6, 6)[:, None] - grid[None, :]).abs().min(dim=1).values
    assert torch.equal((xd.clamp(-6, 6) - dec).abs(), best)  # nearest grid value after saturation
    assert torch.equal(torch.signbit(dec), torch.signbit(x))


@settings(max_examples=100, deadline=None)
@given(finite32, finite32)
def test_encode_is_monotone(a: float, b: float) -> None:
    lo, hi = sorted((a, b))
    dec = e2m1_decode(e2m1_encode(torch.tensor([lo, hi])))
    assert dec[0] <= dec[1]


def test_float64_input_is_not_double_rounded() -> None:
    # 0.25 + 2^-40 is above the tie in float64 but rounds to the tie 0.25 in float32.
    x = torch.tensor([0.25 + 2.0 ** -40, -(2.5 + 2.0 ** -40)], dtype=torch.float64)
    assert e2m1_encode(x).tolist() == [0x1, 0xD]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_low_precision_inputs_match_float32(dtype: torch.dtype) -> None:
    x = (torch.randn(4096, generator=torch.Generator().manual_seed(7)) * 3).to(dtype)
    assert torch.equal(e2m1_encode(x), e2m1_encode(x.float()))
    assert e2m1_encode(x).shape == x.shape


def test_encode_does_not_modify_input() -> None:
    x = torch.randn(64)
    before = x.clone()
    e2m1_encode(x)
    assert torch.equal(x, before)


def test_pack_golden_low_nibble_first() -> None:
    codes = torch.tensor([[0x1, 0x2, 0x3, 0xF], [0xA, 0x0, 0x7, 0x8]], dtype=torch.uint8)
    assert pack_fp4(codes).tolist() == [[0x21, 0xF3], [0x0A, 0x87]]
    assert torch.equal(unpack_fp4(pack_fp4(codes)), codes)


@settings(max_examples=50, deadline=None)
@given(st.integers(1, 4), st.integers(1, 16), st.integers(0, 2**31 - 1))
def test_pack_unpack_are_inverse(rows: int, half_k: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 16, (rows, 2 * half_k), generator=gen, dtype=torch.uint8)
    packed = pack_fp4(codes)
    assert packed.shape == (rows, half_k) and packed.dtype == torch.uint8
    assert torch.equal(unpack_fp4(packed), codes)
    raw = torch.randint(0, 256, (rows, half_k), generator=gen, dtype=torch.uint8)
    assert torch.equal(pack_fp4(unpack_fp4(raw)), raw)


@pytest.mark.parametrize("bad, match", [
    (torch.tensor([1, 2], dtype=torch.int32), "floating-point"),
    (torch.tensor([1.0, float("nan")]), r"non-finite.*index \(1,\)"),
    (torch.tensor([float("inf"), 1.0]), "non-finite"),
    (torch.tensor([-float("inf")], dtype=torch.bfloat16), "non-finite"),
])
def test_encode_rejects_bad_input(bad: torch.Tensor, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        e2m1_encode(bad)


def test_decode_pack_unpack_reject_bad_input() -> None:
    with pytest.raises(ValueError, match="uint8"):
        e2m1_decode(torch.tensor([1.0]))
    with pytest.raises(ValueError, match="0..15"):
        e2m1_decode(torch.tensor([16], dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"even.*\(2, 3\)"):
        pack_fp4(torch.zeros(2, 3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        pack_fp4(torch.zeros(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="0..15"):
        pack_fp4(torch.tensor([1, 17], dtype=torch.uint8))
    with pytest.raises(ValueError, match="uint8"):
        unpack_fp4(torch.zeros(4, dtype=torch.int8))
