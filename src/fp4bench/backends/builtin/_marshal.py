"""Operand plumbing shared by the NVFP4 adapters: validated access to the canonical operands and
the alpha that undoes both global scales.

The canonical operands (``fp4bench.workload.operands``) hold encode-convention global scales ``gs``
(``deq = e2m1 * sf / gs``), so every kernel that takes the raw block-scaled bytes needs
``alpha = 1 / (gs_a * gs_w)`` applied to the fp32 accumulator.
"""

from __future__ import annotations

import torch

from fp4bench import formats
from fp4bench.workload.operands import Operands


def nvfp4_pair(ops: Operands, backend: str) -> tuple[formats.NVFP4, formats.NVFP4]:
    """``(qa, qw)`` when both operands are NVFP4; a TypeError naming the backend otherwise."""
    qa, qw = ops.qa, ops.qw
    if not isinstance(qa, formats.NVFP4) or not isinstance(qw, formats.NVFP4):
        raise TypeError(f"{backend}: needs NVFP4 activations and weights, got {type(qa).__name__} "
                        f"and {type(qw).__name__} (formats {ops.act_format}/{ops.weight_format})")
    return qa, qw


def mxfp4_pair(ops: Operands, backend: str) -> tuple[formats.MXFP4, formats.MXFP4]:
    """``(qa, qw)`` when both operands are MXFP4; a TypeError naming the backend otherwise."""
    qa, qw = ops.qa, ops.qw
    if not isinstance(qa, formats.MXFP4) or not isinstance(qw, formats.MXFP4):
        raise TypeError(f"{backend}: needs MXFP4 activations and weights, got {type(qa).__name__} "
                        f"and {type(qw).__name__} (formats {ops.act_format}/{ops.weight_format})")
    return qa, qw


def nvfp4_alpha(gs_a: torch.Tensor, gs_w: torch.Tensor) -> torch.Tensor:
    """fp32 ``1 / (gs_a * gs_w)``, broadcast like the inputs (``[E, 1, 1]`` weights -> ``[E, 1, 1]``)."""
    return 1.0 / (gs_a.to(torch.float32) * gs_w.to(torch.float32))


def decode_scale(gs: torch.Tensor) -> torch.Tensor:
    """fp32 decode factor ``1 / gs`` (cuBLASLt's two-level NVFP4 takes decode scales)."""
    return 1.0 / gs.to(torch.float32)
