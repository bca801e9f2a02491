"""NVFP4: E2M1 values in 16-element blocks, one E4M3 scale per block, one FP32 global scale.

Follows the *kernel* ("encode") convention of TRT-LLM / FlashInfer / sgl-kernel / vLLM
(TRT-LLM / FlashInfer / vLLM kernel convention), so the bytes are what the GEMM kernels consume:

    gs     = 448 * 6 / amax(|X|)                        (fp32)
    SF_b   = e4m3( min(gs * (amax(|X_b|) / 6), 448) )   (clamp BEFORE the cast)
    q_i    = RNE_e2m1_sat( x_i * (gs / float(SF_b)) )   (SF_b == 0 -> whole block codes 0)
    deq_i  = (e2m1(q_i) * float(SF_b)) / gs

Exact arithmetic chosen here: all in fp32 with IEEE division (``amax / 6``, then ``* gs``; the
output scale ``gs / float(SF_b)`` is one correctly rounded division, then one multiply). The CUDA
quantizers use ``rcp.approx.ftz`` for 1/6, 1/gs and the output scale, so on values within an
ulp of an E2M1 tie (or an E4M3 tie for the scale) a kernel may pick the neighbouring code: compare
kernel bytes to these with a one-code tolerance, or feed the reference the kernel's bytes.

Blocks whose scale is 0 (all-zero blocks, or ``gs * amax_b / 6 < 2^-10`` which rounds to 0 in
E4M3; the smallest E4M3 subnormal is 2^-9) store scale 0 and codes 0 (+0, even for negative
inputs; a kernel multiplies by 0 and may emit 0x8 = -0 there; decoded values are equal).
Elsewhere negative values that round to zero keep their sign (code 0x8), as the hardware does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp4bench.formats._checks import (
    check_block_dim,
    check_dtype,
    check_floating,
    check_packed,
    check_positive_finite,
    check_tensor,
    raise_non_finite,
)
from fp4bench.formats._blocks import as_kernel_input, block_amax
from fp4bench.formats.e2m1 import E2M1_MAX, e2m1_decode, encode_, pack_unchecked, unpack_fp4

NVFP4_BLOCK = 16
E4M3_MAX = 448.0


@dataclass
class NVFP4:
    """A quantized ``[..., K]`` tensor.

    data:         uint8 ``[..., K/2]``, two E2M1 codes per byte (low nibble = even element).
    scales:       float8_e4m3fn ``[..., K/16]``, linear (unswizzled) layout.
    global_scale: float32 encode scale (``deq = e2m1 * scale / gs``); 0-d, or any shape
                  broadcastable to ``[..., 1]`` (e.g. ``[E, 1, 1]``: one per expert).
    """

    data: torch.Tensor
    scales: torch.Tensor
    global_scale: torch.Tensor

    block_size = NVFP4_BLOCK

    def __post_init__(self) -> None:
        check_dtype(self.data, torch.uint8, "NVFP4", "data")
        check_dtype(self.scales, torch.float8_e4m3fn, "NVFP4", "scales")
        check_dtype(self.global_scale, torch.float32, "NVFP4", "global_scale")
        check_packed(self.data, self.scales, NVFP4_BLOCK, "NVFP4")
        _check_broadcast(self.global_scale, self.shape, "NVFP4")
        check_positive_finite(self.global_scale, "NVFP4", "global_scale")

    @property
    def shape(self) -> torch.Size:
        """Logical (unpacked) shape ``[..., K]``."""
        return torch.Size((*self.data.shape[:-1], 2 * self.data.shape[-1]))


def _check_broadcast(gs: torch.Tensor, shape: torch.Size, fn: str) -> None:
    """``gs`` broadcasts to ``shape[:-1] + (1,)`` without changing it: no more dimensions, and each
    (aligned from the right) 1 or the target's size. Checked on the tuples: ``torch.broadcast_shapes``
    imports sympy, half a second of a worker's first case."""
    target = (*shape[:-1], 1)
    have = tuple(gs.shape)
    ok = len(have) <= len(target) and all(g in (1, t) for g, t in zip(reversed(have), reversed(target)))
    if not ok:
        raise ValueError(f"{fn}: global_scale of shape {tuple(gs.shape)} must broadcast to "
                         f"{tuple(target)} (x.shape[:-1] + (1,))")


def nvfp4_global_scale(amax: torch.Tensor | float) -> torch.Tensor:
    """Encode global scale ``448 * 6 / amax`` as float32; ``amax == 0`` (all-zero data) gives 1.0.

    Any gs works for an all-zero tensor (every block gets scale 0), and 1.0 keeps
    ``alpha = 1 / (gs_a * gs_w)`` finite. Below ``amax = 2688 / 3.4e38`` (about 7.9e-36) the
    quotient overflows fp32; the scale is then clamped to the fp32 maximum, which still maps
    the largest block to an E4M3 scale >= 1 (``gs * amax / 6``), so the data stays representable
    and every output stays finite.
    """
    amax = torch.as_tensor(amax, dtype=torch.float32)
    if amax.numel() and not bool((torch.isfinite(amax) & (amax >= 0)).all()):
        raise ValueError(f"nvfp4_global_scale: amax must be finite and >= 0, got {amax}")
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    gs = ((E4M3_MAX * E2M1_MAX) / safe).clamp_(max=torch.finfo(torch.float32).max)
    return torch.where(amax > 0, gs, torch.ones_like(amax))


def _global_scale_for(amax_b: torch.Tensor, global_scale: torch.Tensor | float | None,
                      shape: torch.Size) -> torch.Tensor:
    """The given encode scale (validated), or 448*6/amax(|x|) from the block maxima."""
    if global_scale is None:
        amax = amax_b.amax() if amax_b.numel() else torch.zeros((), device=amax_b.device)
        return nvfp4_global_scale(amax)
    gs = torch.as_tensor(global_scale, dtype=torch.float32, device=amax_b.device)
    check_positive_finite(gs, "nvfp4_quantize", "global_scale")
    _check_broadcast(gs, shape, "nvfp4_quantize")
    return gs


def _per_block(gs: torch.Tensor) -> torch.Tensor:
    """View a gs broadcastable to ``[..., 1]`` as broadcastable to blocks ``[..., K/16, 1]``."""
    return gs if gs.dim() == 0 else gs.unsqueeze(-1)


def nvfp4_quantize(x: torch.Tensor, global_scale: torch.Tensor | float | None = None) -> NVFP4:
    """Quantize ``x`` (``[..., K]``, K % 16 == 0, finite floats) to NVFP4 on ``x``'s device.

    ``global_scale`` defaults to ``nvfp4_global_scale(amax(|x|))`` (a 0-d tensor); pass one to
    reuse a calibrated scale (then block scales above 448 are clamped) or one per expert.
    """
    check_floating(x, "nvfp4_quantize")
    k = check_block_dim(x, NVFP4_BLOCK, "nvfp4_quantize")
    xf = as_kernel_input(x, "nvfp4_quantize")
    lead = xf.shape[:-1]
    blocks = xf.reshape(*lead, k // NVFP4_BLOCK, NVFP4_BLOCK)
    amax_b = block_amax(blocks)
    if amax_b.numel() and not bool(torch.isfinite(amax_b).all()):  # amax propagates NaN/Inf
        raise_non_finite(x, "nvfp4_quantize")
    gs = _global_scale_for(amax_b, global_scale, xf.shape)
    gs_b = _per_block(gs)
    sf = (gs_b * (amax_b / E2M1_MAX)).clamp_(max=E4M3_MAX).to(torch.float8_e4m3fn)
    sf_f = sf.to(torch.float32)
    zero = sf_f == 0
    # Clamp to fp32 max: only reachable with an absurd external gs (> ~2^119); keeps 0 * scale = 0.
    oscale = torch.where(zero, 0.0, gs_b / sf_f).clamp_(max=torch.finfo(torch.float32).max)
    codes = encode_(blocks * oscale)
    if bool(zero.any()):
        codes.masked_fill_(zero, 0)
    return NVFP4(data=pack_unchecked(codes.reshape(*lead, k)),
                 scales=sf.reshape(*lead, k // NVFP4_BLOCK), global_scale=gs)


def nvfp4_dequantize(q: NVFP4) -> torch.Tensor:
    """Decode to float32 ``[..., K]``: ``(e2m1 * float(scale)) / gs``.

    ``e2m1 * scale`` is exact in fp32 (2- and 4-bit significands); only the division by gs rounds.
    """
    check_tensor(q.data, "nvfp4_dequantize", "q.data")
    k = q.shape[-1]
    lead = q.shape[:-1]
    vals = e2m1_decode(unpack_fp4(q.data)).reshape(*lead, k // NVFP4_BLOCK, NVFP4_BLOCK)
    vals.mul_(q.scales.to(torch.float32).unsqueeze(-1)).div_(_per_block(q.global_scale))
    return vals.reshape(*lead, k)
