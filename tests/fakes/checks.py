"""Compare an adapter's output with ``fp4bench.reference.dense`` under a tolerance derived from the formats.

Derivation. Both sides decode exactly (an E2M1 value times an E4M3/E8M0 scale is exact in fp32).
Then, with u = 2^-24 (fp32 unit roundoff) and mag = sum_k |a_k| |w_k| (decoded operands):

* the reference divides every element by its global scale (one rounding each) and sums K
  products in fp32; the fake sums K exact-operand products in fp32 and multiplies by alpha,
  itself two roundings from ``1/(gs_a*gs_w)``. Each side is within about (K + 4) u * mag of the
  exact product, so the two fp32 results differ by at most (2K + 8) u * mag;
* the kernel's output is rounded to bf16: round-to-nearest with 8 significant bits changes a
  value by at most 2^-8 of itself. ``torch._scaled_mm`` v1 rounds twice (the kernel's bf16 output,
  then ``out * alpha`` in fp32 rounded back to bf16): r = (1 + 2^-8)^n (1 + u) - 1 for n roundings.

Bound per element: |out - ref| <= r |ref| + (1 + r) (2K + 8) u mag. A mis-decoded scale or nibble
moves results by whole scale factors (>= 2x) and fails it by orders of magnitude.
"""

from __future__ import annotations

import torch

from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GroupedProblem
from fp4bench.reference.dense import decoded_activations, decoded_weights, reference_gemm

U32 = 2.0 ** -24
BF16_ROUNDING = 2.0 ** -8


def _abs_product(ops: Operands) -> torch.Tensor:
    a = decoded_activations(ops).abs().double()
    w = decoded_weights(ops).abs().double()
    if isinstance(ops.problem, GroupedProblem):
        out = torch.zeros((a.shape[0], ops.problem.n), dtype=torch.float64)
        offs = ops.offsets.tolist()
        for e in range(ops.problem.num_experts):
            if offs[e + 1] > offs[e]:
                out[offs[e]:offs[e + 1]] = a[offs[e]:offs[e + 1]] @ w[e].T
        return out
    return a @ w.T


def excess(out: torch.Tensor, ops: Operands, roundings: int = 1) -> float:
    """max |out - ref| / bound over all elements: <= 1 means the output matches the reference."""
    ref = reference_gemm(ops).double()
    k = ops.problem.k
    r = (1 + BF16_ROUNDING) ** roundings * (1 + U32) - 1
    bound = r * ref.abs() + (1 + r) * (2 * k + 8) * U32 * _abs_product(ops) + 1e-30
    return float(((out.double() - ref).abs() / bound).max())


def assert_matches_reference(out: torch.Tensor, ops: Operands, roundings: int = 1) -> None:
    """The adapter's output equals the reference up to accumulation order and bf16 rounding."""
    assert out.dtype == torch.bfloat16, out.dtype
    assert bool(torch.isfinite(out).all()), "non-finite output"
    assert float(out.float().norm()) > 0, "all-zero output"
    worst = excess(out, ops, roundings)
    assert worst <= 1.0, f"output differs from fp4bench.reference.dense by {worst:.3g}x the derived tolerance"
