"""One benchmark judged against its baseline record: its verdict (``gate.verdict``).

``decide`` turns the statistics of both sides (``gate.assess``) and their ``extra_info``
(``gate.record``'s readers) into the verdict: INVALID when either side's timing is void, too few
samples, else the rule's decision on the window medians (``gate.rule``); a kernel-set change is
noted on it, or is the verdict itself for an explicit tactic (``gate.tactics``); so is a library
choice that changed (``gate.picks``).

Each benchmark is decided on its own windows, so the decision made as a pytest test finishes
(``judge``) and the one of the session's final table (``gate.compare.compare``) are the same
decision. A baseline from another GPU unit adds the unit-to-unit offset to the error term
(``unit.for_changes``): such a baseline is less sensitive, and the report says so.
"""

from __future__ import annotations

import math
from typing import Any, Mapping


from fp4bench.gate import rule
from fp4bench.gate.assess import Assessment, assess
from fp4bench.gate.calibration import class_of
from fp4bench.gate.picks import choice_change
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import (BenchmarkRecord, clock, headline_median, invalid_reason, kernel_change, throttle,
                                  windows_of)
from fp4bench.gate.tactics import tactic_kernel_change
from fp4bench.gate.verdict import DISPATCH, TIMING, Status, Verdict


def decide(
    name: str,
    a: Assessment,
    base_extra: Mapping[str, Any],
    new_extra: Mapping[str, Any],
    policy: Policy,
    budget_left: bool = False,
) -> Verdict:
    """The verdict of one benchmark measured on both sides."""
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
        base_clock=clock(base_extra),
        new_clock=clock(new_extra),
        base_throttle=throttle(base_extra),
        new_throttle=throttle(new_extra),
        n_base=a.n_base,
        n_new=a.n_new,
    )
    by_throttle = policy.throttle == "invalid"
    invalid = (invalid_reason(base_extra, "baseline", by_throttle)
               or invalid_reason(new_extra, "current", by_throttle))
    change = a.ratio - 1.0
    improved = False
    undecided = True
    more = False
    remeasure = False
    if invalid:
        status, reason = Status.INVALID, f"{invalid}; timing not judged"
    elif not math.isfinite(change):
        status, reason = Status.INVALID, "baseline median is 0 or samples are empty; ratio undefined"
    elif min(a.n_base, a.n_new) < policy.min_samples:
        status = Status.AMBIGUOUS
        reason = f"too few samples (baseline {a.n_base}, current {a.n_new}; need >= {policy.min_samples})"
    else:
        undecided = False
        status, reason, improved, more, remeasure = _timing_status(a, policy, budget_left, class_of(base_extra))

    chosen = choice_change(base_extra, new_extra, a.base_median, a.new_median)
    if chosen is not None:  # judged on its time all the same: a slower choice row FAILs
        reason = f"{reason}; {chosen}" if reason else chosen
    kinds = kernel_change(base_extra, new_extra)
    if kinds is not None and new_extra.get("explicit_tactic"):
        return tactic_kernel_change(common, base_extra, new_extra, kinds, policy)
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
        dispatch_changed=kinds is not None or chosen is not None,
        kernels_added=added,
        kernels_removed=removed,
        undecided=undecided,
        wants_more=more,
        remeasure=remeasure,
        **common,
    )


def _timing_status(a: Assessment, policy: Policy, budget_left: bool, cls: str
                   ) -> tuple[Status, str, bool, bool, bool]:
    """(status, reason, improved, wants more, re-measure) from the rule's decision on the windows."""
    settings = policy.rule_settings(cls)
    est = a.est
    d = rule.decide(est, settings, budget_left=budget_left)
    lo, hi = est.interval_pct
    band = math.expm1(settings.threshold) * 100
    where = f"Δ {est.pct:+.1f}% in [{lo:+.1f}%, {hi:+.1f}%] over {est.n_base}+{est.n_new} windows"
    if d is rule.Decision.FAIL:
        if est.lo >= settings.threshold and est.n_new >= settings.min_new_for_fail:
            return Status.FAIL, f"{where}: slower beyond the {band:.1f}% guard band below the floor", False, False, \
                False
        return Status.FAIL, f"{where}: at least twice the floor, every new window slower than every base one", \
            False, False, False
    if d is rule.Decision.PASS:
        better = rule.improved(est, settings)
        return Status.PASS, ("improved" if better else ""), better, False, False
    if d is rule.Decision.MORE:
        return Status.AMBIGUOUS, f"{where}: undecided, another window wanted", False, True, False
    if est.lo >= settings.threshold:
        return Status.AMBIGUOUS, (f"{where}: slower beyond the {band:.1f}% guard band on {est.n_new} new window"
                                  f"{'s' if est.n_new != 1 else ''}; a FAIL needs {settings.min_new_for_fail} "
                                  f"independent new windows: re-measure ({REMEASURE_HINT})"), False, False, True
    why = f"{where}: neither shown to reach nor to stay below the {band:.1f}% guard band"
    if not (policy.less_sensitive and settings.unit_sigma > 0):
        return Status.AMBIGUOUS, why, False, False, False
    least = rule.smallest_fail(settings, settings.prior_sigma, est.n_base, max(est.n_new, settings.min_new_for_fail))
    cross = (f"against another unit's baseline the smallest change this can show is {least * 100:+.1f}% "
             f"(floor {policy.floor * 100:g}%): record a baseline on this unit or use fp4bench ab"
             if least > policy.floor else "")
    if rule.lower_same_unit(est, settings) >= settings.threshold:
        # the windows show it beyond the band; only another unit's offset keeps it from a FAIL
        return Status.AMBIGUOUS, f"{why}; the windows alone show it beyond the band: re-measure ({cross or OTHER_UNIT_HINT})", \
            False, False, True
    return Status.AMBIGUOUS, f"{why}; {cross}" if cross else why, False, False, False


#: what a benchmark held back from a FAIL by another unit's offset needs
OTHER_UNIT_HINT = "another unit's offset keeps it from a FAIL: record a baseline on this unit or use fp4bench ab"
#: how to get the evidence a FAIL needs
REMEASURE_HINT = ("pytest bench --benchmark-compare takes further windows of a suspect; a saved run needs "
                  "--fp4-windows 2 or more")


def judge(
    name: str,
    base: BenchmarkRecord | None,
    samples: Any,
    extra_info: Mapping[str, Any] | None = None,
    policy: Policy = Policy(),
    *,
    budget_left: bool = False,
) -> Verdict:
    """Decide one benchmark on its own windows (``samples``: the current run's windows, or one
    flat sample list). With ``budget_left`` an undecided benchmark is AMBIGUOUS with
    ``wants_more``: take another window and judge again."""
    extra = dict(extra_info or {})
    if base is None:
        return new_verdict(name, samples, extra)
    return decide(name, assess(name, base, samples, base.extra_info, policy), base.extra_info, extra, policy,
                  budget_left)


def new_verdict(name: str, samples: Any, extra: Mapping[str, Any]) -> Verdict:
    """The NEW verdict of a benchmark the baseline does not have."""
    flat = [x for w in windows_of(samples) for x in w]
    return Verdict(
        name=name,
        status=Status.NEW,
        new_median=headline_median(samples) if flat else None,
        n_new=len(flat),
        windows_new=len(windows_of(samples)) if flat else 0,
        new_clock=clock(extra),
        new_throttle=throttle(extra),
        reason="not in the baseline",
    )
