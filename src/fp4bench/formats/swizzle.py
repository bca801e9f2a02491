"""Scale-factor layouts consumed by the FP4 GEMM kernels.

* 128x4 ("blocked", cuBLAS ``[32,4,4]``, CUTLASS): the default everywhere. The ``[R, C]`` scale
  matrix is padded to ``[pad128(R), pad4(C)]`` and cut into 128x4 tiles of 512 bytes,
  row tiles outer, column tiles inner; inside a tile row ``r`` sits at ``(r % 32) * 16 +
  ((r % 128) // 32) * 4``. ``sf_offset_128x4`` is that formula (cuBLAS docs, TRT-LLM
  ``get_sf_out_offset_128x4``); the swizzle itself is a reshape/permute with the same result.
* 8x4 (trtllm-gen, small-M activations): 8x4 tiles of 32 bytes, rows padded to 8.
* Grouped (MoE): each expert's rows padded to a multiple of 128 and swizzled separately; the
  per-expert blocks are concatenated and ``sf_offsets`` gives their starting rows.

Functions return 2-D ``[R', C']`` tensors whose flat (row-major) bytes are in swizzled order,
keeping the input dtype (1-byte dtypes such as float8 are permuted through a uint8 view).

Padding holds zeros unless a ``scale_padding(byte)`` block says otherwise: the measurement fills
the padding of every scale buffer a backend builds with ``POISON_BYTE`` (NaN as E4M3 and as
E8M0), so a kernel whose output depends on padding it should never read shows it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from fp4bench.formats._checks import check_tensor

SF_TILE_ROWS = 128
SF_TILE_COLS = 4


def _pad_to(n: int, m: int) -> int:
    return (n + m - 1) // m * m


def pad128(n: int) -> int:
    """Round ``n`` up to a multiple of 128 (scale rows of the 128x4 layout)."""
    return _pad_to(n, 128)


def pad4(n: int) -> int:
    """Round ``n`` up to a multiple of 4 (scale columns of both layouts)."""
    return _pad_to(n, 4)


def _bytes_view(t: torch.Tensor) -> torch.Tensor:
    """uint8 view of 1-byte dtypes (float8 has patchy op support); other dtypes as they are."""
    return t.view(torch.uint8) if t.element_size() == 1 and t.dtype != torch.bool else t


def _restore(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t.view(dtype) if t.dtype != dtype else t


#: 0xFF is NaN in float8_e4m3fn (S.1111.111) and in E8M0 (the one NaN code): a kernel that
#: multiplies by a padded scale entry makes NaN of what it touches, even of a zero payload
POISON_BYTE = 0xFF


@dataclass
class PaddingFill:
    """What a ``scale_padding`` block fills padding with, and how many padding elements it filled."""

    byte: int
    filled: int = 0


_FILL: ContextVar[PaddingFill | None] = ContextVar("fp4bench_scale_padding", default=None)


@contextmanager
def scale_padding(byte: int) -> Iterator[PaddingFill]:
    """Inside the block every swizzled scale buffer's padding (rows to the tile, columns to 4,
    each expert's rows to 128) holds ``byte`` instead of 0; the yielded object counts the padding
    elements written."""
    if not isinstance(byte, int) or not 0 <= byte <= 0xFF:
        raise ValueError(f"scale_padding: byte must be an int in 0..255, got {byte!r}")
    fill = PaddingFill(byte)
    token = _FILL.set(fill)
    try:
        yield fill
    finally:
        _FILL.reset(token)


def _pad_value(t: torch.Tensor, byte: int) -> float | int:
    """``byte`` for a byte view; for a wider scale dtype the value of the same intent: 0 stays 0,
    anything else is NaN (floating) or -1 (integer)."""
    if t.dtype == torch.uint8 or byte == 0:
        return byte
    return float("nan") if t.is_floating_point() else -1


def _new_padded(s: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """A buffer of ``shape`` filled with the current padding value (0 outside ``scale_padding``)."""
    fill = _FILL.get()
    if fill is None or fill.byte == 0:
        return s.new_zeros(shape)
    return s.new_full(shape, _pad_value(s, fill.byte))


def _count_padding(padded: int, data: int) -> None:
    fill = _FILL.get()
    if fill is not None:
        fill.filled += padded - data


def _padded(s: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Pad the last two dims of ``s`` to ``[rows, cols]`` with the current padding value."""
    out = _new_padded(s, (*s.shape[:-2], rows, cols))
    out[..., : s.shape[-2], : s.shape[-1]] = s
    _count_padding(out.numel(), s.numel())
    return out


def _check_scales(scales: torch.Tensor, fn: str) -> None:
    check_tensor(scales, fn, "scales")
    if scales.dim() not in (2, 3):
        raise ValueError(f"{fn}: scales must be 2-D [R, C] or 3-D [E, R, C], got shape {tuple(scales.shape)}")


def _swizzle(scales: torch.Tensor, tile_rows: int, fn: str, perm: tuple[int, ...], inner: tuple[int, ...]) -> torch.Tensor:
    _check_scales(scales, fn)
    dtype = scales.dtype
    s = _bytes_view(scales.contiguous())
    r, c = s.shape[-2:]
    rp, cp = _pad_to(r, tile_rows), pad4(c)
    lead = s.shape[:-2]
    p = _padded(s, rp, cp).reshape(*lead, rp // tile_rows, *inner, cp // SF_TILE_COLS, SF_TILE_COLS)
    nl = len(lead)
    out = p.permute(*range(nl), *(nl + i for i in perm)).reshape(*lead, rp, cp)
    return _restore(out, dtype)


def _unswizzle(s: torch.Tensor, rows: int, cols: int, tile_rows: int, fn: str,
               view: tuple[int, ...], perm: tuple[int, ...]) -> torch.Tensor:
    check_tensor(s, fn, "s")
    if not (isinstance(rows, int) and isinstance(cols, int)) or rows < 0 or cols < 0:
        raise ValueError(f"{fn}: rows and cols must be non-negative ints, got rows={rows!r} cols={cols!r}")
    rp, cp = _pad_to(rows, tile_rows), pad4(cols)
    batched = s.dim() == 3
    if batched and s.shape[0] == 0:
        raise ValueError(f"{fn}: a 3-D [E, ...] scale tensor needs at least one matrix, got shape "
                         f"{tuple(s.shape)}")
    lead = s.shape[:1] if batched else ()
    per = s[0].numel() if batched else s.numel()
    if per != rp * cp:
        raise ValueError(f"{fn}: expected {rp * cp} scale bytes per matrix ([{rp}, {cp}] for rows={rows}, "
                         f"cols={cols}), got shape {tuple(s.shape)}")
    dtype = s.dtype
    b = _bytes_view(s.contiguous()).reshape(*lead, rp // tile_rows, cp // SF_TILE_COLS, *view)
    nl = len(lead)
    lin = b.permute(*range(nl), *(nl + i for i in perm)).reshape(*lead, rp, cp)
    return _restore(lin[..., :rows, :cols].contiguous(), dtype)


def swizzle_128x4(scales: torch.Tensor) -> torch.Tensor:
    """Linear ``[R, C]`` (or ``[E, R, C]``) scales -> 128x4 layout ``[pad128(R), pad4(C)]`` (per E)."""
    # view (R'/128, 4, 32, C'/4, 4) -> (R'/128, C'/4, 32, 4, 4): row r -> (r//128, (r%128)//32, r%32)
    return _swizzle(scales, SF_TILE_ROWS, "swizzle_128x4", (0, 3, 2, 1, 4), (4, 32))


def unswizzle_128x4(s: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of ``swizzle_128x4``: any shape with ``pad128(rows) * pad4(cols)`` elements (or
    ``[E, ...]`` 3-D, per E) -> linear ``[rows, cols]``; padding is dropped."""
    return _unswizzle(s, rows, cols, SF_TILE_ROWS, "unswizzle_128x4", (32, 4, 4), (0, 3, 2, 1, 4))


def swizzle_8x4(scales: torch.Tensor) -> torch.Tensor:
    """Linear ``[R, C]`` (or ``[E, R, C]``) scales -> 8x4 layout ``[pad8(R), pad4(C)]``."""
    return _swizzle(scales, 8, "swizzle_8x4", (0, 2, 1, 3), (8,))


def unswizzle_8x4(s: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """Inverse of ``swizzle_8x4`` (``pad8(rows) * pad4(cols)`` elements) -> linear ``[rows, cols]``."""
    return _unswizzle(s, rows, cols, 8, "unswizzle_8x4", (8, 4), (0, 2, 1, 3))


def sf_offset_128x4(r: torch.Tensor | int, c: torch.Tensor | int, cols: int) -> torch.Tensor:
    """Flat offset of scale ``(r, c)`` in the 128x4 layout of a matrix with ``cols`` columns."""
    r = torch.as_tensor(r, dtype=torch.int64)
    c = torch.as_tensor(c, dtype=torch.int64)
    cp = pad4(cols)
    return ((r // 128) * 128 * cp + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4))


def sf_offset_8x4(r: torch.Tensor | int, c: torch.Tensor | int, cols: int) -> torch.Tensor:
    """Flat offset of scale ``(r, c)`` in the 8x4 layout of a matrix with ``cols`` columns."""
    r = torch.as_tensor(r, dtype=torch.int64)
    c = torch.as_tensor(c, dtype=torch.int64)
    cp = pad4(cols)
    return (r // 8) * (cp // 4) * 32 + (c // 4) * 32 + (r % 8) * 4 + (c % 4)


def _counts(tokens_per_expert: Sequence[int] | torch.Tensor, total: int | None, fn: str) -> list[int]:
    """Validated per-expert row counts as Python ints (sizes must be known on the host)."""
    seq = tokens_per_expert.tolist() if isinstance(tokens_per_expert, torch.Tensor) else tokens_per_expert
    counts = [int(t) for t in seq]
    if any(t < 0 for t in counts) or (total is not None and sum(counts) != total):
        want = "" if total is None else f" and sum to the {total} scale rows"
        raise ValueError(f"{fn}: tokens_per_expert must be non-negative{want}, got {counts} (sum {sum(counts)})")
    return counts


def _grouped_rows(counts: list[int], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Destination row (in the padded buffer) of every source row, and ``sf_offsets`` [E+1]."""
    n = torch.tensor(counts, dtype=torch.int64, device=device)
    zero = torch.zeros(1, dtype=torch.int64, device=device)
    row_offsets = torch.cat((zero, torch.cumsum(n, 0)))
    sf_offsets = torch.cat((zero, torch.cumsum((n + 127) // 128 * 128, 0)))
    expert = torch.repeat_interleave(torch.arange(len(counts), device=device), n)
    src = torch.arange(int(row_offsets[-1]), device=device)
    return sf_offsets[expert] + (src - row_offsets[expert]), sf_offsets


def swizzle_128x4_grouped(scales: torch.Tensor, tokens_per_expert: Sequence[int] | torch.Tensor
                          ) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-expert 128x4 swizzle of activation scales ``[sum m_e, C]`` (rows sorted by expert).

    Returns ``(buffer [sum pad128(m_e), pad4(C)], sf_offsets [E+1] int64)``; expert e's block is
    rows ``sf_offsets[e]:sf_offsets[e+1]`` (each start a multiple of 128). Because 128x4 tiles never
    straddle 128-row boundaries, swizzling the row-padded concatenation at once equals swizzling
    each expert separately.
    """
    fn = "swizzle_128x4_grouped"
    check_tensor(scales, fn, "scales")
    if scales.dim() != 2:
        raise ValueError(f"{fn}: scales must be 2-D [sum m_e, C], got shape {tuple(scales.shape)}")
    counts = _counts(tokens_per_expert, scales.shape[0], fn)
    dest, sf_offsets = _grouped_rows(counts, scales.device)
    s = _bytes_view(scales.contiguous())
    padded = _new_padded(s, (int(sf_offsets[-1]), scales.shape[1]))
    padded[dest] = s
    _count_padding(padded.numel(), s.numel())
    return _restore(swizzle_128x4(padded), scales.dtype), sf_offsets


def unswizzle_128x4_grouped(buffer: torch.Tensor, tokens_per_expert: Sequence[int] | torch.Tensor,
                            cols: int) -> torch.Tensor:
    """Inverse of ``swizzle_128x4_grouped`` -> linear ``[sum m_e, cols]``."""
    fn = "unswizzle_128x4_grouped"
    check_tensor(buffer, fn, "buffer")
    counts = _counts(tokens_per_expert, None, fn)
    dest, sf_offsets = _grouped_rows(counts, buffer.device)
    want = int(sf_offsets[-1]) * pad4(cols)
    if buffer.numel() != want:
        raise ValueError(f"{fn}: buffer of shape {tuple(buffer.shape)} should hold {want} scales "
                         f"(sum pad128(m_e) = {int(sf_offsets[-1])} rows x pad4({cols}) cols)")
    lin = unswizzle_128x4(buffer, int(sf_offsets[-1]), cols)
    return lin[dest]
