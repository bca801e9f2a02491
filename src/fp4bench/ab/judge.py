"""The paired samples through the existing gate; the report and its JSON.

Side A is the baseline, side B the candidate: ``fp4bench.gate.verdict.compare`` judges every
benchmark measured on both sides (floor, noise, Holm, dispatch change from the kernel names)
and the availability maps give lost / new tactics. What the gate has no sample-based rule for is
added as named verdicts here: a wrong output or a lost worker on B is a FAIL, operand bytes
that differ between the sides make the timing INVALID (the two sides did not compute the same
thing).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any

from fp4bench.ab.run import AbRun, Paired, SideResult
from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import Baseline, BenchmarkRecord, availability_value
from fp4bench.gate.verdict import CompareResult, Policy, Status, Verdict, compare
from fp4bench.report import _render, delta_spread, describe_changes, verdict_table
from fp4bench.textfit import wrap_line

WRONG_OUTPUT = "wrong output"
LOST_WORKER = "worker lost"


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
        if p.a.samples and p.b.samples:
            extra_b = {**p.b.extra_info, **_telemetry_extra(p.b)}
            if p.a.digest != p.b.digest:
                extra_b["invalid"] = "operand bytes differ between A and B (different RNG/quantizer?)"
            records[p.name] = BenchmarkRecord(p.name, p.name, tuple(p.a.samples),
                                              {**p.a.extra_info, **_telemetry_extra(p.a)})
            current[p.name] = (p.b.samples, extra_b)
        else:
            v = _named(p)
            if v is not None:
                extra_verdicts.append(v)
    base = Baseline(fa, records, avail_a, {}, None, {}, "side A")
    result = compare(base, current, avail_b, policy, fb)
    result.verdicts += extra_verdicts
    return result


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


def telemetry_summary(run: AbRun) -> dict[str, dict[str, Any] | None]:
    """Per side, over every timing round of every benchmark: median SM clock and power, the
    hottest reading, how many rounds NVML saw throttling in. None: no telemetry (CPU)."""
    out: dict[str, dict[str, Any] | None] = {}
    for side in ("A", "B"):
        rounds = [r for p in run.pairs for r in (p.a if side == "A" else p.b).telemetry]
        if not rounds:
            out[side] = None
            continue

        def values(key: str) -> list[float]:
            return [float(r[key]) for r in rounds if r.get(key) is not None]

        clocks, power, temps = values("sm_clock_mhz"), values("power_w"), values("temp_c")
        out[side] = {"rounds": len(rounds), "sm_clock_mhz_median": statistics.median(clocks) if clocks else None,
                     "power_w_median": statistics.median(power) if power else None,
                     "temp_c_max": max(temps) if temps else None,
                     "throttled_rounds": sum(bool(r.get("throttled")) for r in rounds),
                     "errors": sorted({str(r["telemetry_error"]) for r in rounds if r.get("telemetry_error")})}
    return out


def telemetry_line(summary: dict[str, dict[str, Any] | None]) -> str:
    """The report's header line: each side's clocks, power, temperature and throttling."""
    if all(v is None for v in summary.values()):
        return "telemetry: none (NVML is read around GPU timing rounds only; this run timed on CPU)"

    def one(side: str, t: dict[str, Any] | None) -> str:
        if t is None:
            return f"{side} none"
        parts = [f"SM {t['sm_clock_mhz_median']:.0f} MHz" if t["sm_clock_mhz_median"] is not None else "SM ?",
                 f"{t['power_w_median']:.0f} W" if t["power_w_median"] is not None else "? W",
                 f"max {t['temp_c_max']:.0f} °C" if t["temp_c_max"] is not None else "max ? °C",
                 f"{t['throttled_rounds']}/{t['rounds']} rounds throttled"]
        return f"{side} " + ", ".join(parts) + (f" (NVML: {'; '.join(t['errors'])})" if t["errors"] else "")

    return "telemetry, medians over timing rounds: " + "; ".join(one(s, summary[s]) for s in ("A", "B"))


def _named(p: Paired) -> Verdict | None:
    """A benchmark that was not timed on both sides, as a verdict (None: skipped on both)."""
    a, b = p.a, p.b
    if b.status == "failed":
        kind = LOST_WORKER if any(w in b.reason for w in ("died", "hang:", "poisoned")) else WRONG_OUTPUT
        was = "also failed on A" if a.status == "failed" else f"A: {a.status}"
        return Verdict(p.name, Status.FAIL, kind=kind, reason=f"B: {b.reason} ({was})")
    if a.status == "failed" and b.status == "measured":
        return Verdict(p.name, Status.PASS, kind=WRONG_OUTPUT, improved=True, reason=f"fixed on B; A: {a.reason}")
    if a.status == "measured" and b.status == "skipped":
        return Verdict(p.name, Status.FAIL, kind="skipped on B", reason=f"B: {b.reason}")
    return None  # skipped / unsupported on both, or a tactic change (availability verdicts)


def version_changes(run: AbRun, result: CompareResult) -> list[tuple[str, str, str]]:
    """(benchmark, version on A, version on B) where the backend's version differs."""
    out = []
    for p in run.pairs:
        va, vb = p.a.extra_info.get("backend_version"), p.b.extra_info.get("backend_version")
        if va != vb and (va or vb):
            out.append((p.name, str(va or "-"), str(vb or "-")))
    return out


def report(run: AbRun, result: CompareResult) -> str:
    lines = [f"A: {run.fingerprints['A'].get('gpu_name')} {run.fingerprints['A'].get('gpu_uuid') or ''}".rstrip(),
             f"stack A → B: {describe_changes(result.changes)}",
             "prepare + check (JIT build/load included, never timed): "
             + ", ".join(f"{s} {run.check_seconds[s]:.1f} s" for s in ("A", "B"))]
    for side, found in sorted(run.test_only.items()):
        if found:
            lines.append(f"side {side} ran TEST-ONLY backends: " + "; ".join(found.values()))
    lines += wrap_line(telemetry_line(telemetry_summary(run))) + [""]
    changed = version_changes(run, result)
    if changed:
        lines.append("backend versions that differ, per benchmark:")
        lines += _render(["benchmark", "A", "B"], [list(c) for c in changed], [False, False, False])
        lines.append("")
    lines.append(verdict_table(result))
    if run.not_reached:
        lines.append(f"INCOMPLETE: interrupted, {len(run.not_reached)} benchmarks not reached (not judged): "
                     + ", ".join(run.not_reached[:5]) + (" ..." if len(run.not_reached) > 5 else ""))
    return "\n".join(lines)


def to_json(run: AbRun, result: CompareResult) -> dict[str, Any]:
    spread = delta_spread(result)
    pairs = {p.name: p for p in run.pairs}
    rows = []
    for v in result.sorted():
        p = pairs.get(v.name)
        rows.append({
            "name": v.name, "status": v.status.value, "kind": v.kind, "delta_pct": v.pct, "p_adj": v.p_adjusted,
            "a_median_s": v.base_median, "b_median_s": v.new_median, "n_a": v.n_base, "n_b": v.n_new,
            "reason": v.reason, "round_order": "".join(p.order) if p else None,
            "a_version": p.a.extra_info.get("backend_version") if p else None,
            "b_version": p.b.extra_info.get("backend_version") if p else None,
            # NVML per timing round, in round order (None: not measured, e.g. on CPU)
            "a_telemetry": (p.a.telemetry or None) if p else None,
            "b_telemetry": (p.b.telemetry or None) if p else None,
        })
    return {
        "fingerprints": run.fingerprints, "changes": [list(c) for c in result.changes],
        "policy": dataclasses.asdict(result.policy), "check_seconds": run.check_seconds, "test_only": run.test_only,
        "counts": result.counts(), "exit_code": result.exit_code, "telemetry": telemetry_summary(run),
        "delta_abs": None if spread is None else dict(zip(("n", "median", "p95", "max"), spread)),
        "benchmarks": rows, "not_reached": list(run.not_reached),
    }
