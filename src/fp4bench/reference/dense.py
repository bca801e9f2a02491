"""The pure-torch reference: decode the *same* quantized bytes the kernel got, multiply in fp32.

Decoding is exact (E2M1 values times e4m3/e8m0 scales are representable in fp32), so the
only difference between a correct kernel and this reference is the order of fp32
accumulation and the final rounding of the output to bf16 (see measure/verify.py for the
tolerance derived from that).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterator

import torch

from fp4bench.workload.operands import Operands, dequantize
from fp4bench.workload.problems import GemmProblem, GroupedProblem


def decoded_activations(ops: Operands) -> torch.Tensor:
    """float32 activations as the kernel sees them (decoded FP4/FP8, or the bf16 originals)."""
    return dequantize(ops.qa) if ops.qa is not None else ops.a.float()


def decoded_weights(ops: Operands) -> torch.Tensor:
    return dequantize(ops.qw) if ops.qw is not None else ops.w.float()


def expert_slice(q: Any, e: int, num_experts: int) -> Any:
    """Expert ``e`` of a batched quantized operand: every tensor field with a leading expert
    dimension is indexed, 0-d fields (a shared global scale) are kept."""
    if isinstance(q, torch.Tensor):
        return q[e] if q.dim() >= 1 and q.shape[0] == num_experts else q
    return dataclasses.replace(q, **{f.name: expert_slice(getattr(q, f.name), e, num_experts)
                                     for f in dataclasses.fields(q) if f.init})


def expert_products(ops: Operands, quantized: bool = True) -> Iterator[tuple[int, int, torch.Tensor, torch.Tensor]]:
    """``(lo, hi, a_rows, w_e)`` in fp32 for every *active* expert of a grouped problem.

    Decodes one expert at a time: a GLM-5 layer's decoded weights would be 26 GB at once.
    """
    a = decoded_activations(ops) if quantized else ops.a.float()
    offs = ops.offsets.tolist()
    e_count = ops.problem.num_experts
    for e in range(e_count):
        lo, hi = offs[e], offs[e + 1]
        if hi > lo:
            if quantized and ops.qw is not None:
                w = dequantize(expert_slice(ops.qw, e, e_count))
            else:
                w = ops.w[e].float()
            yield lo, hi, a[lo:hi], w


def _product(ops: Operands, quantized: bool) -> torch.Tensor:
    if isinstance(ops.problem, GemmProblem):
        if quantized:
            return decoded_activations(ops) @ decoded_weights(ops).t()
        return ops.a.float() @ ops.w.float().t()
    if isinstance(ops.problem, GroupedProblem):
        out = torch.empty((ops.a.shape[0], ops.problem.n), dtype=torch.float32, device=ops.a.device)
        for lo, hi, a, w in expert_products(ops, quantized):
            out[lo:hi] = a @ w.t()
        return out
    raise TypeError(f"reference GEMM does not handle {type(ops.problem).__name__}")


def reference_gemm(ops: Operands) -> torch.Tensor:
    """float32 ``D = A·Wᵀ`` (dense) or the row-stacked per-expert products (grouped)."""
    return _product(ops, quantized=True)


def unquantized_gemm(ops: Operands) -> torch.Tensor:
    """The product of the bf16 originals (end-to-end quantization-loss check, not a pass/fail)."""
    return _product(ops, quantized=False)
