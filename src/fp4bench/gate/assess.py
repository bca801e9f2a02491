"""The statistics one benchmark's timing verdict is decided on.

Each window of the baseline (``--fp4-windows`` when it was recorded: interleaved passes over the
sweep, each its own preparation and graph capture) and each window of the current run is one
replicate: its median is one number for ``gate.rule``. Samples inside a window only say how well
that window's median is known. The medians shown are each side's headline median
(``record.headline_median``: the geometric mean of the window medians).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping


from fp4bench.gate import rule
from fp4bench.gate.calibration import class_of
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import BenchmarkRecord, check_samples, headline_median, window_medians, windows_of


@dataclass(frozen=True)
class Assessment:
    """Both sides of one benchmark, reduced to what the decision needs."""

    base_median: float
    new_median: float
    ratio: float
    est: rule.Estimate | None
    n_base: int
    n_new: int
    windows_base: int
    windows_new: int


def assess(name: str, base: BenchmarkRecord, new: Any, base_extra: Mapping[str, Any], policy: Policy) -> Assessment:
    """The rule's estimate on the window medians of ``base`` and ``new`` (the current run's
    windows, or one flat sample list); samples are checked first (``ValueError`` naming the
    benchmark)."""
    bw = tuple(check_samples(list(w), f"baseline benchmark {name!r}") for w in base.windows)
    nw = tuple(check_samples(list(w), f"current benchmark {name!r}") for w in windows_of(new))
    est = rule.estimate(window_medians(bw), window_medians(nw), policy.rule_settings(class_of(base_extra)),
                        what=f"benchmark {name!r}")
    return Assessment(headline_median(bw), headline_median(nw), math.exp(est.delta), est, sum(map(len, bw)),
                      sum(map(len, nw)), len(bw), len(nw))
