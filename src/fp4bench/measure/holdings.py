"""What one case holds in device memory at once, in bytes: the accounting the rotating-copy budget
(``measure.copies``) is held to.

A timed case holds, beside its rotating copies, the operand set they were cloned from: every
tensor of it, the bf16 weight originals of a quantized weight format included (the quantizer's
input and the unquantized reference's operands; ``workload.operands``). For GLM-5's MoE layer
those originals are 18 GiB of the 22.8 GiB operand set, more than the four copies a W4A16 case
makes clone. Each copy is a clone of the tensors a backend of the case's formats reads
(``run.operand_copies.operand_copy``) and the layouts its ``prepare`` builds from them (an interleaved or
swizzled weight, a swapped gate/up order: new buffers the size of an operand tensor). What a
copy keeps is the part of its clone its prepared operands read in place (a ``prepare`` that takes
views keeps all of it: the bf16 grouped rows) and its layouts; the rest of the clone is freed
once the copy is prepared (the W4A16 MoE rows keep only their layouts). A copy is counted as
keeping at least what it clones: a layout of another size (a padded swizzle) is not recognised
as one, and is taken to be about its source's size. ``case_bytes`` adds these up from the case's
first prepared operands.

Only operand-sized buffers count as layouts (a ``prepare`` buffer as large as a tensor of the
operand set and not a view of it): their sizes follow from the operands and the adapter's code,
which both sides of ``fp4bench ab`` share, so every process on a GPU computes the same copy count
for the same case. Workspaces and outputs, whose sizes a library version may change, are left
out; so are the transient buffers of one ``prepare`` (a layout built in two steps holds both for
a moment) and of the reference (one expert decoded at a time, ``reference``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch


def tensors_of(obj: Any) -> list[torch.Tensor]:
    """Every tensor inside ``obj`` (dicts, lists, tuples, dataclasses such as nested ``Prepared``
    or ``Operands``), in a fixed order: two prepares of one backend list theirs alike."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [t for k in obj for t in tensors_of(obj[k])]
    if isinstance(obj, (list, tuple)):
        return [t for x in obj for t in tensors_of(x)]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) if f.init for t in tensors_of(getattr(obj, f.name))]
    return []


def storages(obj: Any) -> dict[tuple[str, int], int]:
    """The allocations the tensors inside ``obj`` live in, each once (views of one tensor share
    it): ``{(device, address): bytes}``."""
    out: dict[tuple[str, int], int] = {}
    for t in tensors_of(obj):
        s = t.untyped_storage()
        if s.nbytes():
            out[(str(t.device), s.data_ptr())] = s.nbytes()
    return out


def layout_bytes(prepared: Any, ops: Any) -> int:
    """Bytes of the operand-sized buffers ``prepared`` holds beyond ``ops``' own allocations
    (module docstring): the layouts a ``prepare`` built from the operand set."""
    own = storages(ops)
    sizes = {t.numel() * t.element_size() for t in tensors_of(ops)}
    return sum(n for key, n in storages(prepared).items() if key not in own and n in sizes)


@dataclass(frozen=True)
class CaseBytes:
    """What a case holds, in bytes. ``held``: with its first copy (the operand set and the
    layouts its first ``prepare`` built); ``per_copy``: what each further rotating copy keeps (the
    part of its clone its prepared operands read in place, and its layouts; at least its clone's
    size); ``transient``: the rest of a copy's clone, held only while that copy is prepared."""

    held: int
    per_copy: int
    transient: int = 0

    def with_copies(self, n: int) -> int:
        """The most the case holds with ``n`` rotating copies (``n`` >= 1): the last one's
        transient clone included."""
        return self.held + (max(1, n) - 1) * self.per_copy + (self.transient if n > 1 else 0)


def case_bytes(ops: Any, prepared: Any, copied: Any) -> CaseBytes:
    """What a case of operand set ``ops`` and its first ``prepared`` holds; ``copied``: the
    tensors of ``ops`` a rotating copy clones (``run.operand_copies.operand_copy``)."""
    layouts = layout_bytes(prepared, ops)
    clone = storages(copied)
    in_place = set(storages(prepared))
    kept = sum(n for key, n in clone.items() if key in in_place)
    cloned = sum(clone.values())
    return CaseBytes(held=sum(storages(ops).values()) + layouts, per_copy=max(kept + layouts, cloned),
                     transient=cloned - kept)
