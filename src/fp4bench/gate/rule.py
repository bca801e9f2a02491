"""One decision rule for a timing change, shared by the stored-baseline gate and ``fp4bench ab``.

The unit of evidence is an independent **replicate**: a measurement window with its own CUDA
context or graph capture, allocations and power state (a window of the stored-baseline gate, a
worker process of ``fp4bench ab``). Samples inside one replicate measure only that replicate's
noise; the question the gate answers is about effects between replicates (another window,
process or unit), so each replicate contributes one number: its log time (the log of its
median, or the mean of its round-paired log times in ab). Working in log time makes a change
a ratio: ``exp(delta) - 1`` is the relative change.

For one benchmark, with ``b`` the base replicates and ``n`` the new ones::

    delta  = mean(n) - mean(b)                               (log of the ratio of the two)
    s^2    = (SS_b + SS_n + prior_df * prior_sigma^2) / (df + prior_df)
             SS: sum of squared deviations from the group mean, df = len(b) + len(n) - 2;
             the prior (a between-replicate spread assumed before any data, from the noise
             model) keeps two or three replicates that happen to agree from claiming a
             spread of zero
    se     = sqrt(max(s, min_sigma)^2 * (1/len(b) + 1/len(n)) + 2 * run_sigma^2 + unit_sigma^2)
             run_sigma: what every replicate of one side shares (the stored gate: the process
             that took a run's windows; each side is one), which no number of its windows
             averages away (gate.calibration measures it per unit; 0 for ab, whose replicates
             are processes); unit_sigma: an offset between two GPU units of one model (0 when
             both sides ran on the same unit)
    lo     = delta - t(confidence, df + prior_df) * se       (one-sided bounds: the evidence
    hi     = delta + t(pass_confidence, df + prior_df) * se   a FAIL needs, and a PASS needs)

and with the threshold ``theta = log(1 + floor * (1 - margin))``:

    FAIL       lo >= theta  and at least ``min_new_for_fail`` new replicates: the change is shown
               to reach the guard band below the floor, by independent replicates
    PASS       hi <  theta: the change is shown to stay below it (an equivalence bound);
               "improved" when also hi < -theta
    MORE       neither, and the caller may still measure: another window / more processes
    AMBIGUOUS  neither, and the budget is spent: reported with its interval. Except that a
               huge change (delta >= log(1 + 2 * floor) with every new replicate slower than
               every base replicate) is a FAIL, never AMBIGUOUS

Noise enters only through ``se``: a noisier benchmark needs more replicates to be decided, it
never moves the threshold.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Sequence

import numpy as np


class Decision(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    MORE = "MORE"
    AMBIGUOUS = "AMBIGUOUS"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class RuleSettings:
    """``floor``: the relative slowdown that must FAIL. ``margin``: the guard band below it, as a
    fraction of the floor. ``confidence``: of the lower bound a FAIL needs; ``pass_confidence``:
    of the upper bound a PASS needs. ``prior_sigma``/``prior_df``:
    the between-replicate spread of log time assumed before data, and its weight in degrees of
    freedom. ``min_sigma``: the smallest spread ever assumed (timer resolution, clock steps).
    ``min_new_for_fail``: new replicates a FAIL needs, so one window in an odd power state can
    make a suspect but never a FAIL on its own. ``unit_sigma``: the spread of one benchmark's
    offset between two GPU units of the model (0: same unit). ``run_sigma``: the offset every
    replicate of one side shares (0: the replicates are independent in it). Why each default is what it is:
    docs/measurement.md, "The decision rule" (calibrated by tests/gate/test_rule_simulation.py)."""

    floor: float = 0.05
    margin: float = 0.5
    confidence: float = 0.995
    pass_confidence: float = 0.9
    prior_sigma: float = 0.006
    prior_df: float = 4.0
    min_sigma: float = 0.001
    min_new_for_fail: int = 2
    unit_sigma: float = 0.0
    run_sigma: float = 0.0

    def __post_init__(self) -> None:
        checks = (
            (0 < self.floor < 10, f"floor is a relative change (0.05 = 5 %) > 0, got {self.floor}"),
            (0 <= self.margin < 1, f"margin is a fraction of the floor in [0, 1), got {self.margin}"),
            (0.5 < self.confidence < 1, f"confidence must be in (0.5, 1), got {self.confidence}"),
            (0.5 < self.pass_confidence < 1, f"pass_confidence must be in (0.5, 1), got {self.pass_confidence}"),
            (math.isfinite(self.prior_sigma) and self.prior_sigma >= 0, f"prior_sigma must be >= 0, got {self.prior_sigma}"),
            (math.isfinite(self.prior_df) and self.prior_df >= 0, f"prior_df must be >= 0, got {self.prior_df}"),
            (math.isfinite(self.min_sigma) and self.min_sigma >= 0, f"min_sigma must be >= 0, got {self.min_sigma}"),
            (self.min_new_for_fail >= 1, f"min_new_for_fail must be >= 1, got {self.min_new_for_fail}"),
            (math.isfinite(self.unit_sigma) and self.unit_sigma >= 0, f"unit_sigma must be >= 0, got {self.unit_sigma}"),
            (math.isfinite(self.run_sigma) and self.run_sigma >= 0, f"run_sigma must be >= 0, got {self.run_sigma}"),
        )
        for ok, msg in checks:
            if not ok:
                raise ValueError(f"RuleSettings.{msg}")

    @property
    def threshold(self) -> float:
        """The guard band in log time: a change shown beyond it FAILs, one shown below it PASSes."""
        return math.log1p(self.floor * (1.0 - self.margin))


@dataclass(frozen=True)
class Estimate:
    """The change of one benchmark from its replicates, in log time."""

    delta: float
    lo: float
    hi: float
    se: float
    df: float
    n_base: int
    n_new: int
    #: every new replicate slower than every base replicate
    separated: bool

    @property
    def pct(self) -> float:
        return math.expm1(self.delta) * 100.0

    @property
    def interval_pct(self) -> tuple[float, float]:
        return math.expm1(self.lo) * 100.0, math.expm1(self.hi) * 100.0


def _log_values(values: Sequence[float], what: str) -> list[float]:
    out = []
    for v in values:
        v = float(v)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{what}: replicate times must be finite and > 0, got {v!r}")
        out.append(math.log(v))
    return out


def estimate(base: Sequence[float], new: Sequence[float], settings: RuleSettings, *,
             log: bool = False, what: str = "benchmark") -> Estimate:
    """Two groups of independent replicates: one time (seconds) per replicate, or log times with
    ``log=True``. Each group needs at least one replicate."""
    b = list(map(float, base)) if log else _log_values(base, what)
    n = list(map(float, new)) if log else _log_values(new, what)
    if not b or not n:
        raise ValueError(f"{what}: need at least one base and one new replicate, got {len(b)} and {len(n)}")
    delta, lo, hi, se, df, sep = bounds(np.array([b]), np.array([n]), settings)
    return Estimate(float(delta[0]), float(lo[0]), float(hi[0]), float(se[0]), df, len(b), len(n), bool(sep[0]))


def estimate_paired(diffs: Sequence[float], settings: RuleSettings, *, what: str = "benchmark") -> Estimate:
    """Independent paired replicates, each one log-ratio log(new/base) (an ab process pair whose
    rounds were interleaved). The spread between pairs is the error term."""
    d = [float(x) for x in diffs]
    if not d or not all(math.isfinite(x) for x in d):
        raise ValueError(f"{what}: need at least one finite paired log-ratio, got {d!r}")
    delta, lo, hi, se, df, sep = bounds_paired(np.array([d]), settings)
    return Estimate(float(delta[0]), float(lo[0]), float(hi[0]), float(se[0]), df, len(d), len(d), bool(sep[0]))


def bounds_paired(diffs: np.ndarray, settings: RuleSettings):
    """``estimate_paired`` for many benchmarks at once: ``diffs`` (benchmarks, pairs) of paired
    log-ratios. Returns what ``bounds`` returns; ``separated``: every pair's ratio above 0."""
    x = np.asarray(diffs, dtype=float)
    delta = x.mean(axis=1)
    ss = ((x - delta[:, None]) ** 2).sum(axis=1)
    _, lo, hi, se, df = _bounded(delta, ss, x.shape[1] - 1, 1.0 / x.shape[1], settings)
    return delta, lo, hi, se, df, x.min(axis=1) > 0


def bounds(base_log: np.ndarray, new_log: np.ndarray, settings: RuleSettings):
    """The estimate of the module docstring for many benchmarks at once: ``base_log`` is
    (benchmarks, base replicates), ``new_log`` (benchmarks, new replicates), log times. Returns
    arrays ``delta, lo, hi, se``, the degrees of freedom and ``separated`` (every new replicate
    slower than every base one). ``estimate`` is this for one benchmark; the simulation test
    runs the very same code over thousands of simulated runs."""
    b, n = np.asarray(base_log, dtype=float), np.asarray(new_log, dtype=float)
    mb, mn = b.mean(axis=1), n.mean(axis=1)
    ss = ((b - mb[:, None]) ** 2).sum(axis=1) + ((n - mn[:, None]) ** 2).sum(axis=1)
    delta = mn - mb
    df = b.shape[1] + n.shape[1] - 2
    _, lo, hi, se, total_df = _bounded(delta, ss, df, 1.0 / b.shape[1] + 1.0 / n.shape[1], settings)
    return delta, lo, hi, se, total_df, n.min(axis=1) > b.max(axis=1)


def _bounded(delta: np.ndarray, ss: np.ndarray, df: int, scale: float, settings: RuleSettings):
    total_df = df + settings.prior_df
    if total_df <= 0:
        # one replicate a side and no prior: nothing says how far a replicate moves
        inf = np.full_like(delta, math.inf)
        return delta, -inf, inf, inf, 0.0
    s2 = (ss + settings.prior_df * settings.prior_sigma ** 2) / total_df
    se = np.sqrt(np.maximum(s2, settings.min_sigma ** 2) * scale + 2 * settings.run_sigma ** 2
                 + settings.unit_sigma ** 2)
    from scipy import stats  # where it is used: ``Policy`` and ``RuleSettings`` are built without scipy

    q_fail = float(stats.t.ppf(settings.confidence, total_df))
    q_pass = float(stats.t.ppf(settings.pass_confidence, total_df))
    return delta, delta - q_fail * se, delta + q_pass * se, se, float(total_df)


def decide(est: Estimate, settings: RuleSettings, *, budget_left: bool) -> Decision:
    """The rule of the module docstring for one benchmark's estimate."""
    code = decisions(np.array([est.delta]), np.array([est.lo]), np.array([est.hi]), np.array([est.separated]),
                     est.n_new, settings, budget_left=budget_left)[0]
    return _DECISIONS[int(code)]


#: the codes ``decisions`` returns, in order
_DECISIONS = (Decision.PASS, Decision.FAIL, Decision.MORE, Decision.AMBIGUOUS)


def decisions(delta: np.ndarray, lo: np.ndarray, hi: np.ndarray, separated: np.ndarray, n_new: int,
              settings: RuleSettings, *, budget_left: bool) -> np.ndarray:
    """``decide`` over arrays (the output of ``bounds``): 0 PASS, 1 FAIL, 2 MORE, 3 AMBIGUOUS."""
    theta = settings.threshold
    out = np.full(np.shape(delta), 2 if budget_left else 3, dtype=np.int8)
    if not budget_left:
        out[(delta >= math.log1p(2.0 * settings.floor)) & separated] = 1
    out[hi < theta] = 0
    if n_new >= settings.min_new_for_fail:
        out[lo >= theta] = 1
    return out


def lower_same_unit(est: Estimate, settings: RuleSettings) -> float:
    """``est.lo`` without the unit term: the lower bound the same windows would give on one unit
    (what the windows themselves show, before another unit's offset widens it)."""
    if not math.isfinite(est.se) or est.df <= 0:
        return est.lo
    from scipy import stats

    se = math.sqrt(max(est.se ** 2 - settings.unit_sigma ** 2, 0.0))
    return est.delta - float(stats.t.ppf(settings.confidence, est.df)) * se


def smallest_fail(settings: RuleSettings, sigma: float, n_base: int, n_new: int) -> float:
    """The smallest relative slowdown this rule can FAIL with ``n_base`` and ``n_new`` replicates
    whose spread is ``sigma``: the change whose lower bound just reaches the guard band,
    ``exp(theta + t * se) - 1``, ``se`` as in the module docstring with ``s = sigma``."""
    if n_base < 1 or n_new < 1:
        raise ValueError(f"need at least one replicate a side, got {n_base} and {n_new}")
    df = n_base + n_new - 2 + settings.prior_df
    if df <= 0:
        return math.inf
    from scipy import stats

    se = math.sqrt(max(sigma, settings.min_sigma) ** 2 * (1 / n_base + 1 / n_new) + 2 * settings.run_sigma ** 2
                   + settings.unit_sigma ** 2)
    return math.expm1(settings.threshold + float(stats.t.ppf(settings.confidence, df)) * se)


def improved(est: Estimate, settings: RuleSettings) -> bool:
    """Shown faster beyond the guard band."""
    return est.hi < -settings.threshold
