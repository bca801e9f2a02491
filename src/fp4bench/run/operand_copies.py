"""Rotating operand copies: a copy of an operand set in allocations of its own (the same bytes).
What a copy costs in device memory: ``measure.holdings``; how many a case gets: ``measure.copies``."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from fp4bench.workload.operands import Operands


def _clone(obj: Any) -> Any:
    """Deep copy of tensors inside (possibly nested) dataclasses: rotating input copies."""
    if isinstance(obj, torch.Tensor):
        return obj.clone()
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: _clone(getattr(obj, f.name))
                                           for f in dataclasses.fields(obj) if f.init})
    return obj


#: the bf16 weight originals of an operand set (``Operands.w``, ``w2``)
_WEIGHT_ORIGINALS = ("w", "w2")


def copied_fields(ops: Operands) -> list[str]:
    """The fields a rotating copy clones: everything a backend of the operand set's formats reads.
    With a quantized weight format the bf16 weight originals are only the quantizer's input (the
    backends and the reference read ``qw``/``qw2``: ``reference.decoded_weights``), so a copy
    shares them instead of cloning two to four times the bytes it times."""
    shared = _WEIGHT_ORIGINALS if ops.weight_format != "bf16" else ()
    return [f.name for f in dataclasses.fields(ops) if f.init and f.name not in shared]


def operand_copy(ops: Operands) -> Operands:
    """A rotating copy of ``ops``: the same bytes, in allocations of its own (``copied_fields``)."""
    return dataclasses.replace(ops, **{n: _clone(getattr(ops, n)) for n in copied_fields(ops)})

