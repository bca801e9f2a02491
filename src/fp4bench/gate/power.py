"""Detection power of the gate on recorded samples: ``fp4bench power A.json B.json``.

A and B are two runs of an unchanged stack (an A/A pair, measured on the GPU). Every sample of B is
multiplied by ``1 + s`` for each slowdown ``s`` and B is gated against A with the policy given. The
result is what the gate does with a true slowdown of exactly ``s`` *plus* the run-to-run shift an
unchanged stack really shows on that machine: the FAIL rate at ``s = 0`` is the false-alarm rate,
the rate at the floor is the chance a slowdown of that size is caught. A slowdown run on the device
(``fp4bench.testing.slowdown``) cannot answer this exactly: the spin kernel it adds brings a
launch gap of its own, so its realized slowdown is only known afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from fp4bench.gate.baseline import Baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.compatibility import check_compatible
from fp4bench.gate.policy import Policy
from fp4bench.gate.verdict import Status


@dataclass(frozen=True)
class PowerRow:
    """The gate's outcome on B scaled by ``1 + slowdown`` (counts over benchmarks timed in both)."""

    slowdown: float  # relative, 0.05 = 5 %
    timed: int
    fail: int
    ambiguous: int
    passed: int
    other: int  # INVALID (flagged samples) or too few samples
    median_delta: float  # median over benchmarks of median(B scaled) / median(A) - 1

    @property
    def fail_rate(self) -> float:
        return self.fail / self.timed if self.timed else 0.0


def scaled(run: Baseline, factor: float) -> dict[str, tuple[tuple[tuple[float, ...], ...], dict]]:
    """``run`` as the current side of a comparison with every sample multiplied by ``factor``."""
    if not factor > 0:
        raise ValueError(f"scale factor must be > 0, got {factor}")
    return {name: (tuple(tuple(s * factor for s in w) for w in rec.windows), rec.extra_info)
            for name, rec in run.benchmarks.items()}


def detection_power(a: Baseline, b: Baseline, slowdowns: Sequence[float], policy: Policy = Policy(),
                    same_unit: bool = False) -> list[PowerRow]:
    """One :class:`PowerRow` per slowdown: gate ``b * (1 + s)`` against ``a`` with ``policy``.

    ``same_unit``: A and B are known to come from one GPU although their fingerprints cannot show
    it (recorded before ``gpu_uuid``): judged as one unit. Otherwise the fingerprints decide, and
    a missing UUID counts as another unit (the unit offset in the error term), as in a live gate.

    Only benchmarks present in both runs count (a benchmark missing from one run says nothing
    about timing power). Raises ``IncompatibleBaseline`` when A and B are from different GPU
    models, as the gate does."""
    common = [n for n in a.benchmarks if n in b.benchmarks]
    if not common:
        raise ValueError(f"{a.source} and {b.source} have no benchmark in common")
    rows = []
    for s in slowdowns:
        if not s > -1:
            raise ValueError(f"slowdown must be > -100 %, got {s * 100:g} %")
        current = {n: v for n, v in scaled(b, 1 + s).items() if n in a.benchmarks}
        if same_unit:
            check_compatible(a.fingerprint, b.fingerprint)
        res = compare(a, current, policy=policy, current_fingerprint=None if same_unit else b.fingerprint)
        timed = [v for v in res.verdicts if v.name in current]
        n = {st: sum(v.status is st for v in timed) for st in (Status.FAIL, Status.AMBIGUOUS, Status.PASS)}
        deltas = [v.ratio - 1 for v in timed if v.ratio is not None]
        rows.append(PowerRow(slowdown=s, timed=len(timed), fail=n[Status.FAIL], ambiguous=n[Status.AMBIGUOUS],
                             passed=n[Status.PASS], other=len(timed) - sum(n.values()),
                             median_delta=float(np.median(deltas)) if deltas else float("nan")))
    return rows
