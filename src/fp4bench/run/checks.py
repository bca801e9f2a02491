"""A case's replays (``replay_case``) and their second operand set, loaded into the case's
prepared buffers between replays.

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

from dataclasses import dataclass
from typing import Any, Callable

import torch

from fp4bench.backends.base import Backend, Prepared, Tactic
from fp4bench.measure import replays as later
from fp4bench.measure.holdings import tensors_of
from fp4bench.measure.verify_quant import compare_quantized
from fp4bench.reference.bound import Reference
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import QuantProblem


def _alike(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.device == b.device


def _raw(t: torch.Tensor) -> torch.Tensor:
    """A 1-byte tensor (FP4 pairs, E4M3/E8M0 scales: types with few ops) as uint8; others as
    they are."""
    return t.view(torch.uint8) if t.element_size() == 1 and t.dtype != torch.bool else t


_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """The same bits (a NaN, such as poisoned padding, equals itself). Compares in place, with
    no copy of either tensor: prepared weights can be gigabytes."""
    if a is b or (a.data_ptr() == b.data_ptr() and a.stride() == b.stride()):
        return True
    a, b = _raw(a), _raw(b)
    if torch.equal(a, b):
        return True
    bits = _BITS.get(a.element_size())
    return a.is_floating_point() and bits is not None and torch.equal(a.view(bits), b.view(bits))


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
            _raw(dst).copy_(_raw(src))

    def load_other(self) -> None:
        for dst, src in zip(self.slots, self.other):
            _raw(dst).copy_(_raw(src))


def second_set(prep: Prepared, ops: Operands, other_ops: Operands,
               prepare: Callable[[Operands], Prepared], reference: Callable[[Operands, Prepared], Reference | None]
               ) -> SecondSet:
    """The second set for ``prep`` (the case's prepared ``ops``): ``prepare`` makes another
    ``Prepared`` of an operand set, ``reference`` the reference of ``other_ops`` under that
    prepare's reference options (None for a quantizer row: its expected bytes are ``other_ops.qa``)."""
    mine = tensors_of(prep.args)
    twice = tensors_of(prepare(ops).args)  # dropped before the second set is prepared
    if not (len(mine) == len(twice) and all(_alike(a, b) for a, b in zip(mine, twice))):
        return SecondSet(None, [], [], [], None, "one operand set: two prepares give different layouts")
    stable = [_same(a, b) for a, b in zip(mine, twice)]
    del twice
    other = prepare(other_ops)
    theirs = tensors_of(other.args)
    if not (len(mine) == len(theirs) and all(_alike(a, c) for a, c in zip(mine, theirs))):
        return SecondSet(None, [], [], [], None, "one operand set: the second set's prepared layout differs")
    slots, own, others = [], [], []
    for a, c, keep in zip(mine, theirs, stable):
        if keep and not _same(a, c):
            slots.append(a)
            own.append(_raw(a).clone())
            others.append(_raw(c).clone())
    if not slots:
        return SecondSet(None, [], [], [], None, "one operand set: no prepared tensor carries the activations")
    return SecondSet(other_ops, slots, own, others, reference(other_ops, other))


def _output_check(backend: Backend, ops: Operands, prep: Prepared, ref: Reference | None) -> Callable[[Any], Any]:
    """How one replay's output is classified: a quantizer's bytes against ``ops.qa``, a GEMM's
    output against ``ref``."""
    if isinstance(ops.problem, QuantProblem):
        layout = getattr(backend, "scale_layout", "128x4")
        return lambda got: compare_quantized(got, ops.qa, layout)
    assert ref is not None
    return lambda got: later.check_output(got, ref.out, ref.bound, ref.bulk, prep.out)


def replay_case(backend: Backend, prep: Prepared, tactic: Tactic, ops: Operands, ref: Reference | None,
                second: SecondSet, n: int, device: torch.device) -> later.ReplayReport:
    """``n`` replays of ``backend.run(prep, tactic)`` (``measure.replays``), alternating between
    the case's own operands ``ops`` (reference ``ref``; None for a quantizer row) and ``second``."""
    sets = [later.OperandSet("A", second.load_own, _output_check(backend, ops, prep, ref))]
    if second.ops is not None:
        sets.append(later.OperandSet("B", second.load_other,
                                     _output_check(backend, second.ops, prep, second.reference)))
    launch, method, _keep = later.launcher(lambda: backend.run(prep, tactic), device, backend.no_graph_reason)
    if second.note:
        method = f"{method}; {second.note}"
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    # a quantizer allocates its outputs (its ``out`` is its input): nothing to poison
    poison = (lambda: None) if isinstance(ops.problem, QuantProblem) else (lambda: prep.out.fill_(later.SENTINEL))
    return later.replay_check(launch, poison, sets, n, method, sync)
