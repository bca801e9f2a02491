"""The bulk tier of a check: how far the whole output of a correct kernel may sit from the
reference, as the norm ratio ``||out - ref||_2 / ||ref||_2``, derived from the format and the path.

Why a second tier: the elementwise bound (``reference.bound``, ``reference.moe.moe_error_bound``)
holds for every element in the worst case, so for the fused MoE its magnitude term
``M = Σ_k w_k |act_k|·|W2_k|`` is about ``sqrt(I)`` times ``|ref|`` -- a kernel with gate and up
swapped, or one that misreads the scale layout, is wrong by O(|ref|) everywhere yet stays under
it. Both sides decode the *same* quantized bytes, so a correct kernel differs from the reference
only where the two round intermediates differently:

* **bf16 roundings.** Each bf16 store moves its value by at most ``u = 2^-8`` relative (RMS
  ``2^-8/sqrt(3)``), so by at most ``u·||x||`` in norm. A kernel may place a rounding where the
  reference does not (or flip it on a near-tie of its fp32 sum); a linear map carries such a
  perturbation, which is uncorrelated with the data, to the output with the same relative norm
  on average. The tolerance adds one ``u`` per rounding site of the path (worst case: every
  site rounded differently, errors aligned). The gate reaches the output through silu, whose
  relative sensitivity ``|g·silu'(g)/silu(g)|`` is at most 1.1, so the gate/up store counts 2.1.
* **E2M1 code flips** (the NVFP4 intermediate re-quantized before GEMM2). A perturbation ``ε·|a|``
  of a value ``a`` before the re-quantization flips its code with probability ``ε|a|/Δ`` (``Δ``:
  the code step there) and then moves it by ``Δ``: ``E|δ|² = ε|a|Δ <= 2ε·a²`` (``Δ/|a| <= 2``, at
  the tie between codes 0 and 0.5), so the flips add ``sqrt(2ε)`` in relative norm. ``ε`` is the
  gate/up bf16 store a kernel may place differently from the reference (2.1 u): ``sqrt(4.2·2^-8)
  = 0.128``. (Rounding gate/up or not moves the re-quantized output by 0.021-0.034 on random
  data at H = 128..2048: the expectation bound is 4x above it.)
* **fp32 summation order** and near-ties of an in-kernel input quantization: an absolute allowance
  ``floor`` (the L2 norm of the elementwise bound's fp32-reordering and input-tie terms), so an
  output with almost nothing in it (a zero row, tiny values) is held to the rigorous terms only.

For a dense GEMM the tier is the elementwise bound summed in norm (``r·u·||ref|| + ||fp32 term||``
is the triangle inequality over ``r·u|ref| + fp32 term``): it cannot fail where the elementwise tier
passes. Margin over correct kernels: the SM90 W4A16 CUTLASS fused MoE measured 55.6 dB against
the reference on an H100/H200 (relative 1.7e-3, GLM-5 b1/b64/b512; the dense torch bf16/fp8 rows
the same 55.6 dB, one bf16 output rounding); the bf16-path tolerance 5.1 u = 0.020 is 12x that,
the NVFP4-path 2 u + 0.128 = 0.136 is 80x it (no NVFP4 fused MoE has a recorded GPU value yet); a swapped
gate/up or misread scale layout gives 0.5-0.9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

BF16_U = 2.0 ** -8  # bf16 unit roundoff (8-bit significand), relative, worst case
SILU_GAIN = 1.1  # max |g·silu'(g)/silu(g)|: the gate's relative error through silu
#: bf16 rounding sites of each fused-MoE path (``reference.moe`` ``intermediate``), in units of u:
#: gate/up store (2.1, through silu), activation store, GEMM2 row store, the output's store
_MOE_ROUNDINGS = {
    "bf16": (SILU_GAIN + 1) + 1 + 1 + 1,
    "nvfp4": 1 + 1,          # GEMM2 row store + output store; gate/up goes into the flip term
    "nvfp4-fused": 1 + 1,
    "fp32": 1,               # the output's store only
}
#: the perturbation before an NVFP4 re-quantization a correct kernel may have: the gate/up bf16
#: store placed differently from the reference (relative, through silu)
_REQUANT_EPS = (SILU_GAIN + 1) * BF16_U


@dataclass(frozen=True)
class BulkTolerance:
    """``||out - ref||_2 <= relative·||ref||_2 + floor``; ``why`` names the terms of ``relative``."""

    relative: float
    floor: float
    why: str

    def limit(self, ref_norm: float) -> float:
        return self.relative * ref_norm + self.floor


def flip_term(eps: float) -> float:
    """Relative norm that E2M1 code flips add when the re-quantized values move by ``eps`` relative."""
    return math.sqrt(2.0 * eps)


def _floor(term: torch.Tensor | None) -> float:
    return 0.0 if term is None else float(term.double().norm())


def gemm_bulk(roundings: int, absolute: torch.Tensor | None = None) -> BulkTolerance:
    """A dense or grouped GEMM with ``roundings`` bf16 stores of its output; ``absolute``: the
    elementwise bound's terms not proportional to ``|ref|`` (fp32 summation, tiny)."""
    return BulkTolerance((1 + BF16_U) ** roundings - 1, _floor(absolute),
                         f"{roundings} bf16 rounding{'s' if roundings != 1 else ''} of the output")


def moe_bulk(intermediate: str, absolute: torch.Tensor | None = None) -> BulkTolerance:
    """A fused MoE on the ``intermediate`` path (``reference.moe``); ``absolute``: the elementwise
    bound's fp32-summation and input-tie terms."""
    if intermediate not in _MOE_ROUNDINGS:
        raise ValueError(f"moe_bulk: unknown intermediate {intermediate!r}; known: {sorted(_MOE_ROUNDINGS)}")
    n = _MOE_ROUNDINGS[intermediate]
    rel, why = n * BF16_U, f"{n:g} bf16 roundings"
    if intermediate.startswith("nvfp4"):
        rel += flip_term(_REQUANT_EPS)
        why += f" + E2M1 flips of the re-quantized intermediate {flip_term(_REQUANT_EPS):.3f}"
    return BulkTolerance(rel, _floor(absolute), why)
