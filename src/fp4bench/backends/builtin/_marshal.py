"""Operand plumbing shared by the FP4 adapters: validated access to the canonical operands and
the alpha that undoes both global scales.

The canonical operands (``fp4bench.workload.operands``) hold encode-convention global scales ``gs``
(``deq = e2m1 * sf / gs``), so every kernel that takes the raw block-scaled bytes needs
``alpha = 1 / (gs_a * gs_w)`` applied to the fp32 accumulator.
"""

from __future__ import annotations

from typing import TypeVar

import torch

from fp4bench import formats
from fp4bench.workload.operands import Operands


Fp4 = TypeVar("Fp4", formats.NVFP4, formats.MXFP4)


def fp4_pair(ops: Operands, fmt: type[Fp4], backend: str) -> tuple[Fp4, Fp4]:
    """``(qa, qw)`` when both operands are of format ``fmt`` (``formats.NVFP4`` or
    ``formats.MXFP4``); a TypeError naming the backend otherwise."""
    qa, qw = ops.qa, ops.qw
    if not isinstance(qa, fmt) or not isinstance(qw, fmt):
        raise TypeError(f"{backend}: needs {fmt.__name__} activations and weights, got {type(qa).__name__} "
                        f"and {type(qw).__name__} (formats {ops.act_format}/{ops.weight_format})")
    return qa, qw


def nvfp4_alpha(gs_a: torch.Tensor, gs_w: torch.Tensor) -> torch.Tensor:
    """fp32 ``1 / (gs_a * gs_w)``, broadcast like the inputs (``[E, 1, 1]`` weights -> ``[E, 1, 1]``)."""
    return 1.0 / (gs_a.to(torch.float32) * gs_w.to(torch.float32))


def decode_scale(gs: torch.Tensor) -> torch.Tensor:
    """fp32 decode factor ``1 / gs`` (cuBLASLt's two-level NVFP4 takes decode scales)."""
    return 1.0 / gs.to(torch.float32)
