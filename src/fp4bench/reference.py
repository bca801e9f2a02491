"""The pure-torch reference: decode the *same* quantized bytes the kernel got, multiply in fp32.

Decoding is exact (E2M1 values times e4m3/e8m0 scales are representable in fp32), so the
only difference between a correct kernel and this reference is the order of fp32
accumulation and the final rounding of the output to bf16 (see measure/verify.py for the
tolerance derived from that).
"""

from __future__ import annotations

import torch

from fp4bench.operands import Operands, dequantize
from fp4bench.problems import GemmProblem, GroupedProblem


def decoded_activations(ops: Operands) -> torch.Tensor:
    """float32 activations as the kernel sees them (decoded FP4, or the bf16 originals)."""
    return dequantize(ops.qa) if ops.qa is not None else ops.a.float()


def decoded_weights(ops: Operands) -> torch.Tensor:
    return dequantize(ops.qw) if ops.qw is not None else ops.w.float()


def _product(ops: Operands, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if isinstance(ops.problem, GemmProblem):
        return a @ w.t()
    if isinstance(ops.problem, GroupedProblem):
        out = torch.empty((a.shape[0], ops.problem.n), dtype=torch.float32, device=a.device)
        offs = ops.offsets.tolist()
        for e in range(ops.problem.num_experts):  # one matmul per active expert
            lo, hi = offs[e], offs[e + 1]
            if hi > lo:
                out[lo:hi] = a[lo:hi] @ w[e].t()
        return out
    raise TypeError(f"reference GEMM does not handle {type(ops.problem).__name__}")


def reference_gemm(ops: Operands) -> torch.Tensor:
    """float32 ``D = A·Wᵀ`` (dense) or the row-stacked per-expert products (grouped)."""
    return _product(ops, decoded_activations(ops), decoded_weights(ops))


def unquantized_gemm(ops: Operands) -> torch.Tensor:
    """The product of the bf16 originals (end-to-end quantization-loss check, not a pass/fail)."""
    return _product(ops, ops.a.float(), ops.w.float())
