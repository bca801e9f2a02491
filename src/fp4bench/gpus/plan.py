"""Which GPU of a run measures which case: whole families, balanced, the same in every run.

A *family* is every case of one backend on one problem (all its tactics). A family runs on one
GPU: the backend prepares once per problem (``CaseRunner.prepared``) and the operands are drawn
once per problem, so splitting a family would repeat that work on another GPU, and its
benchmarks would be judged against two units' baselines.

Families are placed longest-processing-time first (Graham's LPT rule): by estimated cost,
largest first, each onto the GPU with the least estimated work so far. Ties are broken by the
family's name and the GPU's position, so the same collection on the same number of GPUs gives
the same placement in every run and in every worker that computes it: a family meets the same
GPU run after run, and its per-unit baseline (``baselines/<gpu>/units/<UUID>.json``) keeps
judging it.

The cost is an estimate, in units of one measured case: a case costs 1 (its sampling budget,
warm-up and check dominate) plus 1 per GiB of its problem's bf16 operands (drawing, quantizing
and checking them); a case skipped at collection costs ``SKIPPED_COST``.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping

from fp4bench.gpus.partition import partition

SKIPPED_COST = 0.01
_GIB = float(2 ** 30)


def family_of(spec: Any, nodeid: str) -> tuple[str, ...]:
    """``(backend, problem id)`` of an fp4bench case; a test that is not one is its own family."""
    if spec is None:
        return ("", nodeid)
    return (str(spec.backend), str(spec.problem.id))


def case_cost(spec: Any) -> float:
    """The estimated cost of one case (see the module docstring)."""
    if spec is None or getattr(spec, "skip_reason", ""):
        return SKIPPED_COST
    elements = getattr(spec.problem, "operand_elements", 0) or 0
    return 1.0 + 2.0 * float(elements) / _GIB


def place(costs: Mapping[Hashable, float], slots: int) -> dict[Hashable, int]:
    """Family -> GPU slot (0 … ``slots``-1) by LPT (``gpus.partition``, the rule ``fp4bench ab
    --gpus`` spreads its families by); deterministic (see the module docstring)."""
    if slots < 1:
        raise ValueError(f"families need at least one GPU to be placed on, got {slots}")
    return {fam: slot for slot, fams in enumerate(partition(costs, slots)) for fam in fams}


def share(cases: Iterable[tuple[str, Any]], slots: int) -> list[int]:
    """The GPU slot of each ``(nodeid, spec)`` (``spec`` None for a test that is not an fp4bench
    case), in the order given."""
    cases = list(cases)
    costs: dict[Hashable, float] = {}
    fams = []
    for nodeid, spec in cases:
        fam = family_of(spec, nodeid)
        fams.append(fam)
        costs[fam] = costs.get(fam, 0.0) + case_cost(spec)
    placed = place(costs, slots)
    return [placed[f] for f in fams]

