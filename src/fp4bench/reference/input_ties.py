"""How far a kernel's NVFP4 quantization of (nearly) the same values may be from ours.

A fused MoE that takes bf16 activations and a global scale (FlashInfer's b12x MoE) quantizes
them itself. With the same values and the same encode scale a correct kernel produces our
bytes (``formats.nvfp4_quantize``) except where a value sits within its arithmetic's error of
a rounding boundary: its quantizer uses ``rcp.approx`` reciprocals and reads the global scale
as the reciprocal of the decode scale it is given, a few fp32 ulps from ours. Two boundaries:

* the block scale ``gs * amax_b / 6`` near an E4M3 rounding midpoint (the whole block then
  re-quantizes at the neighbouring scale);
* an element ``x * gs / SF_b`` near an E2M1 midpoint (that element takes the other code).

``TIE_REL`` is the relative window: 2^-18 is 32 fp32 ulps, above the few ulps those reciprocals
and the reciprocal of the given scale contribute (each ``rcp.approx`` <= 1 ulp, a handful chained).

``requant_moves(v, dv, gs)`` bounds ``|NVFP4'(v') - NVFP4(v)|`` (decoded) for any ``|v' - v| <= dv``
and a quantizer within that window of ours -- what a GEMM2 input moves by when GEMM1's input moved:

* a block whose E4M3 scale can differ (``gs * (amax_b -+ max dv) / 6`` widened by the window rounds
  to two values): each side is within one E2M1 half-step (at most 1, between 4 and 6) of its
  ``v * gs / SF``, times ``SF / gs`` -- which also covers the clip at 6 when the scale rounded
  down (``amax * gs / SF_lo <= 6 * 1.0625``, clipped by at most 0.375 SF) -- so every element moves
  by at most ``(SF_lo + SF_hi) / gs + dv <= 2 SF_hi / gs + dv``;
* elsewhere the scale is ours and rounding is monotone: an element moves by the larger decoded
  change of rounding ``y -+ dy`` instead of ``y`` (``y = v gs / SF``, ``dy = dv gs / SF`` plus the
  window), zero unless that interval holds a rounding boundary.

``input_deviation(x, gs)`` is the ``dv = 0`` case (the kernel reads our very values). On bf16 data
a block in a hundred or so is open (8-bit significands times an fp32 scale land *exactly* on E2M1
midpoints far more often than a continuous draw would), and then only its tied elements move; at a
hidden size of thousands nearly every token holds one, and the term, carried rigorously through
both GEMMs, is several times ``|ref|`` there. ``off_ties(x, gs)`` therefore moves each such value
one bf16 ulp toward the rounding we took: same bytes, nothing left open, the term exactly zero.
"""

from __future__ import annotations

import torch

from fp4bench.formats._blocks import block_amax
from fp4bench.formats.e2m1 import E2M1_MAX, e2m1_decode, encode_
from fp4bench.formats.nvfp4 import E4M3_MAX, NVFP4_BLOCK

#: the relative window around a rounding boundary inside which the kernel may round the other way
TIE_REL = 2.0 ** -18


def _e4m3(v: torch.Tensor) -> torch.Tensor:
    return v.clamp(max=E4M3_MAX).to(torch.float8_e4m3fn).to(torch.float32)


def _decoded(y: torch.Tensor) -> torch.Tensor:
    return e2m1_decode(encode_(y.clone()))


def requant_moves(v: torch.Tensor, dv: torch.Tensor | float, global_scale: torch.Tensor | float) -> torch.Tensor:
    """float32 ``[..., K]``: the most a kernel's decoded NVFP4 of any ``v'`` with ``|v' - v| <= dv``
    may differ from ``nvfp4_quantize(v, global_scale)`` decoded (module docstring; K % 16 == 0)."""
    vf = v.to(torch.float32)
    k = vf.shape[-1]
    if k % NVFP4_BLOCK:
        raise ValueError(f"requant_moves: the last dim must be a multiple of {NVFP4_BLOCK}, got {k}")
    gs = torch.as_tensor(global_scale, dtype=torch.float32, device=vf.device).reshape(())
    shape = (*vf.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    blocks = vf.reshape(shape)
    dvb = torch.as_tensor(dv, dtype=torch.float32, device=vf.device).expand_as(vf).reshape(shape)
    amax, damax = block_amax(blocks), dvb.amax(dim=-1, keepdim=True)
    sf = _e4m3(gs * (amax / E2M1_MAX))
    lo = _e4m3(gs * ((amax - damax).clamp(min=0) / E2M1_MAX) * (1 - TIE_REL))
    hi = _e4m3(gs * ((amax + damax) / E2M1_MAX) * (1 + TIE_REL))
    per = torch.where(sf > 0, gs / sf, torch.zeros_like(sf))
    y, dy = blocks * per, dvb * per + TIE_REL * (blocks * per).abs()
    mid = _decoded(y)
    step = torch.maximum((_decoded(y + dy) - mid).abs(), (_decoded(y - dy) - mid).abs()) * (sf / gs)
    whole = 2.0 * torch.maximum(hi, sf) / gs + dvb
    return torch.where(lo != hi, whole, step).reshape(vf.shape)


def input_deviation(x: torch.Tensor, global_scale: torch.Tensor | float) -> torch.Tensor:
    """float32 ``[..., K]``: how far the kernel's decoded NVFP4 of ``x`` (the values it reads,
    quantized with our encode scale ``global_scale``) may be from ours; zero off near-ties."""
    return requant_moves(x, 0.0, global_scale)


def off_ties(x: torch.Tensor, global_scale: torch.Tensor | float) -> torch.Tensor:
    """bf16 ``x`` with every value that opens a block moved by one bf16 ulp toward the rounding our
    quantizer chose: ``nvfp4_quantize`` gives the same bytes and no block stays open, so a kernel that
    quantizes the result itself has one right answer, our bytes, and the bound needs no tie term.

    An element tie (``x * gs / SF`` at an E2M1 midpoint) moves toward the code we took; a scale tie
    moves the block's largest values toward the E4M3 scale we took. One bf16 ulp is 2^-8..2^-7
    relative, far outside ``TIE_REL`` and far inside the distance to the next boundary (the largest
    value of a block encodes to 5.6..6.4, no element tie; the others keep their scale). ValueError
    if a value is still open afterwards (then the premise failed: nothing is assumed).
    """
    if x.dtype != torch.bfloat16:
        raise ValueError(f"off_ties: needs bf16 values (one bf16 ulp is the step), got {x.dtype}")
    k = x.shape[-1]
    gs = torch.as_tensor(global_scale, dtype=torch.float32, device=x.device).reshape(())
    shape = (*x.shape[:-1], k // NVFP4_BLOCK, NVFP4_BLOCK)
    blocks = x.to(torch.float32).reshape(shape)
    amax = block_amax(blocks)
    v = gs * (amax / E2M1_MAX)
    sf = _e4m3(v)
    scale_tie = (_e4m3(v * (1 - TIE_REL)) != _e4m3(v * (1 + TIE_REL))) & (blocks.abs() == amax)
    y = blocks * torch.where(sf > 0, gs / sf, torch.zeros_like(sf))
    elem_tie = encode_(y * (1 - TIE_REL)) != encode_(y * (1 + TIE_REL))
    # +1 on the raw bits of a bf16 grows its magnitude (sign-magnitude), -1 shrinks it
    grow = torch.where(scale_tie, sf > v, _decoded(y).abs() > y.abs())
    step = torch.where(scale_tie | elem_tie, torch.where(grow, 1, -1), 0).to(torch.int16)
    out = (x.reshape(shape).view(torch.int16) + step).view(torch.bfloat16).reshape(x.shape)
    still = int((input_deviation(out, gs) > 0).sum())
    if still:
        raise ValueError(f"off_ties: {still} values still within {TIE_REL:g} of a rounding boundary after one ulp")
    return out
