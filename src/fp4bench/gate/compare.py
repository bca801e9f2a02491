"""A whole run judged against a baseline: every verdict, what was covered, and the exit status.

``compare`` judges each benchmark measured now against its baseline record (``gate.judge``, with
no further window possible), names what the baseline has and the run did not measure (MISSING),
what only the run has (NEW), the tactic verdicts (``gate.tactics``) and the autotuner mis-picks
of the run (``gate.picks``); ``CompareResult`` holds
them with the policy, what changed in the fingerprint, the coverage (``gate.coverage``) and the
gate's exit status. Every front end (the pytest session, ``fp4bench compare``, ``fp4bench ab``,
``fp4bench power``) reads this one result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

import numpy as np

from fp4bench.env import Fingerprint
from fp4bench.gate.assess import assess
from fp4bench.gate.baseline import Baseline
from fp4bench.gate.compatibility import check_compatible, check_same_measurement, measurement_notes
from fp4bench.gate.coverage import (EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION, Coverage, Scope, account, group_of,
                                    narrow)
from fp4bench.gate.judge import decide, new_verdict
from fp4bench.gate.picks import mispick_verdicts
from fp4bench.gate.policy import Policy, is_failure
from fp4bench.gate.tactics import Current, availability_verdicts, lost_kernel_verdicts, moved_to
from fp4bench.gate.unit import for_changes, other_unit
from fp4bench.gate.verdict import KERNEL_CHANGE, TIMING, Status, Verdict

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
        return all(p.less_sensitive for p in self.policies.values())

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
    def remeasure(self) -> list[Verdict]:
        """Benchmarks whose windows show them slower beyond the guard band without the evidence a
        FAIL needs (``Verdict.remeasure``)."""
        return [v for v in self.verdicts if v.remeasure]

    @property
    def exit_code(self) -> int:
        """``EXIT_REGRESSION`` (1) for a FAIL, lost tactic or a failing undecided verdict among what
        was measured; else ``EXIT_INCOMPLETE`` (3) when nothing, or less than expected, was judged,
        or a benchmark's windows show it slower beyond the guard band without the evidence a FAIL
        needs (re-measure: never "no regression"); else ``EXIT_OK`` (0). A regression wins: it is a
        finding about what did run."""
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INCOMPLETE if self.incomplete or self.remeasure else EXIT_OK

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


def delta_spread(result: CompareResult) -> tuple[int, float, float, float] | None:
    """(n, median, p95, max) of |new/base - 1| over timed benchmarks measured in both runs.

    On an unchanged stack this is the run-to-run noise a user should expect (the A/A numbers
    of docs/results-h200.md); p95 uses numpy's linear interpolation."""
    d = [abs(v.ratio - 1) for v in result.verdicts
         if v.kind == TIMING and v.ratio is not None and math.isfinite(v.ratio)]
    if not d:
        return None
    return len(d), float(np.median(d)), float(np.percentile(d, 95)), max(d)


def compare(
    baseline: Baseline,
    current: Current,
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
                windows_base=len(rec.windows),
                reason="in the baseline but not measured now (renamed, removed or skipped?)",
            )
            continue
        samples, extra = current[name]
        p = own.get(name, policy)
        verdicts[name] = decide(name, assess(name, rec, samples, rec.extra_info, p), rec.extra_info,
                                dict(extra or {}), p)
    for name, (samples, extra) in current.items():
        if name not in baseline.benchmarks:
            verdicts[name] = new_verdict(name, samples, dict(extra or {}))

    for name, v in verdicts.items():
        if v.kind == KERNEL_CHANGE:
            verdicts[name] = moved_to(v, baseline.benchmarks[name].extra_info, current)
    ordered = [verdicts[n] for n in baseline.benchmarks] + [
        verdicts[n] for n in current if n not in baseline.benchmarks
    ] + lost_kernel_verdicts(baseline, current) + mispick_verdicts(current, policy.floor)
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
