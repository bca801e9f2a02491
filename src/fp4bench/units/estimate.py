"""One unit against the host, per benchmark: the shared rule on window replicates.

Each unit measured a benchmark in independent windows (fresh device memory and graph capture
each); a window contributes one number, the log of its median (docs/measurement.md, "The
verdict"). For unit ``u``:

* the **host median** is the median of every unit's mean log time, ``u``'s own included when the
  host has three or more units (one bad unit then moves it not at all, and a unit in the middle
  is the reference itself); on a host of two it is the other unit's mean, since the median of
  two would halve the difference that is judged;
* the **new** replicates are ``u``'s windows; the **base** replicates are its siblings' windows,
  each sibling's centred on its own mean and moved to the host median. So Δ = exp(mean_u − host
  median) − 1, and the error term is the window-to-window spread inside the units (how well each
  unit's time is known), not the differences between units: those are what is judged.

``gate.rule.estimate`` and ``gate.rule.decide`` then give the interval and PASS / FAIL / MORE /
AMBIGUOUS as everywhere in the project (``RuleSettings``: floor, guard band, confidences, prior).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence

from fp4bench.gate import rule

#: windows a unit needs for its benchmark to be judged (``RuleSettings.min_new_for_fail``'s
#: default: a FAIL needs two independent windows)
MIN_WINDOWS = 2


def _logs(values: Sequence[float], what: str) -> list[float]:
    out = []
    for v in values:
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{what}: a window median must be finite and > 0, got {v!r}")
        out.append(math.log(v))
    return out


def sibling_base(unit: Sequence[float], siblings: Mapping[str, Sequence[float]]) -> list[float]:
    """The base replicates for ``unit`` (its window medians, seconds): the siblings' windows in log
    time, each sibling's centred on its own mean and moved to the host median (module docstring)."""
    logs = {s: _logs(w, f"unit {s}") for s, w in siblings.items() if w}
    if not logs:
        raise ValueError("no sibling with a window")
    means = {s: sum(ys) / len(ys) for s, ys in logs.items()}
    centre = host_median(unit, siblings)
    return [y - means[s] + centre for s, ys in logs.items() for y in ys]


def host_median(unit: Sequence[float], siblings: Mapping[str, Sequence[float]]) -> float:
    """The host median in log time (module docstring): of every unit's mean log window median,
    ``unit``'s included on three or more units; the other unit's on two."""
    means = [sum(ys) / len(ys) for ys in (_logs(w, "unit") for w in siblings.values() if w)]
    own = _logs(unit, "unit")
    if not means:
        raise ValueError("no sibling with a window")
    return statistics.median([*means, sum(own) / len(own)] if len(means) >= 2 and own else means)


def against_siblings(unit: Sequence[float], siblings: Mapping[str, Sequence[float]], settings: rule.RuleSettings,
                     *, budget_left: bool) -> tuple[rule.Estimate, rule.Decision]:
    """``unit``: its window medians (seconds); ``siblings``: each other unit's window medians."""
    est = rule.estimate(sibling_base(unit, siblings), _logs(unit, "unit"), settings, log=True)
    return est, rule.decide(est, settings, budget_left=budget_left)
