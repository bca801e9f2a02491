"""Regression verdicts on independent measurement windows.

The timing of one benchmark is decided by ``gate.rule`` on its **window medians**: each window of
the baseline (``--fp4-windows`` when it was recorded: interleaved passes over the sweep, each its
own preparation and graph capture) and each window of the current run is one replicate; samples
inside a window only say how well that window's median is known::

    FAIL       the change is shown, by >= 2 new windows, to reach the guard band
               log(1 + floor * (1 - margin)) (``rule.decide``)
    PASS       it is shown to stay below the guard band; "improved" when shown below minus it
    AMBIGUOUS  neither, and no further window can be taken (``judge(budget_left=False)``, every
               ``compare``); printed with its interval. In a pytest run an undecided benchmark
               takes another window first (``Verdict.wants_more``), up to a per-case and a
               session budget. Too few samples (``min_samples``) is AMBIGUOUS too, undecided
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

Each benchmark is decided on its own windows, so the decision made as a pytest test finishes
(``judge``) and the one of the session's final table (``compare``) are the same decision.
Noise only widens a benchmark's interval (it needs more windows to be decided); it never moves
the threshold. A baseline from another GPU unit adds the unit-to-unit offset to the error term
(``for_changes``): such a baseline is less sensitive, and the report says so.

``extra_info`` keys read here (written by the measure layer): ``throttled`` (bool),
``clock_anomaly`` (bool or text), ``invalid`` (text: any other reason the sample set is void),
``kernels`` (list of kernel names; a different *set* of names is a dispatch change),
``sm_clock_mhz`` (number or per-sample list), ``throttle_reasons`` (text or list of NVML reason
names). ``noise_floor`` is read only to say that it no longer applies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, Sequence

import numpy as np

from fp4bench.env import Fingerprint
from fp4bench.gate import rule
from fp4bench.gate.baseline import (Baseline, BenchmarkRecord, check_compatible, check_same_measurement,
                                    check_samples, is_ok, measurement_notes)
from fp4bench.gate.coverage import (EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION, Coverage, Scope, account, group_of,
                                    narrow)
from fp4bench.options.deprecated import warn_once

MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution * this = its sigma
#: the spread (log time) of one benchmark's offset between two H200 units: docs/measurement.md,
#: "Another GPU unit" derives it from the cross-unit A/A numbers of docs/results-h200.md
CROSS_UNIT_SIGMA = 0.006
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
    """Gate settings. ``floor`` is relative (0.05 = 5 %): the slowdown that must FAIL; ``floor``
    5 % matches common practice (sgl-kernel's ``benchmark/kernel_bench_regression`` gates per
    SKU at ±5 %). The decision rule's other settings (``margin``, ``confidence``, ``prior_sigma``,
    ``min_new_for_fail``) default to ``rule.RuleSettings``'s; ``unit_sigma`` is set by
    ``for_changes`` for a baseline from another GPU unit. ``min_samples``: fewer samples on
    either side is no measurement (AMBIGUOUS, undecided).

    ``drift``, ``alpha`` and ``noise_k`` belonged to a sample-level test that is gone; they are
    kept so old command lines parse, and no longer change any verdict (``--fp4-drift`` warns)."""

    floor: float = 0.05
    drift: float = 0.0  # deprecated: not applied
    alpha: float = 0.05  # deprecated: not applied
    noise_k: float = 2.0  # deprecated: not applied
    margin: float = rule.RuleSettings.margin
    confidence: float = rule.RuleSettings.confidence
    pass_confidence: float = rule.RuleSettings.pass_confidence
    prior_sigma: float = rule.RuleSettings.prior_sigma
    min_new_for_fail: int = rule.RuleSettings.min_new_for_fail
    unit_sigma: float = 0.0
    min_samples: int = 5
    allow_missing: bool = False
    fail_on_ambiguous: bool = False
    #: INVALID verdicts and too few samples (no timing judgement possible) do not fail the gate
    allow_ambiguous: bool = False
    dispatch: str = "report"  # "report": flag only; "fail": a kernel-set change is a FAIL
    throttle: str = "report"  # "report": judge timing, show throttle state; "invalid": INVALID
    #: why the rule is less sensitive than on the baseline's own unit (``for_changes``); shown
    #: in the report header
    drift_note: str = ""

    def rule_settings(self) -> rule.RuleSettings:
        """The decision rule's settings for this policy."""
        return rule.RuleSettings(floor=self.floor, margin=self.margin, confidence=self.confidence,
                                 pass_confidence=self.pass_confidence,
                                 prior_sigma=self.prior_sigma, min_new_for_fail=self.min_new_for_fail,
                                 unit_sigma=self.unit_sigma)

    def __post_init__(self) -> None:
        if not (0 < self.floor < 10):
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
        self.rule_settings()  # RuleSettings validates margin, confidence, prior_sigma, ...


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
    #: the rule's interval of the change, percent (lower, upper one-sided bounds)
    interval: tuple[float, float] | None = None
    #: windows judged on each side
    windows_base: int = 0
    windows_new: int = 0
    #: undecided, and the caller may take another window (``judge(budget_left=True)``)
    wants_more: bool = False

    @property
    def pct(self) -> float | None:
        """Change of the median in percent (+ = slower)."""
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0


# --- replicates ---------------------------------------------------------------------------


def windows_of(samples: Any) -> tuple[tuple[float, ...], ...]:
    """The windows of one side: a sequence of sample sequences, or one flat sample sequence
    (one window)."""
    seq = list(samples)
    if seq and isinstance(seq[0], (list, tuple, np.ndarray)):
        return tuple(tuple(w) for w in seq)
    return (tuple(seq),)


@dataclass(frozen=True)
class _Assessment:
    base_median: float
    new_median: float
    ratio: float
    est: rule.Estimate | None
    n_base: int
    n_new: int
    windows_base: int
    windows_new: int


def _assess(name: str, base: BenchmarkRecord, new: Any, base_extra: Mapping[str, Any],
            policy: Policy) -> _Assessment:
    bw = tuple(check_samples(list(w), f"baseline benchmark {name!r}") for w in base.windows)
    nw = tuple(check_samples(list(w), f"current benchmark {name!r}") for w in windows_of(new))
    if base_extra.get("noise_floor") is not None:
        warn_once("noise_floor", "fp4bench: the baseline's extra_info['noise_floor'] no longer applies: the gate "
                                 "takes the spread between windows from the windows themselves")
    bm = [float(np.median(w)) for w in bw]
    nm = [float(np.median(w)) for w in nw]
    est = rule.estimate(bm, nm, policy.rule_settings(), what=f"benchmark {name!r}")
    mb, mn = float(np.exp(np.mean(np.log(bm)))), float(np.exp(np.mean(np.log(nm))))
    return _Assessment(mb, mn, math.exp(est.delta), est, sum(map(len, bw)), sum(map(len, nw)), len(bw), len(nw))


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
    base_extra: Mapping[str, Any],
    new_extra: Mapping[str, Any],
    policy: Policy,
    budget_left: bool = False,
) -> Verdict:
    common: dict[str, Any] = dict(
        name=name,
        ratio=a.ratio,
        base_median=a.base_median,
        new_median=a.new_median,
        noise=a.est.se if a.est is not None else None,
        interval=a.est.interval_pct if a.est is not None else None,
        windows_base=a.windows_base,
        windows_new=a.windows_new,
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
    more = False
    if invalid:
        status, reason = Status.INVALID, f"{invalid}; timing not judged"
    elif not math.isfinite(change):
        status, reason = Status.INVALID, "baseline median is 0 or samples are empty; ratio undefined"
    elif min(a.n_base, a.n_new) < policy.min_samples:
        status = Status.AMBIGUOUS
        reason = f"too few samples (baseline {a.n_base}, current {a.n_new}; need >= {policy.min_samples})"
    else:
        undecided = False
        status, reason, improved, more = _timing_status(a, policy, budget_left)

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
        wants_more=more,
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
    kept = {k: v for k, v in common.items() if k not in ("ratio", "interval")}  # no Δ
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


def _timing_status(a: _Assessment, policy: Policy, budget_left: bool) -> tuple[Status, str, bool, bool]:
    """(status, reason, improved, wants more) from the rule's decision on the windows."""
    settings = policy.rule_settings()
    est = a.est
    d = rule.decide(est, settings, budget_left=budget_left)
    lo, hi = est.interval_pct
    band = math.expm1(settings.threshold) * 100
    where = f"Δ {est.pct:+.1f}% in [{lo:+.1f}%, {hi:+.1f}%] over {est.n_base}+{est.n_new} windows"
    if d is rule.Decision.FAIL:
        if est.lo >= settings.threshold and est.n_new >= settings.min_new_for_fail:
            return Status.FAIL, f"{where}: slower beyond the {band:.1f}% guard band below the floor", False, False
        return Status.FAIL, f"{where}: at least twice the floor, every new window slower than every base one", \
            False, False
    if d is rule.Decision.PASS:
        better = rule.improved(est, settings)
        return Status.PASS, ("improved" if better else ""), better, False
    if d is rule.Decision.MORE:
        return Status.AMBIGUOUS, f"{where}: undecided, another window wanted", False, True
    if est.lo >= settings.threshold:
        return Status.AMBIGUOUS, (f"{where}: slower beyond the {band:.1f}% guard band, but a FAIL needs "
                                  f"{settings.min_new_for_fail} independent new windows"), False, False
    return Status.AMBIGUOUS, f"{where}: neither shown to reach nor to stay below the {band:.1f}% guard band", \
        False, False


def judge(
    name: str,
    base: BenchmarkRecord | None,
    samples: Any,
    extra_info: Mapping[str, Any] | None = None,
    policy: Policy = Policy(),
    m: int = 1,
    *,
    budget_left: bool = False,
) -> Verdict:
    """Decide one benchmark on its own windows (``samples``: the current run's windows, or one
    flat sample list). With ``budget_left`` an undecided benchmark is AMBIGUOUS with
    ``wants_more``: take another window and judge again. ``m`` is not used (kept for callers)."""
    extra = dict(extra_info or {})
    if base is None:
        return _new_verdict(name, samples, extra)
    a = _assess(name, base, samples, base.extra_info, policy)
    return _decide(name, a, base.extra_info, extra, policy, budget_left)


def _new_verdict(name: str, samples: Any, extra: Mapping[str, Any]) -> Verdict:
    flat = [x for w in windows_of(samples) for x in w]
    med = float(np.median(np.asarray(flat, dtype=float))) if flat else None
    return Verdict(
        name=name,
        status=Status.NEW,
        new_median=med,
        n_new=len(flat),
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
    #: lines for the report header: what makes this comparison less sensitive
    notes: list[str] = field(default_factory=list)
    #: each measured benchmark's own policy, when benchmarks were judged against different
    #: baseline files (``gate.choice``); empty: ``policy`` judged them all
    policies: Mapping[str, Policy] = field(default_factory=dict)

    def less_sensitive(self) -> bool:
        """Every judged benchmark carries the unit-to-unit offset (its baseline is from another or
        an unknown GPU unit)."""
        if not self.policies:
            return other_unit(self.baseline_fingerprint, self.current_fingerprint)
        return all(p.unit_sigma > 0 for p in self.policies.values())

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
        """Timing benchmarks worth more windows: undecided by the rule (AMBIGUOUS with an
        interval), or slower beyond the floor but throttled (INVALID). Lost tactics and MISSING
        are not timing noise, so re-measuring would not change them."""
        out = []
        for v in self.verdicts:
            if v.kind != TIMING or v.ratio is None:
                continue
            slow = v.ratio - 1.0 >= self.policy.floor
            if (v.status is Status.AMBIGUOUS and v.interval is not None) or (slow and v.status is Status.INVALID):
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

    Another physical GPU of the same model shifts single benchmarks by more than a unit's own
    window-to-window spread (two ~9 µs bf16 kernels +3.5 % and +4.2 % across units, none beyond
    2.4 % on one unit: docs/results-h200.md); more windows do not average that offset away. So
    when the fingerprint shows another (or an unrecorded) unit, ``unit_sigma`` =
    ``CROSS_UNIT_SIGMA`` enters the error term: the baseline is less sensitive (a change needs
    a larger Δ to be shown), and the report says so. The threshold itself does not move."""
    if policy.unit_sigma == 0 and (any(key == "gpu_uuid" for key, _, _ in changes) or other_unit(base, current)):
        return replace(policy, unit_sigma=CROSS_UNIT_SIGMA,
                       drift_note=f"another or unknown GPU unit: ±{CROSS_UNIT_SIGMA * 100:g}% unit offset "
                                  "in the error term")
    return policy


def compare(
    baseline: Baseline,
    current: Mapping[str, tuple[Sequence[float], Mapping[str, Any] | None]],
    availability_now: Mapping[str, str] | None = None,
    policy: Policy = Policy(),
    current_fingerprint: Fingerprint | None = None,
    current_sweep: Mapping[str, Any] | None = None,
    scope: Scope = Scope(),
    policies: Mapping[str, Policy] | None = None,
) -> CompareResult:
    """Judge every benchmark of ``current`` (``{fullname: (windows or samples_s, extra_info)}``)
    against ``baseline``, each on its own windows with no further window possible (an undecided
    benchmark is AMBIGUOUS); plus availability regressions.
    ``scope`` says what the run selected and reached: the baseline's benchmarks outside it are
    not expected, those it never reached are not judged; both are counted in ``coverage``.

    ``policies`` gives a benchmark its own policy (its record came from the baseline file of the
    GPU it ran on, ``gate.choice``); ``policy`` then judges the rest as given, without the
    fingerprint's unit adjustment (each of ``policies`` has its own).

    Raises ``IncompatibleBaseline`` when ``current_fingerprint`` is a different GPU model, or
    ``current_sweep`` was timed another way (L2 mode, timer, copy rule) than the baseline; a
    baseline timed on one placement per large case is judged, with a note (``measurement_notes``).
    """
    changes: list[tuple[str, Any, Any]] = []
    if current_sweep is not None:
        check_same_measurement(baseline.sweep, dict(current_sweep))
    if current_fingerprint is not None:
        changes = check_compatible(baseline.fingerprint, current_fingerprint)
        if not policies:
            policy = for_changes(policy, changes, baseline.fingerprint, current_fingerprint)
    own = dict(policies or {})
    full = baseline
    expected, not_selected = narrow(full.benchmarks, scope.excluded, None if scope.selected is None else
                                    (lambda n: scope.selected(full.benchmarks[n].extra_info)))
    unreached = set(scope.not_reached) - set(current)
    baseline = replace(full, benchmarks={n: full.benchmarks[n] for n in expected if n not in unreached})

    verdicts: dict[str, Verdict] = {}
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
        p = own.get(name, policy)
        verdicts[name] = _decide(name, _assess(name, rec, samples, rec.extra_info, p), rec.extra_info,
                                 dict(extra or {}), p)
    for name, (samples, extra) in current.items():
        if name not in baseline.benchmarks:
            verdicts[name] = _new_verdict(name, samples, dict(extra or {}))

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
    notes = measurement_notes(full.sweep, dict(current_sweep)) if current_sweep is not None else []
    if baseline.min_windows == 1:
        notes.append("baseline has 1 window: less sensitive, re-record it (--fp4-save-baseline takes "
                     "--fp4-windows 3 independent windows)")
    return CompareResult(ordered, policy, changes, baseline.fingerprint, current_fingerprint, coverage, notes, own)


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
