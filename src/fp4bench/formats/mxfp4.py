"""MXFP4 (OCP MX): E2M1 values in 32-element blocks, one UE8M0 power-of-two scale per block.

No global scale (OCP Microscaling Formats v1.0). The scale exponent rule must be chosen explicitly:

* ``"rceil"`` (NVIDIA: cuBLAS docs, TRT-LLM/FlashInfer quantizer, PyTorch ``to_mxfp``):
  ``e = ceil(log2(amax_b / 6))``; every scaled value is <= 6, nothing saturates.
* ``"floor"`` (OCP MX spec, torchao default): ``e = floor(log2(amax_b)) - 2`` (2 = E2M1 emax);
  scaled maxima land in [4, 8) and values above 6 saturate to 6.

Exponents come from integer arithmetic on ``torch.frexp`` (``r = m * 2^ex``, m in [0.5, 1)),
never from the torch e8m0 cast (which rounds midpoints up, matching neither rule). ``amax_b / 6``
is one IEEE fp32 division (the CUDA quantizer multiplies by an approximate 1/6; results differ
only when ``amax_b / 6`` is within an ulp of a power of two). The exponent is clamped to
[-127, 127] and stored as ``byte = e + 127``; scale and values are ``2^(byte - 127)`` exactly,
so dividing by it is exact. All-zero blocks get scale byte 0 (2^-127, what converting 0 to
E8M0 gives) and codes 0 (+0). Byte 0xFF (NaN in E8M0) is never produced and is rejected on decode.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from fp4bench.formats._checks import check_block_dim, check_dtype, check_floating, check_packed, raise_non_finite
from fp4bench.formats._blocks import as_kernel_input, block_amax
from fp4bench.formats.e2m1 import E2M1_MAX, e2m1_decode, encode_, pack_unchecked, unpack_fp4

MXFP4_BLOCK = 32
E8M0_BIAS = 127
E8M0_NAN = 0xFF
ScaleRounding = Literal["rceil", "floor"]


@dataclass
class MXFP4:
    """A quantized ``[..., K]`` tensor.

    data:   uint8 ``[..., K/2]``, two E2M1 codes per byte (low nibble = even element).
    scales: uint8 E8M0 codes ``[..., K/32]`` (value ``2^(byte - 127)``), linear layout.
    """

    data: torch.Tensor
    scales: torch.Tensor

    block_size = MXFP4_BLOCK

    def __post_init__(self) -> None:
        check_dtype(self.data, torch.uint8, "MXFP4", "data")
        check_dtype(self.scales, torch.uint8, "MXFP4", "scales")
        check_packed(self.data, self.scales, MXFP4_BLOCK, "MXFP4")

    @property
    def shape(self) -> torch.Size:
        """Logical (unpacked) shape ``[..., K]``."""
        return torch.Size((*self.data.shape[:-1], 2 * self.data.shape[-1]))


def e8m0_to_float(scales: torch.Tensor) -> torch.Tensor:
    """Exact float32 value of E8M0 bytes: the byte is the fp32 exponent field (byte 0 -> 2^-127,
    a subnormal built from its bit pattern). Callers must exclude 0xFF."""
    bits = scales.to(torch.int32) << 23
    bits = torch.where(scales == 0, 1 << 22, bits)
    return bits.view(torch.float32)


def mxfp4_scale_exponent(amax: torch.Tensor, scale_rounding: ScaleRounding) -> torch.Tensor:
    """Unclamped int32 scale exponent for block maxima ``amax`` (> 0, float32) under the given rule."""
    if scale_rounding == "rceil":
        m, ex = torch.frexp(amax / E2M1_MAX)
        return ex - (m == 0.5).to(torch.int32)  # exact power of two: ceil(log2 r) = ex - 1
    if scale_rounding == "floor":
        _, ex = torch.frexp(amax)
        return ex - 3  # floor(log2 amax) = ex - 1, minus E2M1 emax 2
    raise ValueError(f"mxfp4: scale_rounding must be 'rceil' or 'floor', got {scale_rounding!r}")


def mxfp4_quantize(x: torch.Tensor, scale_rounding: ScaleRounding = "rceil") -> MXFP4:
    """Quantize ``x`` (``[..., K]``, K % 32 == 0, finite floats) to MXFP4 on ``x``'s device."""
    check_floating(x, "mxfp4_quantize")
    k = check_block_dim(x, MXFP4_BLOCK, "mxfp4_quantize")
    xf = as_kernel_input(x, "mxfp4_quantize")
    lead = xf.shape[:-1]
    blocks = xf.reshape(*lead, k // MXFP4_BLOCK, MXFP4_BLOCK)
    amax_b = block_amax(blocks)
    if amax_b.numel() and not bool(torch.isfinite(amax_b).all()):  # amax propagates NaN/Inf
        raise_non_finite(x, "mxfp4_quantize")
    e = mxfp4_scale_exponent(amax_b, scale_rounding).clamp_(-E8M0_BIAS, E8M0_BIAS)
    zero = amax_b == 0
    sbytes = (e + E8M0_BIAS).to(torch.uint8).masked_fill_(zero, 0)
    codes = encode_(blocks / e8m0_to_float(sbytes))
    if bool(zero.any()):
        codes.masked_fill_(zero, 0)
    return MXFP4(data=pack_unchecked(codes.reshape(*lead, k)), scales=sbytes.reshape(*lead, k // MXFP4_BLOCK))


def mxfp4_dequantize(q: MXFP4) -> torch.Tensor:
    """Decode to float32 ``[..., K]``: ``e2m1 * 2^(byte - 127)`` (exact)."""
    if q.scales.numel() and bool((q.scales == E8M0_NAN).any()):
        raise ValueError(f"mxfp4_dequantize: scales of shape {tuple(q.scales.shape)} contain byte 0xFF, "
                         f"which is NaN in E8M0")
    k = q.shape[-1]
    lead = q.shape[:-1]
    vals = e2m1_decode(unpack_fp4(q.data)).reshape(*lead, k // MXFP4_BLOCK, MXFP4_BLOCK)
    return vals.mul_(e8m0_to_float(q.scales).unsqueeze(-1)).reshape(*lead, k)
