"""Benchmarks spread over the GPUs of a host: whole families, balanced longest-first.

A *family* is every case of one (backend, problem): its tactics share the prepared operands and
the reference, so they stay on one GPU (the operands are made once there, and the family's
benchmarks are always measured by the same unit, run after run, for a unit baseline to apply).
``partition`` is the classic longest-processing-time-first rule: families sorted by descending
estimated cost (ties by key, so the result depends only on its input), each given to the GPU
with the least cost so far (ties: the lowest index). The result is deterministic: every process
that partitions the same families over the same number of GPUs gets the same shares.

``family_cost`` is the estimate used for the order: a fixed cost per case (worker checks,
captures, timing rounds: about 10 s per benchmark in ``fp4bench ab``, docs/ab.md "Wall-time
estimate") plus a term for the operands the case draws, quantizes, checks and re-places (a GLM-5
grouped layer, 6.4 G elements, takes several seconds a check). It only has to rank families and
balance sums; it is not a prediction of wall time.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from fp4bench.workload.problems import Problem

K = TypeVar("K", bound=Hashable)

#: seconds per case before its operands are counted, and per 10^9 operand elements
CASE_SECONDS = 10.0
SECONDS_PER_GELEMENT = 6.0


def family_cost(problem: Problem, cases: int) -> float:
    """Estimated seconds of ``cases`` benchmarks of one (backend, problem) family (0 cases: 0)."""
    if cases < 0:
        raise ValueError(f"cases must be >= 0, got {cases}")
    return cases * (CASE_SECONDS + SECONDS_PER_GELEMENT * problem.operand_elements / 1e9)


def partition(costs: Mapping[K, float], n: int) -> list[list[K]]:
    """``n`` lists of family keys (one per GPU), longest-first onto the least-loaded GPU; each list
    in the order the families were assigned (costliest first)."""
    if n < 1:
        raise ValueError(f"need at least one GPU, got {n}")
    for key, c in costs.items():
        if not (c == c and c >= 0):
            raise ValueError(f"family {key!r}: cost must be a number >= 0, got {c!r}")
    shares: list[list[K]] = [[] for _ in range(n)]
    load = [0.0] * n
    for key in sorted(costs, key=lambda k: (-costs[k], repr(k))):
        i = min(range(n), key=lambda j: (load[j], j))
        shares[i].append(key)
        load[i] += costs[key]
    return shares


def assign(families: Sequence[tuple[K, float]], n: int) -> dict[K, int]:
    """``{family: GPU position}`` for ``(family, cost)`` pairs (a family listed twice adds its costs)."""
    total: dict[K, float] = {}
    for key, c in families:
        total[key] = total.get(key, 0.0) + c
    return {key: i for i, share in enumerate(partition(total, n)) for key in share}
