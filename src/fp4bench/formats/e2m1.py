"""E2M1 (FP4) element codes: encode, decode, and two-per-byte packing.

A code is ``s e1 e0 m`` (bit 3 sign, 2-bit exponent with bias 1, 1-bit mantissa); magnitudes are
``0, 0.5, 1, 1.5, 2, 3, 4, 6``; there is no Inf or NaN (OCP Microscaling Formats v1.0, E2M1).

Encoding matches the hardware ``cvt.rn.satfinite.e2m1x2.f32``: round to nearest, ties to the
even mantissa (``m = 0``), saturate at +-6. The sign bit is always kept, so ``-0.0`` and negative
values that round to zero encode to ``0x8`` (negative zero), as the hardware does (measured on the
GPU). Decode of 0x8 gives ``-0.0``. NaN/Inf inputs are rejected with ``ValueError``.

Packing: element ``2i`` in the low nibble, ``2i+1`` in the high nibble, along
the last dimension.
"""

from __future__ import annotations

import torch

from fp4bench.formats._checks import check_dtype, check_finite, check_floating

E2M1_MAX = 6.0
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
_SIGNED_VALUES = E2M1_MAGNITUDES + tuple(-v for v in E2M1_MAGNITUDES)  # index = code (0x8 -> -0.0)


def _work_dtype(x: torch.Tensor) -> torch.dtype:
    """float64 stays float64 (no double rounding); narrower floats are exact in float32."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def encode_(s: torch.Tensor) -> torch.Tensor:
    """RNE-saturating E2M1 encode of a finite float32/float64 tensor that the caller owns.

    Hot path: no validation, and ``s`` is overwritten (in-place ops avoid allocating
    full-size float temporaries, the dominant CPU cost on large matrices).

    Arithmetic rounding, not a threshold table: the E2M1 grid has spacing 0.5 on [0, 2),
    1 on [2, 4) and 2 on [4, 6]. Clamp ``|x|`` to 6, find the region r in {0, 1, 2}, divide
    ``2|x|`` by ``2^r`` (exact: powers of two), and ``round_`` (round half to even) gives an
    integer k whose parity is the mantissa bit, so ties go to m = 0. Then ``code = k + 2r``:
    region 0: k in 0..4 -> codes 0..4; region 1: k in 2..4 -> 4..6; region 2: k in 2..3 -> 6..7.
    With the sign: ``k + 2*[|x| >= 2] + 2*[|x| >= 4] + 8*signbit(x)`` (-0.0 and small negatives -> 0x8).
    """
    sign = torch.signbit(s).view(torch.uint8)
    s.abs_().clamp_(max=E2M1_MAX)
    ge2 = (s >= 2.0).view(torch.uint8)
    ge4 = (s >= 4.0).view(torch.uint8)
    div = (ge2 + 1).add_(ge4, alpha=2)  # 2^r in {1, 2, 4}
    codes = s.mul_(2.0).div_(div).round_().to(torch.uint8)
    return codes.add_(ge2, alpha=2).add_(ge4, alpha=2).add_(sign, alpha=8)


def e2m1_encode(x: torch.Tensor) -> torch.Tensor:
    """Encode real values to uint8 E2M1 codes (0..15), same shape and device as ``x``.

    Round to nearest, ties to even mantissa, saturating at +-6; sign kept (``-0.1 -> 0x8``).
    Raises ValueError for non-floating or non-finite input.
    """
    check_floating(x, "e2m1_encode")
    xw = x.to(_work_dtype(x), copy=True)
    check_finite(xw, "e2m1_encode")
    return encode_(xw)


def e2m1_decode(codes: torch.Tensor) -> torch.Tensor:
    """Decode uint8 E2M1 codes (0..15) to float32 via the 16-entry signed table (0x8 -> -0.0)."""
    check_dtype(codes, torch.uint8, "e2m1_decode", "codes")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError(f"e2m1_decode: codes must be in 0..15 (one nibble), got max {int(codes.max())} "
                         f"in tensor of shape {tuple(codes.shape)}; unpack packed bytes with unpack_fp4 first")
    lut = torch.tensor(_SIGNED_VALUES, dtype=torch.float32, device=codes.device)
    return lut[codes.to(torch.int32)]


def pack_fp4(codes: torch.Tensor) -> torch.Tensor:
    """Pack codes ``[..., K]`` into bytes ``[..., K/2]``: ``byte = code[2i] | code[2i+1] << 4``."""
    check_dtype(codes, torch.uint8, "pack_fp4", "codes")
    if codes.dim() < 1 or codes.shape[-1] % 2:
        raise ValueError(f"pack_fp4: last dimension must be even (two codes per byte), got shape "
                         f"{tuple(codes.shape)}")
    if codes.numel() and int(codes.max()) > 15:
        raise ValueError(f"pack_fp4: codes must be in 0..15, got max {int(codes.max())} in tensor of "
                         f"shape {tuple(codes.shape)}")
    return pack_unchecked(codes)


def pack_unchecked(codes: torch.Tensor) -> torch.Tensor:
    """``pack_fp4`` without validation, for codes the quantizers just produced (hot path)."""
    return codes[..., 0::2] | (codes[..., 1::2] << 4)


def unpack_fp4(packed: torch.Tensor) -> torch.Tensor:
    """Unpack bytes ``[..., K/2]`` into codes ``[..., K]`` (low nibble first)."""
    check_dtype(packed, torch.uint8, "unpack_fp4", "packed")
    if packed.dim() < 1:
        raise ValueError("unpack_fp4: packed must have at least one dimension, got a 0-d tensor")
    pairs = torch.stack((packed & 0xF, packed >> 4), dim=-1)
    return pairs.reshape(*packed.shape[:-1], 2 * packed.shape[-1])
