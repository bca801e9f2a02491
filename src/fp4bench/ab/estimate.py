"""The ab estimator: one number per worker process, then the shared rule (``gate.rule``).

Input, per benchmark: for every process ``p`` and every round ``r`` it took part in, ``y_pr``
= log of the median of that round's samples. Each round is centred across the processes that
took part in it (``y_pr - mean_p y_pr``): what the round shares (the GPU's clock and power
state at that moment, a drift over the run) cancels; that is the pairing. A process's offset
``m_p`` is the mean of its centred log times over its rounds. The processes are the
independent replicates: ``gate.rule.estimate(A's m_p, B's m_p, log=True)`` gives the change
``exp(delta) - 1`` of B against A with the between-process spread as its error term, and
``decide`` turns it into FAIL / PASS / MORE / AMBIGUOUS: the shared rule's bounds, without the
stored gate's huge-change exception (a FAIL on ordering alone, every B process slower than every
A process, is a 1-in-20 event with 3 processes a side on unchanged stacks): an ab FAIL always
rests on the lower bound above the guard band, whose false-FAIL rate tests/ab/test_ab_power.py
states.

When the slots take turns (``ab.schedule.turns``: the GPU cannot hold every process's copy of
a large benchmark at once), A and B of one slot share their rounds but the slots do not, and
centring within a round of two processes makes A's and B's offsets mirror images: they are
not independent replicates any more. ``ab_estimate_paired`` then uses one number per slot, the
mean of ``log(B round) - log(A round)`` over the rounds both took part in, and the spread
between slots as the error term (``gate.rule.estimate_paired``). When not even one process of
each side fits at once, a turn is one process (``ab.schedule.turns``) and A and B of a slot
share no round: a slot's number is then the mean log round time of its B process minus that of
its A process, timed in adjacent turns (``solo``).

``m_p`` is also what names a bias: on an unchanged stack each process's offset should be
noise around 0, and a pattern that follows the start or allocation order instead of the side
(e.g. the first-started process of every pair faster) is an effect of placement, not of the
stack under test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from fp4bench.gate import rule

#: rounds a process must have completed to count as a replicate
MIN_ROUNDS = 2
#: replicates per side a benchmark needs to be judged
MIN_REPLICATES = 2


def offsets(rounds: Mapping[str, Mapping[int, float]]) -> dict[str, float]:
    """``{process: {round: median seconds}}`` -> ``{process: m_p}`` (centred mean log time)."""
    for p, per in rounds.items():
        for r, t in per.items():
            if not (math.isfinite(t) and t > 0):
                raise ValueError(f"process {p}, round {r}: a round median must be finite and > 0, got {t!r}")
    centred = _centred(rounds)
    return {p: sum(v) / len(v) for p, v in centred.items() if v}


@dataclass(frozen=True)
class AbEstimate:
    est: rule.Estimate
    decision: rule.Decision
    #: ``{process: m_p}`` of the processes used
    offsets: dict[str, float]
    #: the between-process variance of ``m_p`` (pooled within sides) and what the round-to-round
    #: scatter alone would give it (``s_within^2 / rounds``): more rounds help only while the
    #: second is the larger part
    between_var: float
    within_var_of_mean: float

    @property
    def spread_dominates(self) -> bool:
        """The processes disagree more than their round scatter explains: another process pair,
        not more rounds, narrows the interval."""
        return self.between_var > 2.0 * self.within_var_of_mean


def usable(rounds: Mapping[str, Mapping[int, float]]) -> dict[str, Mapping[int, float]]:
    """The processes with at least ``MIN_ROUNDS`` rounds."""
    return {p: per for p, per in rounds.items() if len(per) >= MIN_ROUNDS}


def ab_estimate(rounds: Mapping[str, Mapping[int, float]], side_of: Mapping[str, str],
                settings: rule.RuleSettings, *, budget_left: bool) -> AbEstimate | None:
    """The verdict of one benchmark; None when a side has fewer than ``MIN_REPLICATES`` usable
    processes (not judged)."""
    use = usable(rounds)
    m = offsets(use)
    a = [m[p] for p in m if side_of[p] == "A"]
    b = [m[p] for p in m if side_of[p] == "B"]
    if len(a) < MIN_REPLICATES or len(b) < MIN_REPLICATES:
        return None
    est = rule.estimate(a, b, settings, log=True)
    between = (_ss(a) + _ss(b)) / max(1, len(a) + len(b) - 2)
    # residuals of each process's rounds around its own offset: the round-to-round scatter
    cen = _centred(use)
    res = [y - m[p] for p, ys in cen.items() for y in ys]
    dof = len(res) - len(cen)
    within = sum(x * x for x in res) / dof if dof > 0 else 0.0
    mean_rounds = sum(len(v) for v in cen.values()) / len(cen)
    return AbEstimate(est, decide(est, settings, budget_left=budget_left), m, between,
                      within / mean_rounds)


def ab_estimate_paired(rounds: Mapping[str, Mapping[int, float]], side_of: Mapping[str, str],
                       slot_of: Mapping[str, int], settings: rule.RuleSettings, *,
                       budget_left: bool, solo: bool = False) -> AbEstimate | None:
    """The verdict of one benchmark measured in turns (module docstring); None when fewer than
    ``MIN_REPLICATES`` slots have an A and a B process with ``MIN_ROUNDS`` rounds in common
    (``solo``: with ``MIN_ROUNDS`` rounds each)."""
    use = usable(rounds)
    m = offsets(use)
    per_slot: dict[int, dict[str, str]] = {}
    for p in use:
        per_slot.setdefault(slot_of[p], {})[side_of[p]] = p
    diffs: list[float] = []
    resid: list[float] = []
    n_rounds: list[int] = []
    for slot in sorted(per_slot):
        pa, pb = per_slot[slot].get("A"), per_slot[slot].get("B")
        if pa is None or pb is None:
            continue
        if solo:  # no shared round: each process's mean log time, its rounds' scatter around it
            ya, yb = ([math.log(t) for t in use[p].values()] for p in (pa, pb))
            ma, mb = sum(ya) / len(ya), sum(yb) / len(yb)
            diffs.append(mb - ma)
            resid += [y - ma for y in ya] + [y - mb for y in yb]
            # the variance of a difference of two means of n rounds: s^2 (1/n_a + 1/n_b)
            n_rounds.append(round(1.0 / (1.0 / len(ya) + 1.0 / len(yb))))
            continue
        common = sorted(set(use[pa]) & set(use[pb]))
        if len(common) < MIN_ROUNDS:
            continue
        dr = [math.log(use[pb][r]) - math.log(use[pa][r]) for r in common]
        d = sum(dr) / len(dr)
        diffs.append(d)
        resid += [x - d for x in dr]
        n_rounds.append(len(dr))
    if len(diffs) < MIN_REPLICATES:
        return None
    est = rule.estimate_paired(diffs, settings)
    between = _ss(diffs) / (len(diffs) - 1)
    dof = len(resid) - len(diffs) * (2 if solo else 1)
    within = sum(x * x for x in resid) / dof if dof > 0 else 0.0
    return AbEstimate(est, decide(est, settings, budget_left=budget_left), m, between,
                      within / (sum(n_rounds) / len(n_rounds)))


def decide(est: rule.Estimate, settings: rule.RuleSettings, *, budget_left: bool) -> rule.Decision:
    """FAIL when the lower bound is at or above the guard band (with ``min_new_for_fail``
    processes of B), PASS when the upper bound is below it, else MORE while the budget lasts and
    AMBIGUOUS after (module docstring: no huge-change exception)."""
    theta = settings.threshold
    if est.hi < theta:
        return rule.Decision.PASS
    if est.lo >= theta and est.n_new >= settings.min_new_for_fail:
        return rule.Decision.FAIL
    return rule.Decision.MORE if budget_left else rule.Decision.AMBIGUOUS


def _ss(x: list[float]) -> float:
    mu = sum(x) / len(x)
    return sum((v - mu) ** 2 for v in x)


def _centred(rounds: Mapping[str, Mapping[int, float]]) -> dict[str, list[float]]:
    by_round: dict[int, dict[str, float]] = {}
    for p, per in rounds.items():
        for r, t in per.items():
            by_round.setdefault(r, {})[p] = math.log(t)
    out: dict[str, list[float]] = {p: [] for p in rounds}
    for ys in by_round.values():
        c = sum(ys.values()) / len(ys)
        for p, y in ys.items():
            out[p].append(y - c)
    return out
