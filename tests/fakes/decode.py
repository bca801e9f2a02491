"""Independent decoders for the fakes: E2M1 nibbles, 128x4 swizzled scales, E4M3/E8M0 values.

Deliberately not ``fp4bench.formats``: the fakes must decode the way the *library* reads its
arguments (docs/formats.md), so that a layout bug in our marshalling shows
up as a mismatch against the reference instead of being undone by our own inverse.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

# code -> value, bit 3 = sign
E2M1_VALUES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0)


class FakeContractError(RuntimeError):
    """A fake library rejected its arguments (what the real library's checks would reject)."""


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise FakeContractError(msg)


@dataclass(frozen=True)
class Misread:
    """Decoding bugs a fake can reproduce on purpose (negative contract tests)."""

    scales_linear: bool = False      # read a 128x4 buffer as row-major [R', C']
    high_nibble_first: bool = False  # activations' element 2i taken from bits 4-7 (A only: the
                                     # same swap in both operands permutes K alike, product unchanged)
    ignore_global: bool = False      # drop alpha / the TensorWise global decode scales

    def for_weights(self) -> "Misread":
        """The misread applied to the weight operand (nibble order kept correct there)."""
        return replace(self, high_nibble_first=False)


EXACT = Misread()


def pad(x: int, m: int) -> int:
    return (x + m - 1) // m * m


def same_device(*tensors: torch.Tensor) -> None:
    dev = tensors[0].device
    for t in tensors[1:]:
        require(t.device == dev, f"tensors on different devices: {dev} and {t.device}")


def raw_bytes(t: torch.Tensor) -> torch.Tensor:
    """Flat uint8 view of a contiguous 1-byte tensor (fp4x2, e4m3, e8m0, uint8): no value cast."""
    require(t.element_size() == 1, f"expected a 1-byte dtype, got {t.dtype}")
    require(t.is_contiguous(), f"expected a contiguous tensor, got strides {t.stride()}")
    return t.view(torch.uint8).reshape(-1)


def decode_e2m1(packed: torch.Tensor, misread: Misread = EXACT) -> torch.Tensor:
    """uint8 ``[R, K/2]`` -> float32 ``[R, K]``; element 2i in the low nibble (unless misread)."""
    lo, hi = packed & 0xF, packed >> 4
    first, second = (hi, lo) if misread.high_nibble_first else (lo, hi)
    codes = torch.stack((first, second), dim=-1).reshape(*packed.shape[:-1], 2 * packed.shape[-1])
    lut = torch.tensor(E2M1_VALUES, dtype=torch.float32)
    return lut[codes.long()]


def offsets_128x4(rows: int, cols: int, misread: Misread = EXACT) -> torch.Tensor:
    """int64 ``[rows, cols]``: byte offset of scale (r, c) in the 128x4 layout (cuBLAS docs /
    TRT-LLM ``get_sf_out_offset_128x4``), the row-major offset when ``scales_linear``."""
    cp = pad(cols, 4)
    r = torch.arange(rows, dtype=torch.int64)[:, None]
    c = torch.arange(cols, dtype=torch.int64)[None, :]
    if misread.scales_linear:
        return r * cp + c
    return (r // 128) * 128 * cp + (c // 4) * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + (c % 4)


def scale_values(b: torch.Tensor, kind: str) -> torch.Tensor:
    """float32 values of scale bytes: ``"e4m3"`` (UE4M3 as float8_e4m3fn) or ``"e8m0"`` (2^(b-127))."""
    if kind == "e4m3":
        return b.contiguous().view(torch.float8_e4m3fn).to(torch.float32)
    if kind == "e8m0":
        return torch.exp2(b.to(torch.float32) - 127.0)
    raise ValueError(kind)


def read_scales(buf: torch.Tensor, rows: int, cols: int, kind: str, base: int = 0,
                misread: Misread = EXACT) -> torch.Tensor:
    """float32 ``[rows, cols]`` scales of one matrix stored 128x4-swizzled at byte ``base`` of ``buf``."""
    flat = raw_bytes(buf)
    offs = offsets_128x4(rows, cols, misread) + base
    require(rows == 0 or int(offs.max()) < flat.numel(),
            f"scale read out of bounds: need byte {int(offs.max()) if rows else 0}, buffer has {flat.numel()}")
    return scale_values(flat[offs], kind)


def dequant(packed: torch.Tensor, scales: torch.Tensor, block: int, misread: Misread = EXACT) -> torch.Tensor:
    """``e2m1 * scale`` per block (exact in fp32), ``[R, K]``."""
    vals = decode_e2m1(packed, misread)
    return vals * scales.repeat_interleave(block, dim=1)


def write(out: torch.Tensor, acc: torch.Tensor) -> None:
    """Round the fp32 result to the output dtype, as a kernel epilogue does."""
    out.copy_(acc.to(out.dtype))
