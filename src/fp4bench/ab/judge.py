"""The replicates through the shared rule (``gate.rule``): every benchmark's verdict and the run's
exit status (how they read: ``ab.report``).

Side A is the baseline, side B the candidate. The timing verdict of a benchmark measured on both
sides is the rule's decision on the per-process offsets (``ab.estimate``): FAIL when B is shown
slower beyond the guard band, PASS when shown below it, AMBIGUOUS (with its interval) when the
budget ran out first. ``fp4bench.gate.compare.compare`` still supplies what is not a timing
statistic: lost / new tactics (the availability maps), kernel-set changes from the CUPTI kernel
names, INVALID timings (operand bytes that differ, clock anomalies). Named failures are added
here: a wrong output on B is a FAIL; a benchmark that ran out of device memory on either side is
a resource failure of that case, not judged (kind ``out of memory``, with both sides' memory
figures: never a wrong output, a FAIL or a PASS); a benchmark left with fewer than ``MIN_REPLICATES``
processes per side (a worker died and was not replaced) is not judged, and such a run is
incomplete (exit 3); so is a benchmark whose GPU's run crashed before measuring it (a run spread
over several GPUs, ``ab.merge``). Such a run's report and JSON also say, per GPU, which benchmarks
it measured and its telemetry, and each benchmark's GPU UUID.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from fp4bench.ab.estimate import MIN_REPLICATES
from fp4bench.ab.merge import CRASHED
from fp4bench.ab.records import AbRun, Paired, SideResult
from fp4bench.ab.schedule import memory_figure
from fp4bench.env import Fingerprint
from fp4bench.gate import rule
from fp4bench.gate.baseline import Baseline, availability_value
from fp4bench.gate.compare import CompareResult, compare
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import BenchmarkRecord
from fp4bench.gate.verdict import DISPATCH, KERNEL_CHANGE, TIMING, Status, Verdict
from fp4bench.run.case import OUT_OF_MEMORY  # a kind of its own: the case did not fit in device memory

WRONG_OUTPUT = "wrong output"
LOST_WORKER = "worker lost"
FAILED_ON_BOTH = "failed on both"
TOO_FEW = "too few replicates"
GPU_CRASHED = "GPU run crashed"
#: the kinds of a benchmark left unjudged: the run is incomplete (exit 3), never a pass
NOT_JUDGED = (LOST_WORKER, FAILED_ON_BOTH, TOO_FEW, GPU_CRASHED, OUT_OF_MEMORY)
#: the kinds whose status comes from the replicate rule
TIMED = (TIMING, KERNEL_CHANGE, DISPATCH)


def _availability(side: SideResult, name: str) -> dict[str, str]:
    if side.status == "measured":
        return {name: availability_value(True)}
    if side.status == "unsupported":
        return {name: availability_value(False, side.reason)}
    return {}


def judge(run: AbRun, policy: Policy) -> CompareResult:
    fa, fb = (Fingerprint.from_dict(run.fingerprints[s]) for s in ("A", "B"))
    records, current, extra_verdicts = {}, {}, []
    avail_a: dict[str, str] = {}
    avail_b: dict[str, str] = {}
    for p in run.pairs:
        avail_a.update(_availability(p.a, p.name))
        avail_b.update(_availability(p.b, p.name))
        if p.a.status == p.b.status == "measured" and p.a.samples and p.b.samples:
            extra_b = {**p.b.extra_info, **_telemetry_extra(p.b)}
            if p.digest_mismatch:
                extra_b["invalid"] = (f"operand bytes differ between processes ({p.digest_mismatch}): "
                                      "different RNG/quantizer?")
            records[p.name] = BenchmarkRecord(p.name, p.name, tuple(p.a.samples),
                                              {**p.a.extra_info, **_telemetry_extra(p.a)})
            current[p.name] = (p.b.samples, extra_b)
        else:
            v = _named(p)
            if v is not None:
                extra_verdicts.append(v)
    base = Baseline(fa, records, avail_a, {}, None, {}, "side A")
    result = compare(base, current, avail_b, policy, fb)
    pairs = {p.name: p for p in run.pairs}
    result.verdicts = [_ruled(v, pairs.get(v.name), run.settings) for v in result.verdicts] + extra_verdicts
    return result


def _ruled(v: Verdict, p: Paired | None, settings: rule.RuleSettings) -> Verdict:
    """A timing verdict with its status from the replicate rule (INVALID stays INVALID)."""
    if p is None or v.kind not in TIMED or v.status is Status.INVALID:
        return v
    crashed = f"; crashed: {', '.join(c.proc for c in p.crashes)} (dropped)" if p.crashes else ""
    common = dict(noise=None, floor=settings.floor)
    chosen = [x for x in v.reason.split("; ") if x.startswith("choice changed")]  # gate.picks
    if p.estimate is None:
        return dataclasses.replace(v, status=Status.AMBIGUOUS, kind=LOST_WORKER if p.crashes else TOO_FEW,
                                   undecided=True, **common,
                                   reason=f"not judged: fewer than {MIN_REPLICATES} usable processes per side"
                                          + "".join(f"; {x}" for x in chosen) + crashed)
    e = p.estimate
    lo, hi = e.est.interval_pct
    band = math.expm1(settings.threshold) * 100
    d = e.decision
    status = {rule.Decision.FAIL: Status.FAIL, rule.Decision.PASS: Status.PASS}.get(d, Status.AMBIGUOUS)
    if v.kind == DISPATCH and v.status is Status.FAIL:
        status = Status.FAIL  # --dispatch fail: a kernel-set change fails whatever the timing
    if status is Status.FAIL:
        why = f"B slower: the interval is above the {band:.2g}% guard band"
    elif status is Status.PASS:
        why = "" if not rule.improved(e.est, settings) else "improved"
    else:
        why = f"undecided ({p.stopped}): the interval straddles the {band:.2g}% guard band"
    kernels = [x for x in v.reason.split("; ") if "kernel" in x]  # compare()'s kernel-set notes
    why = "; ".join(x for x in [why, *chosen, *kernels] if x)
    base = _side_level(p, e.offsets)
    return dataclasses.replace(v, status=status, ratio=math.exp(e.est.delta), improved=status is Status.PASS
                               and rule.improved(e.est, settings), undecided=False, n_base=e.est.n_base,
                               n_new=e.est.n_new, reason=why + crashed,
                               base_median=base, new_median=None if base is None else base * math.exp(e.est.delta),
                               **common)


def _side_level(p: Paired, used: dict[str, float]) -> float | None:
    """Side A's time as the estimate sees it: the geometric mean over A's judged processes of
    each one's geometric-mean round time. The report's B column is this times exp(Δ), so the
    two columns show the very estimate Δ is (the medians of pooled samples are not it: they
    weigh the processes by their sample counts and do not pair the rounds)."""
    logs = [sum(math.log(t) for t in x.rounds.values()) / len(x.rounds)
            for x in p.parts if x.side == "A" and x.proc in used and x.rounds]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _telemetry_extra(side: SideResult) -> dict[str, Any]:
    """A side's NVML rounds as the gate's ``extra_info`` keys: the SM clock of each round (the
    verdict shows their median next to the other side's) and the throttle reasons seen."""
    if not side.telemetry:
        return {}
    clocks = [r["sm_clock_mhz"] for r in side.telemetry if r.get("sm_clock_mhz") is not None]
    reasons = sorted({x for r in side.telemetry for x in (r.get("throttle_reasons") or [])})
    out: dict[str, Any] = {"throttle_reasons": reasons,
                           "throttled": any(bool(r.get("throttled")) for r in side.telemetry)}
    if clocks:
        out["sm_clock_mhz"] = clocks
    return out


def _named(p: Paired) -> Verdict | None:
    """A benchmark that was not timed on both sides, as a verdict (None: skipped on both)."""
    a, b = p.a, p.b
    if OUT_OF_MEMORY in (a.status, b.status):  # before "failed": a resource failure, not an output
        short = [(s, x) for s, x in (("A", a), ("B", b)) if x.status == OUT_OF_MEMORY]
        why = "; ".join(f"{s}: {x.reason.splitlines()[0][:300]}" for s, x in short)
        figures = "; ".join(f"{s} {memory_figure(x.memory)}" for s, x in (("A", a), ("B", b)))
        return Verdict(p.name, Status.AMBIGUOUS, kind=OUT_OF_MEMORY, undecided=True,
                       reason=f"not judged, out of memory on {' and '.join(s for s, _ in short)} (a resource "
                              f"failure of this case); {why}; memory: {figures}")
    if a.status == b.status == CRASHED:
        return Verdict(p.name, Status.AMBIGUOUS, kind=GPU_CRASHED, undecided=True, reason=a.reason)
    if a.status == b.status == "failed":  # nothing says B is worse than A: not judged, not a pass
        return Verdict(p.name, Status.AMBIGUOUS, kind=FAILED_ON_BOTH, undecided=True,
                       reason=f"not judged, failed on both sides; A: {a.reason}; B: {b.reason}")
    if b.status == "failed":
        return Verdict(p.name, Status.FAIL, kind=WRONG_OUTPUT, reason=f"B: {b.reason} (A: {a.status})")
    if "lost" in (a.status, b.status):
        lost = [f"{s.upper()}: {x.reason}" for s, x in (("a", a), ("b", b)) if x.status == "lost"]
        return Verdict(p.name, Status.AMBIGUOUS, kind=LOST_WORKER, undecided=True,
                       reason="not judged, every process of a side was lost: " + "; ".join(lost))
    if a.status == "failed" and b.status == "measured":
        return Verdict(p.name, Status.PASS, kind=WRONG_OUTPUT, improved=True, reason=f"fixed on B; A: {a.reason}")
    if a.status == "measured" and b.status == "skipped":
        return Verdict(p.name, Status.FAIL, kind="skipped on B", reason=f"B: {b.reason}")
    return None  # skipped / unsupported on both, or a tactic change (availability verdicts)


def skipped_on_both(run: AbRun) -> list[tuple[str, str]]:
    """(benchmark, A's reason) of the cases neither side ran."""
    return [(p.name, p.a.reason) for p in run.pairs
            if p.a.status in ("skipped", "unsupported") and p.b.status in ("skipped", "unsupported")]


def judged(result: CompareResult) -> int:
    """Benchmarks whose timing was decided (PASS, FAIL or AMBIGUOUS at the end of the budget)."""
    return sum(1 for v in result.verdicts if v.kind in TIMED and not v.undecided
               and v.status in (Status.PASS, Status.FAIL, Status.AMBIGUOUS))


def outcome(run: AbRun, result: CompareResult) -> tuple[int, str]:
    """The exit status and its one-line summary: 1 on any failure; else 3 (incomplete) when
    nothing was judged, a benchmark was left unjudged (a lost worker) or the run was interrupted
    (unless ``allow_missing``); else 0."""
    counts = ", ".join(f"{n} {s}" for s, n in result.counts().items() if n)
    unjudged = [v for v in result.verdicts if v.kind in NOT_JUDGED]
    why_not = ", ".join(f"{sum(v.kind == k for v in unjudged)} {k}" for k in NOT_JUDGED
                        if any(v.kind == k for v in unjudged))
    if any(result.is_failure(v) for v in result.verdicts if v.kind not in NOT_JUDGED):
        return 1, f"{counts} → regression (exit 1)"
    if not judged(result):
        why = "nothing judged: no benchmark was timed on both sides" + (
            f" ({len(unjudged)} not judged: {why_not})" if unjudged else "")
        return 3, f"{counts + '; ' if counts else ''}{why} → incomplete (exit 3)"
    if unjudged or (run.not_reached and not result.policy.allow_missing):
        why = "; ".join(x for x in (f"{len(unjudged)} not judged ({why_not})" if unjudged else "",
                                    f"{len(run.not_reached)} not reached" if run.not_reached else "") if x)
        return 3, f"{counts}; {why} → incomplete (exit 3)"
    return 0, f"{counts} → no regression (exit 0)"


