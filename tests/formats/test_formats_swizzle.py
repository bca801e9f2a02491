"""Scale-factor layouts: 128x4, 8x4 and the per-expert grouped layout."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench import formats
from fp4bench.formats import (
    nvfp4_quantize,
    pad4,
    pad128,
    sf_offset_8x4,
    sf_offset_128x4,
    swizzle_8x4,
    swizzle_128x4,
    swizzle_128x4_grouped,
    unswizzle_8x4,
    unswizzle_128x4,
    unswizzle_128x4_grouped,
)


def ids(rows: int, cols: int) -> torch.Tensor:
    """Distinct non-zero entries, so every position is identifiable and padding (0) is visible."""
    return torch.arange(1, rows * cols + 1, dtype=torch.int64).reshape(rows, cols)


def random_bytes(rows: int, cols: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(1, 256, (rows, cols), generator=torch.Generator().manual_seed(seed), dtype=torch.uint8)


def check_against_formula(sw: torch.Tensor, s: torch.Tensor, offset_fn, row_tile: int) -> None:
    """Every (r, c) sits at offset_fn(r, c, C) in the flat output; every other slot is zero padding."""
    r_, c_ = s.shape
    assert sw.shape == (-(-r_ // row_tile) * row_tile, pad4(c_))
    r, c = torch.meshgrid(torch.arange(r_), torch.arange(c_), indexing="ij")
    off = offset_fn(r.flatten(), c.flatten(), c_)
    flat = sw.flatten()
    assert torch.equal(flat[off], s.flatten())
    pad = torch.ones(flat.numel(), dtype=torch.bool)
    pad[off] = False
    assert not flat[pad].any()


def test_offset_formula_golden() -> None:
    # Hand-evaluated from the doc's formula: row r%32 strides 16 B, row group (r%128)//32 strides 4 B,
    # column tile strides 512 B, row tile strides 128 * C' B.
    assert sf_offset_128x4(0, 0, 8).item() == 0
    assert sf_offset_128x4(1, 0, 8).item() == 16
    assert sf_offset_128x4(32, 0, 8).item() == 4
    assert sf_offset_128x4(0, 3, 8).item() == 3
    assert sf_offset_128x4(0, 4, 8).item() == 512
    assert sf_offset_128x4(128, 0, 8).item() == 1024
    assert sf_offset_128x4(128, 0, 6).item() == 1024  # C = 6 pads to 8
    assert sf_offset_128x4(127, 5, 6).item() == 512 + 31 * 16 + 3 * 4 + 1
    assert sf_offset_8x4(1, 0, 8).item() == 4 and sf_offset_8x4(0, 4, 8).item() == 32
    assert sf_offset_8x4(8, 0, 8).item() == 64


@pytest.mark.parametrize("rows, k, numel", [(128, 64, 512), (150, 96, 2048), (7, 7168, 57344), (300, 2048, 49152)])
def test_swizzled_numel_matches_measured_sizes(rows: int, k: int, numel: int) -> None:
    x = torch.randn(rows, k, generator=torch.Generator().manual_seed(rows))
    q = nvfp4_quantize(x)
    sw = swizzle_128x4(q.scales)
    assert sw.numel() == numel and sw.shape == (pad128(rows), pad4(k // 16))
    assert sw.dtype == torch.float8_e4m3fn
    check_against_formula(sw.view(torch.uint8), q.scales.view(torch.uint8), sf_offset_128x4, 128)
    back = unswizzle_128x4(sw, rows, k // 16)
    assert torch.equal(back.view(torch.uint8), q.scales.view(torch.uint8))
    assert torch.equal(unswizzle_128x4(sw.flatten(), rows, k // 16).view(torch.uint8), q.scales.view(torch.uint8))


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 300), st.integers(1, 13))
def test_128x4_matches_formula_and_inverts(rows: int, cols: int) -> None:
    s = ids(rows, cols)
    sw = swizzle_128x4(s)
    check_against_formula(sw, s, sf_offset_128x4, 128)
    assert torch.equal(unswizzle_128x4(sw, rows, cols), s)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 13))
def test_8x4_matches_formula_and_inverts(rows: int, cols: int) -> None:
    s = ids(rows, cols)
    sw = swizzle_8x4(s)
    check_against_formula(sw, s, sf_offset_8x4, 8)
    assert torch.equal(unswizzle_8x4(sw, rows, cols), s)


def test_tile_structure_independent_check() -> None:
    # Independent of the formula: the first 512-byte tile of a [128, 4] matrix holds, at
    # [i, j, k] of its (32, 4, 4) view, the scale of row 32*j + i, column k.
    s = random_bytes(128, 4)
    tile = swizzle_128x4(s).flatten()[:512].reshape(32, 4, 4)
    for j in range(4):
        assert torch.equal(tile[:, j, :], s[32 * j: 32 * (j + 1), :])


def test_batched_3d_and_dtypes() -> None:
    w = torch.randn(3, 130, 96, generator=torch.Generator().manual_seed(1))
    sc = nvfp4_quantize(w).scales  # [3, 130, 6] float8
    sw = swizzle_128x4(sc)
    assert sw.shape == (3, 256, 8) and sw.dtype == torch.float8_e4m3fn
    for e in range(3):
        assert torch.equal(sw[e].view(torch.uint8), swizzle_128x4(sc[e]).view(torch.uint8))
    assert torch.equal(unswizzle_128x4(sw, 130, 6).view(torch.uint8), sc.view(torch.uint8))
    s8 = swizzle_8x4(sc)
    assert s8.shape == (3, 136, 8)
    assert torch.equal(unswizzle_8x4(s8, 130, 6).view(torch.uint8), sc.view(torch.uint8))
    # uint8 and float8 views give the same bytes
    assert torch.equal(swizzle_128x4(sc.view(torch.uint8)), sw.view(torch.uint8))


def test_grouped_layout_offsets_and_blocks() -> None:
    counts = [3, 0, 130, 1]
    cols = 6
    s = random_bytes(sum(counts), cols, seed=7)
    buf, sf_offsets = swizzle_128x4_grouped(s, counts)
    assert sf_offsets.tolist() == [0, 128, 128, 384, 512]  # prefix sums of pad128(m_e)
    assert sf_offsets.dtype == torch.int64
    assert buf.shape == (512, 8)
    starts = [0, 3, 3, 133, 134]
    for e, m in enumerate(counts):
        blk = buf[sf_offsets[e]: sf_offsets[e + 1]]
        if m:
            assert torch.equal(blk, swizzle_128x4(s[starts[e]: starts[e + 1]]))  # swizzled separately
        assert blk.numel() % 512 == 0  # each expert's block is whole 128x4 tiles (TMA alignment)
    assert torch.equal(unswizzle_128x4_grouped(buf, counts, cols), s)
    assert torch.equal(unswizzle_128x4_grouped(buf.flatten(), torch.tensor(counts), cols), s)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 260), min_size=1, max_size=5), st.integers(1, 9))
def test_grouped_inverse(counts: list[int], cols: int) -> None:
    s = ids(sum(counts), cols)
    buf, off = swizzle_128x4_grouped(s, counts)
    assert buf.shape == (sum(pad128(m) for m in counts), pad4(cols))
    assert off[-1].item() == buf.shape[0]
    assert torch.equal(unswizzle_128x4_grouped(buf, counts, cols), s)


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match=r"2-D \[R, C\] or 3-D.*\(5,\)"):
        swizzle_128x4(torch.zeros(5, dtype=torch.uint8))
    with pytest.raises(ValueError, match=r"expected 1024 scale bytes.*rows=7, cols=8"):
        unswizzle_128x4(torch.zeros(512, dtype=torch.uint8), 7, 8)
    with pytest.raises(ValueError, match="expected 64"):
        unswizzle_8x4(torch.zeros(32, dtype=torch.uint8), 9, 4)
    with pytest.raises(ValueError, match="sum to the 5 scale rows"):
        swizzle_128x4_grouped(torch.zeros(5, 4, dtype=torch.uint8), [2, 2])
    with pytest.raises(ValueError, match="non-negative"):
        swizzle_128x4_grouped(torch.zeros(5, 4, dtype=torch.uint8), [6, -1])
    with pytest.raises(ValueError, match=r"should hold 2048.*256 rows"):
        unswizzle_128x4_grouped(torch.zeros(512, dtype=torch.uint8), [1, 1], 8)


@pytest.mark.parametrize("rows, cols", [(1, 3), (130, 8), (128, 4)])
def test_scale_padding_fills_exactly_the_padding_and_counts_it(rows: int, cols: int) -> None:
    s = torch.randint(0, 0x7F, (rows, cols), dtype=torch.uint8)  # no 0xFF among the scales
    plain = formats.swizzle_128x4(s)
    pad = plain.numel() - rows * cols
    with formats.scale_padding(formats.POISON_BYTE) as fill:
        poisoned = formats.swizzle_128x4(s.view(torch.float8_e4m3fn))
    assert fill.filled == pad
    flat = poisoned.view(torch.uint8).reshape(-1)
    assert int((flat == 0xFF).sum()) == pad  # every padding byte, nothing else
    assert torch.isnan(poisoned.float()).sum() == pad  # 0xFF reads as NaN in E4M3
    assert torch.equal(formats.unswizzle_128x4(poisoned.view(torch.uint8), rows, cols), s)
    assert int((plain.reshape(-1) != 0).sum()) == int((s != 0).sum())  # outside the block: zeros


def test_scale_padding_reaches_every_expert_block() -> None:
    counts, cols = [3, 0, 130], 6
    s = torch.randint(0, 0x7F, (sum(counts), cols), dtype=torch.uint8)
    with formats.scale_padding(0xFF) as fill:
        buf, offs = formats.swizzle_128x4_grouped(s, counts)
    assert fill.filled == buf.numel() - s.numel()
    assert int((buf == 0xFF).sum()) == buf.numel() - s.numel()
    assert torch.equal(formats.unswizzle_128x4_grouped(buf, counts, cols), s)
    with pytest.raises(ValueError, match="byte must be an int in 0..255"):
        with formats.scale_padding(256):
            pass
