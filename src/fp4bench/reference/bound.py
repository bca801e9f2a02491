"""The reference a case is checked against, with its elementwise error bound, for every problem
kind: ``reference_and_bound`` is the one place a check gets both (and the bf16 layer's output that
the quantization loss is measured against).

The bound holds for a correct kernel fed the same decoded bytes, so quantization error cancels: it
differs from the fp32 reference only by (1) the order of fp32 accumulation, bounded by
``K·u32·(|A|·|W|ᵀ)`` with ``u32 = 2^-24`` (the classic γ_K bound, Higham, "Accuracy and Stability
of Numerical Algorithms", section 3.1), and (2) rounding the result to bf16 (8 significant bits):
at most the bf16 unit roundoff ``2^-8·|ref|`` per rounding. The fused MoE layer's bound is
``reference.moe.moe_error_bound``. Next to the bound, each ``Reference`` carries the bulk tier's
tolerance on ``||out - ref|| / ||ref||`` for the same path (``reference.bulk``). Nothing here is tuned
to make a backend pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fp4bench.reference import moe as reference_moe
from fp4bench.reference.bulk import BulkTolerance, gemm_bulk, moe_bulk
from fp4bench.reference.dense import (decoded_activations, decoded_weights, expert_products, reference_gemm,
                                      unquantized_gemm)
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, MoEProblem

BF16_UNIT_ROUNDOFF = 2.0 ** -8  # half an ulp, relative, worst case (8-bit significand)
FP32_UNIT_ROUNDOFF = 2.0 ** -24


@dataclass
class Reference:
    """The reference output, its elementwise bound, the unquantized (bf16-input) output, and the
    bulk tier's tolerance on the output's relative error norm."""

    out: torch.Tensor
    bound: torch.Tensor
    unquantized: torch.Tensor | None
    bulk: BulkTolerance


def gemm_error_bound(a: torch.Tensor, w: torch.Tensor, ref: torch.Tensor, k: int, roundings: int = 1) -> torch.Tensor:
    """Elementwise bound for one GEMM ``a @ w.T`` on decoded fp32 inputs (see module doc);
    ``roundings`` bf16 roundings of the output (2 when the library scales a bf16 result again)."""
    mag = a.abs() @ w.abs().t()
    r = (1 + BF16_UNIT_ROUNDOFF) ** roundings - 1
    return r * ref.abs() + (1 + r) * k * FP32_UNIT_ROUNDOFF * mag + torch.finfo(torch.float32).tiny


def grouped_error_bound(ops: Operands, ref: torch.Tensor, roundings: int = 1) -> torch.Tensor:
    """``gemm_error_bound`` of every expert's rows of a grouped GEMM."""
    bound = torch.zeros_like(ref)
    for lo, hi, a, w in expert_products(ops):
        bound[lo:hi] = gemm_error_bound(a, w, ref[lo:hi], ops.problem.k, roundings)
    return bound


def reference_and_bound(ops: Operands, options: dict[str, Any] | None = None, roundings: int = 1) -> Reference:
    """The reference for ``ops`` under a backend's ``reference_options`` (MoE problems only) and
    its number of bf16 output roundings, with its bound and the unquantized output."""
    options = dict(options or {})
    if isinstance(ops.problem, MoEProblem):
        out = reference_moe.reference_moe(ops, **options)
        flip, absolute = reference_moe.moe_bound_terms(ops, **options)
        return Reference(out, BF16_UNIT_ROUNDOFF * out.abs() + flip + absolute, reference_moe.unquantized_moe(ops),
                         moe_bulk(options.get("intermediate", "bf16"), absolute))
    if options:
        raise ValueError(f"reference options {sorted(options)} apply to MoE problems only")
    out = reference_gemm(ops)
    if isinstance(ops.problem, GemmProblem):
        bound = gemm_error_bound(decoded_activations(ops), decoded_weights(ops), out, ops.problem.k, roundings)
    else:
        bound = grouped_error_bound(ops, out, roundings)
    relative = (1 + BF16_UNIT_ROUNDOFF) ** roundings - 1
    return Reference(out, bound, unquantized_gemm(ops), gemm_bulk(roundings, bound - relative * out.abs()))
