"""Noise-aware regression verdicts on raw timing samples.

Rule for one benchmark (``ratio = median(new) / median(base)``)::

    FAIL       ratio - 1 >= floor - allowance            (the change may reach the floor)
           and one-sided Mann-Whitney U p_adj < alpha  (new is slower, not a fluke)
           and ratio - 1 > noise                       (beyond the baseline's own spread)
               with allowance = max(drift, noise), never below 0: the floor is the slowdown
               that must be *caught*, and one measured median moves by up to ``drift`` between
               two runs of an unchanged stack, so a change within that distance of the floor
               is treated as reaching it (a guard band)
    AMBIGUOUS  slower beyond the floor but not significant or within noise (a suspect: re-measure),
               or significantly slower beyond the noise but under floor - allowance,
               or fewer than ``min_samples`` samples on either side
    PASS       otherwise; "improved" when faster by the same three criteria
    INVALID    either run flagged a clock anomaly / invalid sample set in ``extra_info``, or (with
               ``Policy(throttle="invalid")``) throttling: the timing is not judged. INVALID and
               too-few-samples AMBIGUOUS fail the gate unless ``allow_ambiguous``: a run where no
               verdict could be reached must not pass as if it had been checked.
               By default throttling is *reported* next to the verdict but the timing is judged:
               on an H200 the 700 W power cap (SwPowerCap) is the steady state of any heavy
               decode GEMM (seen in both runs of an unchanged A/A pair), so invalidating it would
               leave those kernels ungated, and a stack change that throttles more is itself a
               regression users want to see.
    NEW / MISSING  only in the current run / only in the baseline (MISSING fails by default:
               pytest-benchmark matches by ``fullname`` and silently skips renamed tests)

Why each part:

* **Median, not mean**: one outlier moved a mean +24 % while the median moved +0.2 %.
* **Floor**: with thousands of samples a 0.3 % drift is "significant"; the floor is the smallest
  change anyone would act on.
* **Mann-Whitney U** (rank test, one-sided "new slower"): GPU timings are skewed with outliers;
  MWU assumes no distribution. It is done with ``scipy.stats.mannwhitneyu``.
* **Allowance (guard band)**: judging only ``ratio - 1 >= floor`` catches a true 5 % slowdown
  about half the time, because the run-to-run shift of an unchanged build pushes the measured
  change to either side of 5 % (on the H200's A/A samples scaled by 1.05: 23 of 39 FAIL).
  ``drift`` is that shift: 2 % by default. The largest A/A change measured on the H200 was
  2.37 % (p95 1.17 %, docs/results-h200.md), below ``floor - drift`` = 3 %, so an unchanged
  stack does not fail while a 5 % slowdown does (38 of 39 on scaled A/A samples).
* **Noise**: a run-to-run shift of the median as large as the samples' own spread is normal on a
  GPU (clocks, power). ``noise`` is ``extra_info["noise_floor"]`` of the baseline (a relative A/A
  run-to-run spread measured by repeating an unchanged build) when present, else
  ``noise_k * 1.4826 * MAD / median`` of the baseline samples (a robust relative sigma).
* **Multiple comparisons**: M benchmarks at alpha each give about M*alpha false alarms per run.
  ``compare`` controls the family-wise error rate with Holm–Bonferroni over all compared
  benchmarks (uniformly more powerful than Bonferroni). A pytest plugin that must decide each test
  as it runs, before the others are known, uses ``judge`` with Bonferroni ``alpha / m``,
  m = number of benchmarks in the baseline: conservative (never fails where Holm would not), and
  the end-of-session summary re-decides everything with Holm.

``extra_info`` keys read here (written by the measure layer): ``throttled`` (bool),
``clock_anomaly`` (bool or text), ``invalid`` (text: any other reason the sample set is void),
``noise_floor`` (relative, e.g. 0.02), ``kernels`` (list of kernel names; a different *set* of
names is a dispatch change), ``sm_clock_mhz`` (number or per-sample list), ``throttle_reasons``
(text or list of NVML reason names).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, Sequence

import numpy as np
from scipy import stats

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import (Baseline, BenchmarkRecord, check_compatible, check_same_measurement,
                                    check_samples, is_ok)
from fp4bench.gate.coverage import (EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION, Coverage, Scope, account, group_of,
                                    narrow)

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution * this = its sigma
INVALID_FLAGS = ("clock_anomaly", "invalid")
THROTTLE_POLICIES = ("report", "invalid")


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    AMBIGUOUS = "AMBIGUOUS"
    NEW = "NEW"
    MISSING = "MISSING"
    INVALID = "INVALID"

    def __str__(self) -> str:
        return self.value


# Verdict kinds: what was judged.
TIMING = "timing"
LOST_TACTIC = "lost tactic"
NEW_TACTIC = "new tactic"
DISPATCH = "dispatch"
KERNEL_CHANGE = "kernel change"

DISPATCH_POLICIES = ("report", "fail")


@dataclass(frozen=True)
class Policy:
    """Gate settings. ``floor``/``noise`` are relative (0.05 = 5 %).

    Defaults are judgement calls, not measurements: ``floor`` 5 % matches common practice
    (sgl-kernel's ``benchmark/kernel_bench_regression`` gates per SKU
    at ±5 %); ``noise_k`` 2 because an unchanged GEMM's
    median moved ~4 % between runs under a power cap while per-sample spread was ~±3 %
    (docs/results-h200.md) — i.e. run-to-run drift is of the order of the sample spread;
    record an A/A ``noise_floor`` per benchmark to replace this proxy. ``min_samples`` 5: at 3+3
    samples the exact one-sided MWU p cannot go below 1/C(6,3) = 0.05; 5+5 reaches 0.004, still
    too coarse for a family of many benchmarks (``min_attainable_p``), so measure far more.
    """

    floor: float = 0.05
    #: run-to-run shift of an unchanged build's median (relative); the guard band below the floor
    drift: float = 0.02
    alpha: float = 0.05  # family-wise (Holm) in ``compare``; Bonferroni alpha/m in ``judge``
    noise_k: float = 2.0
    min_samples: int = 5
    allow_missing: bool = False
    fail_on_ambiguous: bool = False
    #: INVALID verdicts and too few samples (no timing judgement possible) do not fail the gate
    allow_ambiguous: bool = False
    dispatch: str = "report"  # "report": flag only; "fail": a kernel-set change is a FAIL
    throttle: str = "report"  # "report": judge timing, show throttle state; "invalid": INVALID
    #: why ``drift`` differs from what was asked (``for_changes``); shown in the report header
    drift_note: str = ""

    def __post_init__(self) -> None:
        if not (0 <= self.floor < 10):
            raise ValueError(f"Policy.floor is a relative change (0.05 = 5 %), got {self.floor}")
        if not (0 <= self.drift < 10):
            raise ValueError(f"Policy.drift is a relative change (0.02 = 2 %), got {self.drift}")
        if not (0 < self.alpha < 1):
            raise ValueError(f"Policy.alpha must be in (0, 1), got {self.alpha}")
        if not (math.isfinite(self.noise_k) and self.noise_k >= 0):
            raise ValueError(f"Policy.noise_k must be a finite number >= 0, got {self.noise_k}")
        if self.min_samples < 2:
            raise ValueError(f"Policy.min_samples must be >= 2, got {self.min_samples}")
        if self.throttle not in THROTTLE_POLICIES:
            raise ValueError(f"Policy.throttle must be one of {THROTTLE_POLICIES}, got {self.throttle!r}")
        if self.dispatch not in DISPATCH_POLICIES:
            raise ValueError(f"Policy.dispatch must be one of {DISPATCH_POLICIES}, got {self.dispatch!r}")


@dataclass(frozen=True)
class Verdict:
    """One benchmark's (or availability entry's) outcome, with everything needed to explain it."""

    name: str
    status: Status
    kind: str = TIMING
    ratio: float | None = None
    p_value: float | None = None  # raw one-sided MWU p, "new slower"
    p_adjusted: float | None = None  # after Holm / Bonferroni: the number compared with alpha
    base_median: float | None = None  # seconds
    new_median: float | None = None
    noise: float | None = None  # relative noise threshold used
    floor: float | None = None
    reason: str = ""
    improved: bool = False
    dispatch_changed: bool = False
    kernels_added: tuple[str, ...] = ()
    kernels_removed: tuple[str, ...] = ()
    base_clock: str | None = None
    new_clock: str | None = None
    base_throttle: str | None = None
    new_throttle: str | None = None
    n_base: int = 0
    n_new: int = 0
    #: no timing judgement was possible (INVALID, too few samples): the gate cannot say PASS
    undecided: bool = False

    @property
    def pct(self) -> float | None:
        """Change of the median in percent (+ = slower)."""
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0


# --- statistics -------------------------------------------------------------------------------


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm–Bonferroni adjusted p-values (reject where adjusted < alpha); FWER control."""
    p = np.asarray(pvalues, dtype=float)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    stepped = np.maximum.accumulate((m - np.arange(m)) * p[order])
    adj = np.empty_like(p)
    adj[order] = np.minimum(stepped, 1.0)
    return adj


def bonferroni(p: float, m: int) -> float:
    return min(1.0, p * max(m, 1))


def relative_noise(base: np.ndarray, base_extra: Mapping[str, Any], policy: Policy) -> float:
    """The change an unchanged build may show: A/A floor if recorded, else k * robust rel. sigma."""
    nf = base_extra.get("noise_floor")
    if nf is not None:
        nf = float(nf)
        if not math.isfinite(nf) or nf < 0:
            raise ValueError(f"extra_info['noise_floor'] must be a relative value >= 0, got {nf}")
        return nf
    med = float(np.median(base))
    if med <= 0:
        return math.inf
    return policy.noise_k * MAD_TO_SIGMA * float(stats.median_abs_deviation(base)) / med


def min_attainable_p(n_new: int, n_base: int) -> float:
    """Smallest one-sided exact MWU p with these sample counts: 1 / C(n1+n2, n1)."""
    return 1.0 / math.comb(n_new + n_base, n_new)


@dataclass(frozen=True)
class _Assessment:
    base_median: float
    new_median: float
    ratio: float
    p_slower: float
    p_faster: float
    noise: float
    n_base: int
    n_new: int


def _assess(
    name: str, base: Sequence[float], new: Sequence[float], base_extra: Mapping[str, Any], policy: Policy
) -> _Assessment:
    b = np.asarray(check_samples(list(base), f"baseline benchmark {name!r}"), dtype=float)
    n = np.asarray(check_samples(list(new), f"current benchmark {name!r}"), dtype=float)
    mb, mn = float(np.median(b)), float(np.median(n)) if n.size else math.nan
    ratio = mn / mb if mb > 0 else math.nan
    if b.size and n.size:
        p_slow = float(stats.mannwhitneyu(n, b, alternative="greater").pvalue)
        p_fast = float(stats.mannwhitneyu(n, b, alternative="less").pvalue)
    else:
        p_slow = p_fast = 1.0
    p_slow = 1.0 if math.isnan(p_slow) else p_slow
    p_fast = 1.0 if math.isnan(p_fast) else p_fast
    try:
        noise = relative_noise(b, base_extra, policy)
    except ValueError as e:
        raise ValueError(f"benchmark {name!r}: {e}") from None
    return _Assessment(mb, mn, ratio, p_slow, p_fast, noise, b.size, n.size)


# --- extra_info interpretation ----------------------------------------------------------------


def _invalid_reason(extra: Mapping[str, Any], side: str, policy: "Policy | None" = None) -> str | None:
    flags = INVALID_FLAGS + (("throttled",) if policy is not None and policy.throttle == "invalid" else ())
    for key in flags:
        v = extra.get(key)
        if v:
            detail = "" if v is True else f": {v}"
            return f"{side} run {key.replace('_', ' ')}{detail}"
    return None


def _clock(extra: Mapping[str, Any]) -> str | None:
    v = extra.get("sm_clock_mhz")
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        if not v:
            return None
        v = float(np.median(np.asarray(v, dtype=float)))
    return f"{float(v):.0f}"


def _throttle(extra: Mapping[str, Any]) -> str | None:
    v = extra.get("throttle_reasons")
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v) if v else "none"
    return str(v) or "none"


def _kernel_change(
    base_extra: Mapping[str, Any], new_extra: Mapping[str, Any]
) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(added, removed) kernel names, or None when either side did not record kernels."""
    kb, kn = base_extra.get("kernels"), new_extra.get("kernels")
    if kb is None or kn is None:
        return None
    sb, sn = set(map(str, kb)), set(map(str, kn))
    if sb == sn:
        return None
    return tuple(sorted(sn - sb)), tuple(sorted(sb - sn))


# --- decisions --------------------------------------------------------------------------------


def _decide(
    name: str,
    a: _Assessment,
    p_adj_slow: float,
    p_adj_fast: float,
    family: int,
    base_extra: Mapping[str, Any],
    new_extra: Mapping[str, Any],
    policy: Policy,
) -> Verdict:
    common: dict[str, Any] = dict(
        name=name,
        ratio=a.ratio,
        p_value=a.p_slower,
        p_adjusted=p_adj_slow,
        base_median=a.base_median,
        new_median=a.new_median,
        noise=a.noise,
        floor=policy.floor,
        base_clock=_clock(base_extra),
        new_clock=_clock(new_extra),
        base_throttle=_throttle(base_extra),
        new_throttle=_throttle(new_extra),
        n_base=a.n_base,
        n_new=a.n_new,
    )
    invalid = _invalid_reason(base_extra, "baseline", policy) or _invalid_reason(new_extra, "current", policy)
    change = a.ratio - 1.0
    improved = False
    undecided = True
    if invalid:
        status, reason = Status.INVALID, f"{invalid}; timing not judged"
    elif not math.isfinite(change):
        status, reason = Status.INVALID, "baseline median is 0 or samples are empty; ratio undefined"
    elif min(a.n_base, a.n_new) < policy.min_samples:
        status = Status.AMBIGUOUS
        reason = f"too few samples (baseline {a.n_base}, current {a.n_new}; need >= {policy.min_samples})"
    else:
        undecided = False
        status, reason, improved = _timing_status(change, a, p_adj_slow, p_adj_fast, family, policy)

    kinds = _kernel_change(base_extra, new_extra)
    if kinds is not None and new_extra.get("explicit_tactic"):
        return _tactic_kernel_change(common, base_extra, new_extra, kinds, policy)
    kind = TIMING
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    if kinds is not None:
        added, removed = kinds
        note = f"kernels changed (+{list(added)} -{list(removed)})"
        reason = f"{reason}; {note}" if reason else note
        if policy.dispatch == "fail":
            status, kind = Status.FAIL, DISPATCH
    return Verdict(
        status=status,
        kind=kind,
        reason=reason,
        improved=improved,
        dispatch_changed=kinds is not None,
        kernels_added=added,
        kernels_removed=removed,
        undecided=undecided,
        **common,
    )


def _identity(extra: Mapping[str, Any]) -> str:
    kernels = extra.get("kernels")
    return ", ".join(map(str, kernels)) if kernels else str(extra.get("tactic_config") or "?")


def _tactic_kernel_change(common: dict[str, Any], base_extra: Mapping[str, Any], new_extra: Mapping[str, Any],
                          kinds: tuple[tuple[str, ...], tuple[str, ...]], policy: Policy) -> Verdict:
    """An explicit tactic (a library's config index) that now runs another kernel: the library
    re-ordered or replaced its configs, so the two timings belong to different kernels and are
    not compared. Reported (INVALID: timing not judged); a FAIL under ``dispatch="fail"``."""
    tactic = new_extra.get("tactic", "?")
    reason = (f"tactic {tactic} now runs another kernel: {_identity(base_extra)} → {_identity(new_extra)}; "
              "timings of different kernels are not compared")
    status = Status.FAIL if policy.dispatch == "fail" else Status.INVALID
    kept = {k: v for k, v in common.items() if k not in ("ratio", "p_value", "p_adjusted")}  # no Δ
    return Verdict(status=status, kind=KERNEL_CHANGE, reason=reason, dispatch_changed=True,
                   kernels_added=kinds[0], kernels_removed=kinds[1], **kept)


def lost_kernel_verdicts(baseline: Baseline,
                         current: Mapping[str, tuple[Sequence[float], Mapping[str, Any] | None]]) -> list[Verdict]:
    """A kernel an explicit tactic ran in the baseline that no tactic of the same backend and
    problem runs now is a lost tactic (FAIL), whatever index it had: the library dropped the
    config. Where another index runs it now, the re-ordering is named on the kernel-change line
    of the old index (``compare``). Only for backends and problems measured in both runs."""
    now: dict[tuple[Any, Any], dict[str, str]] = {}
    for _, (_, extra) in current.items():
        extra = extra or {}
        if extra.get("kernels"):
            now.setdefault((extra.get("backend"), extra.get("problem")), {})[_identity(extra)] = extra.get("tactic")
    out = []
    for name, rec in baseline.benchmarks.items():
        x = rec.extra_info
        group = now.get((x.get("backend"), x.get("problem")))
        if not x.get("explicit_tactic") or not x.get("kernels") or group is None:
            continue
        if _identity(x) not in group:
            out.append(Verdict(name=name, status=Status.FAIL, kind=LOST_TACTIC, reason=(
                f"tactic {x.get('tactic')} ran {_identity(x)} in the baseline; no tactic of {x.get('backend')} "
                f"runs it now")))
    return out


def _moved_to(v: Verdict, base_extra: Mapping[str, Any],
              current: Mapping[str, tuple[Sequence[float], Mapping[str, Any] | None]]) -> Verdict:
    """Name the index that runs the baseline's kernel now (a re-ordered list)."""
    old = _identity(base_extra)
    for _, (_, extra) in current.items():
        extra = extra or {}
        if (extra.get("backend"), extra.get("problem")) == (base_extra.get("backend"), base_extra.get("problem")) \
                and extra.get("kernels") and _identity(extra) == old:
            return replace(v, reason=f"{v.reason}; its baseline kernel now runs as tactic {extra.get('tactic')}")
    return v


def _timing_status(
    change: float, a: _Assessment, p_slow: float, p_fast: float, family: int, policy: Policy
) -> tuple[Status, str, bool]:
    sig_slow, sig_fast = p_slow < policy.alpha, p_fast < policy.alpha
    floor_pct, noise_pct = policy.floor * 100, a.noise * 100
    allowance = max(policy.drift, a.noise)
    threshold = max(0.0, policy.floor - allowance)
    if change >= threshold and sig_slow and change > a.noise:
        if change >= policy.floor:
            return Status.FAIL, "slower beyond floor and noise", False
        return Status.FAIL, (f"slower beyond noise and within the run-to-run allowance "
                             f"(±{allowance * 100:.1f}%) of the {floor_pct:g}% floor"), False
    if change >= policy.floor:
        if not sig_slow:
            why = (
                f"slower beyond the {floor_pct:g}% floor but not significant "
                f"(p_adj {p_slow:.2g} >= α {policy.alpha:g})"
            )
            p_min = min_attainable_p(a.n_new, a.n_base)
            if p_min * family >= policy.alpha:
                why += (
                    f"; with n={a.n_base}/{a.n_new} the smallest attainable p is {p_min:.2g}"
                    f" >= α/m = {policy.alpha / family:.2g} (m={family}): take more samples"
                )
            return Status.AMBIGUOUS, why, False
        return Status.AMBIGUOUS, f"slower beyond the floor but within the baseline's noise (±{noise_pct:.1f}%)", False
    if change > 0 and sig_slow and change > a.noise:
        return Status.AMBIGUOUS, (f"significantly slower but under the {floor_pct:g}% floor less the "
                                  f"{allowance * 100:.1f}% allowance"), False
    if -change >= policy.floor and sig_fast and -change > a.noise:
        return Status.PASS, "improved", True
    return Status.PASS, "", False


def judge(
    name: str,
    base: BenchmarkRecord | None,
    samples: Sequence[float],
    extra_info: Mapping[str, Any] | None = None,
    policy: Policy = Policy(),
    m: int = 1,
) -> Verdict:
    """Decide one benchmark in isolation (pytest plugin, as each test runs).

    Bonferroni at ``alpha / m`` with ``m`` = number of benchmarks in the baseline: conservative
    before the other results are known; ``compare`` re-decides the whole set with Holm.
    """
    extra = dict(extra_info or {})
    if base is None:
        return _new_verdict(name, samples, extra)
    a = _assess(name, base.samples, samples, base.extra_info, policy)
    return _decide(
        name, a, bonferroni(a.p_slower, m), bonferroni(a.p_faster, m), m, base.extra_info, extra, policy
    )


def _new_verdict(name: str, samples: Sequence[float], extra: Mapping[str, Any]) -> Verdict:
    med = float(np.median(np.asarray(samples, dtype=float))) if len(samples) else None
    return Verdict(
        name=name,
        status=Status.NEW,
        new_median=med,
        n_new=len(samples),
        new_clock=_clock(extra),
        new_throttle=_throttle(extra),
        reason="not in the baseline",
    )


# --- whole-set comparison ---------------------------------------------------------------------

_ORDER = {Status.FAIL: 0, Status.MISSING: 1, Status.AMBIGUOUS: 2, Status.INVALID: 3, Status.NEW: 4, Status.PASS: 5}


@dataclass
class CompareResult:
    """All verdicts of one comparison, the policy used, and what changed in the fingerprint."""

    verdicts: list[Verdict]
    policy: Policy
    changes: list[tuple[str, Any, Any]] = field(default_factory=list)
    baseline_fingerprint: Fingerprint | None = None
    current_fingerprint: Fingerprint | None = None
    #: what was judged against what was expected (``compare`` always sets it)
    coverage: Coverage | None = None

    def by_status(self, status: Status) -> list[Verdict]:
        return [v for v in self.verdicts if v.status is status]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Status}
        for v in self.verdicts:
            out[v.status.value] += 1
        return out

    def is_failure(self, v: Verdict) -> bool:
        return is_failure(v, self.policy)

    @property
    def failures(self) -> list[Verdict]:
        return [v for v in self.verdicts if self.is_failure(v)]

    @property
    def regressions(self) -> list[Verdict]:
        """The failures that are verdicts on what was measured (MISSING is a coverage gap)."""
        return [v for v in self.failures if v.status is not Status.MISSING]

    @property
    def incomplete(self) -> bool:
        """Nothing judged, or fewer than expected without ``allow_missing`` (``coverage``)."""
        if self.coverage is None:
            return bool(self.failures) and not self.regressions
        return self.coverage.incomplete

    @property
    def exit_code(self) -> int:
        """``EXIT_REGRESSION`` (1) for a FAIL, lost tactic or a failing undecided verdict among what
        was measured; else ``EXIT_INCOMPLETE`` (3) when nothing, or less than expected, was judged;
        else ``EXIT_OK`` (0). A regression wins: it is a finding about what did run."""
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INCOMPLETE if self.incomplete else EXIT_OK

    @property
    def clean(self) -> bool:
        return self.exit_code == 0

    def sorted(self) -> list[Verdict]:
        """FAIL first, then MISSING, AMBIGUOUS, INVALID, NEW, PASS; largest slowdown first."""
        return sorted(self.verdicts, key=lambda v: (_ORDER[v.status], -(v.ratio or 0.0), v.name))

    def suspects(self) -> list[str]:
        """Timing benchmarks worth re-measuring before failing: FAIL, or slower beyond the floor
        but unconfirmed (AMBIGUOUS) or throttled (INVALID). Lost tactics and MISSING are not
        timing noise, so re-measuring would not change them."""
        out = []
        for v in self.verdicts:
            if v.kind != TIMING or v.ratio is None:
                continue
            slow = v.ratio - 1.0 >= self.policy.floor
            if v.status is Status.FAIL or (slow and v.status in (Status.AMBIGUOUS, Status.INVALID)):
                out.append(v.name)
        return out


def is_failure(v: Verdict, policy: Policy) -> bool:
    """Whether ``v`` fails the gate: FAIL; MISSING unless allowed; AMBIGUOUS with
    ``fail_on_ambiguous``; and a verdict that could not be reached (INVALID, too few samples)
    unless ``allow_ambiguous`` — a run that measured nothing judgeable must not pass."""
    if v.status is Status.FAIL:
        return True
    if v.status is Status.MISSING:
        return not policy.allow_missing
    if v.undecided:
        return not policy.allow_ambiguous
    return v.status is Status.AMBIGUOUS and policy.fail_on_ambiguous


def other_unit(base: Fingerprint | None, current: Fingerprint | None) -> bool:
    """A GPU run whose baseline is from another physical GPU, or where either side did not
    record its unit (``gpu_uuid``): unknown counts as another unit."""
    if base is None or current is None or current.compute_capability is None:
        return False  # CPU runs have no unit
    return base.gpu_uuid is None or current.gpu_uuid is None or base.gpu_uuid != current.gpu_uuid


def for_changes(policy: Policy, changes: Sequence[tuple[str, Any, Any]],
                base: Fingerprint | None = None, current: Fingerprint | None = None) -> Policy:
    """The policy to use given what changed between the baseline's machine and this one.

    The run-to-run allowance (``drift``) was measured back to back on one GPU (A/A max 2.37 %).
    Between two machines with the same GPU model two ~9 µs bf16 kernels moved +3.5 % and +4.2 %,
    beyond it (docs/results-h200.md). So when the
    fingerprint shows another physical GPU, the allowance is not applied: only a change that
    reaches the floor itself fails, and the report says why. A unit that either side did not
    record (``base``/``current`` fingerprints without ``gpu_uuid``) counts as another unit."""
    if policy.drift and (any(key == "gpu_uuid" for key, _, _ in changes) or other_unit(base, current)):
        return replace(policy, drift=0.0,
                       drift_note=f"{policy.drift * 100:g}% not applied: another or unknown GPU unit")
    return policy


def compare(
    baseline: Baseline,
    current: Mapping[str, tuple[Sequence[float], Mapping[str, Any] | None]],
    availability_now: Mapping[str, str] | None = None,
    policy: Policy = Policy(),
    current_fingerprint: Fingerprint | None = None,
    current_sweep: Mapping[str, Any] | None = None,
    scope: Scope = Scope(),
) -> CompareResult:
    """Judge every benchmark of ``current`` (``{fullname: (samples_s, extra_info)}``) against
    ``baseline`` with Holm–Bonferroni over the compared set; plus availability regressions.
    ``scope`` says what the run selected and reached: the baseline's benchmarks outside it are
    not expected, those it never reached are not judged; both are counted in ``coverage``.

    Raises ``IncompatibleBaseline`` when ``current_fingerprint`` is a different GPU model, or
    ``current_sweep`` was timed another way (L2 mode, timer) than the baseline.
    """
    changes: list[tuple[str, Any, Any]] = []
    if current_sweep is not None:
        check_same_measurement(baseline.sweep, dict(current_sweep))
    if current_fingerprint is not None:
        changes = check_compatible(baseline.fingerprint, current_fingerprint)
        policy = for_changes(policy, changes, baseline.fingerprint, current_fingerprint)
    full = baseline
    expected, not_selected = narrow(full.benchmarks, scope.excluded, None if scope.selected is None else
                                    (lambda n: scope.selected(full.benchmarks[n].extra_info)))
    unreached = set(scope.not_reached) - set(current)
    baseline = replace(full, benchmarks={n: full.benchmarks[n] for n in expected if n not in unreached})

    verdicts: dict[str, Verdict] = {}
    judged: list[tuple[str, _Assessment, BenchmarkRecord, Mapping[str, Any]]] = []
    for name, rec in baseline.benchmarks.items():
        if name not in current:
            verdicts[name] = Verdict(
                name=name,
                status=Status.MISSING,
                base_median=rec.median,
                n_base=len(rec.samples),
                reason="in the baseline but not measured now (renamed, removed or skipped?)",
            )
            continue
        samples, extra = current[name]
        judged.append((name, _assess(name, rec.samples, samples, rec.extra_info, policy), rec, dict(extra or {})))
    for name, (samples, extra) in current.items():
        if name not in baseline.benchmarks:
            verdicts[name] = _new_verdict(name, samples, dict(extra or {}))

    # Holm family: benchmarks whose timing is actually tested (valid and with enough samples).
    in_family = [
        i
        for i, (_, a, rec, extra) in enumerate(judged)
        if min(a.n_base, a.n_new) >= policy.min_samples
        and math.isfinite(a.ratio)
        and not (_invalid_reason(rec.extra_info, "", policy) or _invalid_reason(extra, "", policy))
    ]
    fam = len(in_family)
    adj_slow = dict(zip(in_family, holm([judged[i][1].p_slower for i in in_family])))
    adj_fast = dict(zip(in_family, holm([judged[i][1].p_faster for i in in_family])))
    for i, (name, a, rec, extra) in enumerate(judged):
        verdicts[name] = _decide(
            name,
            a,
            adj_slow.get(i, bonferroni(a.p_slower, fam)),
            adj_fast.get(i, bonferroni(a.p_faster, fam)),
            max(fam, 1),
            rec.extra_info,
            extra,
            policy,
        )

    for name, v in verdicts.items():
        if v.kind == KERNEL_CHANGE:
            verdicts[name] = _moved_to(v, baseline.benchmarks[name].extra_info, current)
    ordered = [verdicts[n] for n in baseline.benchmarks] + [
        verdicts[n] for n in current if n not in baseline.benchmarks
    ] + lost_kernel_verdicts(baseline, current)
    if availability_now is not None:
        ordered += availability_verdicts(baseline.availability, availability_now)
    decided = {n for n in baseline.benchmarks if verdicts[n].status is not Status.MISSING
               and not verdicts[n].undecided and verdicts[n].kind != KERNEL_CHANGE}
    coverage = account(expected, set(current), decided, unreached, not_selected,
                       [n for n in scope.skipped_now if n not in full.benchmarks], policy.allow_missing,
                       {n: group_of(r.extra_info) for n, r in full.benchmarks.items()})
    return CompareResult(ordered, policy, changes, baseline.fingerprint, current_fingerprint, coverage)


def availability_verdicts(before: Mapping[str, str], now: Mapping[str, str]) -> list[Verdict]:
    """A tactic that worked in the baseline and is unsupported now is a FAIL ("lost tactic");
    one that newly works is NEW ("new tactic"). Entries absent now are left to the MISSING
    verdict of their benchmark (a narrower sweep is not a lost tactic)."""
    out = []
    for key in sorted(set(before) & set(now)):
        was, is_ = is_ok(before[key]), is_ok(now[key])
        if was and not is_:
            reason = f"ok in the baseline, now {now[key]}"
            out.append(Verdict(name=key, status=Status.FAIL, kind=LOST_TACTIC, reason=reason))
        elif is_ and not was:
            reason = f"now ok (baseline: {before[key]})"
            out.append(Verdict(name=key, status=Status.NEW, kind=NEW_TACTIC, improved=True, reason=reason))
    return out
