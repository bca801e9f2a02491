"""The second operand set of a case's replays, loaded into its prepared buffers between replays.

A replay that always sees the same inputs cannot show a kernel returning a stale result. The
second set is the same problem, weights and routing with activations of another seed
(``workload.operands.other_activations``), prepared by the same backend. Which of the prepared
tensors carry the inputs is found by comparison, not by knowing the backend: the tensors that
differ between the case's prepared operands and the second set's, and agree between two
prepares of the case's own operands (a workspace or an ``empty`` buffer differs between any two
prepares and is never loaded). Loading copies those tensors in place, so a captured CUDA graph
reads the new bytes at the addresses it was captured with.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fp4bench.backends.base import Prepared
from fp4bench.reference.bound import Reference
from fp4bench.workload.operands import Operands


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


def _alike(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal bytes (NaN-padded scale buffers compare equal to themselves)."""
    if a is b:
        return True
    if a.element_size() == 1:
        return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
    return torch.equal(a, b) or bool(torch.equal(torch.isnan(a), torch.isnan(b)) and
                                     torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))
                                     if a.is_floating_point() else False)


@dataclass
class SecondSet:
    """The second operand set of one backend on one problem: the prepared tensors that carry the
    inputs (``slots``), the case's own bytes of them (``own``) and the second set's (``other``),
    with the second set's operands and reference. ``note`` says why there is none (``slots``
    empty): the replays then see one set."""

    ops: Operands | None
    slots: list[torch.Tensor]
    own: list[torch.Tensor]
    other: list[torch.Tensor]
    reference: Reference | None
    note: str = ""

    def load_own(self) -> None:
        for dst, src in zip(self.slots, self.own):
            dst.copy_(src)

    def load_other(self) -> None:
        for dst, src in zip(self.slots, self.other):
            dst.copy_(src)


def second_set(prep: Prepared, ops: Operands, other_ops: Operands,
               prepare: Callable[[Operands], Prepared], reference: Callable[[Operands, Prepared], Reference | None]
               ) -> SecondSet:
    """The second set for ``prep`` (the case's prepared ``ops``): ``prepare`` makes another
    ``Prepared`` of an operand set, ``reference`` the reference of ``other_ops`` under that
    prepare's reference options (None for a quantizer row: its expected bytes are ``other_ops.qa``)."""
    again, other = prepare(ops), prepare(other_ops)
    mine, twice, theirs = tensors_of(prep.args), tensors_of(again.args), tensors_of(other.args)
    if not (len(mine) == len(twice) == len(theirs)
            and all(_alike(a, b) and _alike(a, c) for a, b, c in zip(mine, twice, theirs))):
        return SecondSet(None, [], [], [], None, "one operand set: the second set's prepared layout differs")
    slots, own, others = [], [], []
    for a, b, c in zip(mine, twice, theirs):
        if _same(a, b) and not _same(a, c):
            slots.append(a)
            own.append(a.clone())
            others.append(c.clone() if c.data_ptr() == a.data_ptr() else c)
    if not slots:
        return SecondSet(None, [], [], [], None, "one operand set: no prepared tensor carries the activations")
    return SecondSet(other_ops, slots, own, others, reference(other_ops, other))
