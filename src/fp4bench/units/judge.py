"""Verdicts of a unit-health check: each unit against the host, the unit table, report, JSON.

Per benchmark and unit (``units.estimate``): **FAIL** ("slow unit") when the unit is shown slower
than the host median beyond the guard band of the floor, **PASS** when shown to stay below it
("faster" when shown faster beyond it), **AMBIGUOUS** with its interval when the windows ran out
first (it fails only with ``fail_on_ambiguous``). A unit whose check of a benchmark finds a wrong
output that its siblings compute correctly FAILs too ("wrong output": a GPU that computes wrong
results is sick). Not judged, and the check incomplete (exit 3): a unit left with fewer than
``MIN_WINDOWS`` windows (its worker died), a benchmark that failed on every unit, one no sibling
measured, or one an interrupted check did not reach.

A unit is **flagged** when any of its benchmarks FAILs; exit 1 then. The unit table shows what
makes a unit slow before any statistics: its NVML power limit (and whether it differs from the
other units'), its SM clock (median over its windows, and the maximum the GPU reports), its power
draw, its hottest reading and the throttle reasons NVML saw during its windows.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import Any

from fp4bench.gate import rule
from fp4bench.gate.coverage import EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION
from fp4bench.report.tables import format_seconds
from fp4bench.run.case import OUT_OF_MEMORY  # a kind of its own: the case did not fit in the unit's memory
from fp4bench.report.textfit import common_prefix, fit_table, wrap_line
from fp4bench.units.estimate import MIN_WINDOWS, against_siblings, host_median
from fp4bench.units.run import Unit, UnitBench, UnitsRun

PASS, FAIL, AMBIGUOUS = "PASS", "FAIL", "AMBIGUOUS"
SLOW = "slow unit"
WRONG_OUTPUT = "wrong output"
TOO_FEW = "too few windows"
FAILED_EVERYWHERE = "failed on every unit"
NO_SIBLING = "no sibling measured"
#: the kinds of a (benchmark, unit) left unjudged: the check is incomplete, never a pass
NOT_JUDGED = (TOO_FEW, FAILED_EVERYWHERE, NO_SIBLING, OUT_OF_MEMORY)


@dataclass
class UnitVerdict:
    benchmark: str
    uuid: str
    status: str  # PASS | FAIL | AMBIGUOUS
    kind: str = "timing"
    estimate: rule.Estimate | None = None
    median_s: float | None = None  # median of the unit's window medians
    host_s: float | None = None  # the host median it is judged against (``units.estimate.host_median``)
    windows: int = 0
    reason: str = ""

    @property
    def judged(self) -> bool:
        return self.kind not in NOT_JUDGED


def _median(values: list[float]) -> float | None:
    return float(statistics.median(values)) if values else None


def judge_benchmark(bench: UnitBench, settings: rule.RuleSettings) -> list[UnitVerdict]:
    """Every unit's verdict on one benchmark (none when it was skipped)."""
    if bench.skip_reason:
        return []
    parts = bench.units
    measured = {u: p.medians for u, p in parts.items() if p.status == "measured" and len(p.windows) >= MIN_WINDOWS}
    correct = [u for u, p in parts.items() if p.status == "measured"]
    out = []
    for uuid, part in parts.items():
        v = UnitVerdict(bench.name, uuid, AMBIGUOUS, windows=len(part.windows),
                        median_s=_median(part.medians))
        siblings = {s: m for s, m in measured.items() if s != uuid}
        if siblings:
            v.host_s = math.exp(host_median(measured.get(uuid, []), siblings))
        if part.status == OUT_OF_MEMORY:
            v.kind, v.reason = OUT_OF_MEMORY, f"not judged: {part.reason.splitlines()[0][:200]}"
        elif part.status == "failed":
            others = [u for u in correct if u != uuid]
            if others:
                v.status, v.kind = FAIL, WRONG_OUTPUT
                v.reason = f"{part.reason.splitlines()[0][:200] if part.reason else 'failed'} (correct on {len(others)} other units)"
            else:
                v.kind, v.reason = FAILED_EVERYWHERE, f"not judged: {part.reason.splitlines()[0][:200] if part.reason else 'failed'}"
        elif part.status in ("skipped", "unsupported"):
            v.kind, v.reason = TOO_FEW, f"not judged: {part.status} on this unit only ({part.reason[:200]})"
        elif part.status == "lost":
            v.kind, v.reason = TOO_FEW, f"not judged: {len(part.windows)} windows; {part.reason[:200]}"
        elif uuid not in measured:
            lost = f"; {part.lost_windows} lost to a worker that died" if part.lost_windows else ""
            v.kind, v.reason = TOO_FEW, f"not judged: {len(part.windows)} windows{lost}"
        elif not siblings:
            v.kind, v.reason = NO_SIBLING, "not judged: no other unit measured it"
        else:
            est, d = against_siblings(measured[uuid], siblings, settings, budget_left=False)
            v.estimate = est
            v.status = {rule.Decision.FAIL: FAIL, rule.Decision.PASS: PASS}.get(d, AMBIGUOUS)
            band = math.expm1(settings.threshold) * 100
            if v.status == FAIL:
                v.kind, v.reason = SLOW, f"slower than the host median: the interval is above the {band:.2g}% guard band"
            elif v.status == PASS:
                v.reason = "faster than the host median" if rule.improved(est, settings) else ""
            else:
                v.reason = f"undecided: the interval straddles the {band:.2g}% guard band"
            if part.lost_windows:
                v.reason += f"{'; ' if v.reason else ''}{part.lost_windows} windows lost to a worker that died"
        out.append(v)
    return out


@dataclass
class UnitsResult:
    verdicts: list[UnitVerdict]
    settings: rule.RuleSettings
    fail_on_ambiguous: bool = False

    def counts(self) -> dict[str, int]:
        return {s: n for s in (PASS, FAIL, AMBIGUOUS) if (n := sum(v.status == s for v in self.verdicts))}

    def failures(self, uuid: str | None = None) -> list[UnitVerdict]:
        bad = (FAIL, AMBIGUOUS) if self.fail_on_ambiguous else (FAIL,)
        return [v for v in self.verdicts if v.status in bad and v.judged and (uuid is None or v.uuid == uuid)]


def judge(run: UnitsRun, *, fail_on_ambiguous: bool = False) -> UnitsResult:
    skip = set(run.not_reached)
    verdicts = [v for b in run.benchmarks if b.name not in skip for v in judge_benchmark(b, run.settings)]
    return UnitsResult(verdicts, run.settings, fail_on_ambiguous)


def outcome(run: UnitsRun, result: UnitsResult) -> tuple[int, str]:
    """Exit status and summary: 1 when a unit is flagged; else 3 when anything was left unjudged
    (or nothing judged, or the check was interrupted); else 0."""
    counts = ", ".join(f"{n} {s}" for s, n in result.counts().items())
    flagged = [u for u in run.units if result.failures(u.gpu.uuid)]
    unjudged = [v for v in result.verdicts if not v.judged]
    if flagged:
        names = ", ".join(f"GPU {u.gpu.index} ({u.gpu.uuid})" for u in flagged)
        return EXIT_REGRESSION, f"{counts} → {len(flagged)} unit{'s' if len(flagged) > 1 else ''} flagged: {names} (exit 1)"
    if not any(v.judged for v in result.verdicts):
        return EXIT_INCOMPLETE, f"{counts + '; ' if counts else ''}nothing judged → incomplete (exit 3)"
    if unjudged or run.not_reached:
        why = "; ".join(x for x in (f"{len(unjudged)} not judged" if unjudged else "",
                                    f"{len(run.not_reached)} not reached" if run.not_reached else "") if x)
        return EXIT_INCOMPLETE, f"{counts}; {why} → incomplete (exit 3)"
    return EXIT_OK, f"{counts} → no unit flagged (exit 0)"


def unit_telemetry(run: UnitsRun, uuid: str) -> dict[str, Any]:
    """One unit's NVML over every window it took: median SM clock and power, hottest reading,
    throttled windows, the throttle reasons seen, NVML errors; with its power limit and maximum SM
    clock from its fingerprint. Values are None where nothing was read (CPU)."""
    rows = [t for b in run.benchmarks for t in (b.units[uuid].telemetry if uuid in b.units else [])]
    windows = sum(len(b.units[uuid].windows) for b in run.benchmarks if uuid in b.units)

    def values(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) is not None]

    fp = next(u.fingerprint for u in run.units if u.gpu.uuid == uuid)
    clocks, power, temps = values("sm_clock_mhz"), values("power_w"), values("temp_c")
    return {"windows": windows, "telemetry_windows": len(rows), "power_limit_w": fp.get("power_limit_w"),
            "sm_clock_max_mhz": fp.get("sm_clock_max_mhz"), "sm_clock_mhz_median": _median(clocks),
            "power_w_median": _median(power), "temp_c_max": max(temps) if temps else None,
            "throttled_windows": sum(bool(r.get("throttled")) for r in rows),
            "throttle_reasons": sorted({x for r in rows for x in (r.get("throttle_reasons") or [])}),
            "errors": sorted({str(r["telemetry_error"]) for r in rows if r.get("telemetry_error")})}


def _unit_state(run: UnitsRun, result: UnitsResult, unit: Unit) -> str:
    fails = result.failures(unit.gpu.uuid)
    mine = [v for v in result.verdicts if v.uuid == unit.gpu.uuid]
    if fails:
        slow = [v.estimate.pct for v in fails if v.estimate is not None]
        worst = f", median Δ of those {statistics.median(slow):+.1f}%" if slow else ""
        return f"FLAGGED: {len(fails)} of {len(mine)} benchmarks FAIL{worst}"
    if unit.dead:
        return f"incomplete: {unit.dead}"
    if any(not v.judged for v in mine):
        return f"incomplete: {sum(not v.judged for v in mine)} not judged"
    return "ok"


def _fmt(value: Any, unit: str, digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}"


def _usual(values: list[float]) -> set[float]:
    """The value most units share ({} when there is no single one: every differing unit is named)."""
    counts = Counter(values)
    top = max(counts.values(), default=0)
    modes = [v for v, n in counts.items() if n == top]
    return set(modes) if len(modes) == 1 or len(counts) == 1 else set()


def unit_rows(run: UnitsRun, result: UnitsResult) -> list[dict[str, Any]]:
    """Per unit: its GPU, telemetry, whether its power limit differs from most units', crashes, state."""
    tel = {u.gpu.uuid: unit_telemetry(run, u.gpu.uuid) for u in run.units}
    usual = _usual([t["power_limit_w"] for t in tel.values() if t["power_limit_w"] is not None])
    out = []
    for u in run.units:
        t = tel[u.gpu.uuid]
        odd = t["power_limit_w"] is not None and t["power_limit_w"] not in usual
        out.append({"index": u.gpu.index, "uuid": u.gpu.uuid, "name": u.gpu.name, **t,
                    "power_limit_differs": bool(odd), "crashes": list(u.crashes), "test_only": dict(u.test_only),
                    "fails": len(result.failures(u.gpu.uuid)), "state": _unit_state(run, result, u)})
    return out


def _interval(v: UnitVerdict) -> str:
    if v.estimate is None:
        return "-"
    lo, hi = v.estimate.interval_pct
    return f"{v.estimate.pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]"


_ORDER = {FAIL: 0, AMBIGUOUS: 1, PASS: 2}


def report(run: UnitsRun, result: UnitsResult) -> str:
    st = run.settings
    first = run.units[0].fingerprint
    lines = wrap_line(f"units: {len(run.units)} × {first.get('gpu_name')} (driver {first.get('driver') or '-'}, "
                      f"torch {first.get('torch')}); every unit measured at once, benchmark by benchmark; "
                      f"{run.passes} passes of one window per benchmark and unit ({run.window_samples} samples each), "
                      f"wall {run.wall_s:.0f} s")
    lines += wrap_line(f"rule: floor {st.floor * 100:g}%, guard band {math.expm1(st.threshold) * 100:.2g}% "
                       f"(margin {st.margin:g}), {st.confidence * 100:g}% one-sided bounds; each unit's windows "
                       "against the host median (the median unit; on two GPUs the other one; Δ > 0: slower)")
    for u in run.units:
        if u.test_only:
            lines.append(f"GPU {u.gpu.index} ran TEST-ONLY backends: " + "; ".join(u.test_only.values()))
        for c in u.crashes[:5]:
            lines += wrap_line(f"CRASH on GPU {u.gpu.index} ({u.gpu.uuid}): {c.splitlines()[0][:200]}")
    lines.append("")
    rows = unit_rows(run, result)
    if all(r["telemetry_windows"] == 0 for r in rows):
        lines.append("telemetry: none (NVML is read during GPU windows only; this check timed on CPU)")
    lines += fit_table(
        ["GPU", "uuid", "power limit", "SM clock (max)", "power", "max temp", "throttled", "reasons", "unit"],
        [[str(r["index"]), r["uuid"],
          _fmt(r["power_limit_w"], "W") + (" (differs)" if r["power_limit_differs"] else ""),
          f"{_fmt(r['sm_clock_mhz_median'], 'MHz')} ({_fmt(r['sm_clock_max_mhz'], 'MHz')})",
          _fmt(r["power_w_median"], "W"), _fmt(r["temp_c_max"], "°C"),
          f"{r['throttled_windows']}/{r['telemetry_windows']}", ",".join(r["throttle_reasons"]) or "-", r["state"]]
         for r in rows], [True, False, True, True, True, True, True, False, False], trail=8)
    lines.append("")
    index = {u.gpu.uuid: str(u.gpu.index) for u in run.units}
    prefix = common_prefix([v.benchmark for v in result.verdicts])
    if prefix:
        lines.append(f"benchmark names: {prefix}<name>")
    table = []
    for v in sorted(result.verdicts, key=lambda v: (_ORDER[v.status], v.judged, v.benchmark, index[v.uuid])):
        label = v.status + (f" ({v.kind})" if v.kind != "timing" else "")
        table.append([label, v.benchmark.removeprefix(prefix), index[v.uuid], format_seconds(v.median_s),
                      format_seconds(v.host_s), _interval(v), str(v.windows), v.reason])
    lines += fit_table(["verdict", "benchmark", "GPU", "unit", "host", f"Δ [{st.confidence * 100:g}% bounds]",
                        "windows", "notes"], table, [False, False, True, True, True, True, True, False], wrap=1, trail=7)
    skipped = [b for b in run.benchmarks if b.skip_reason]
    if skipped:
        lines.append("")
        lines += wrap_line(f"skipped ({len(skipped)}): " + ", ".join(
            f"{b.name.removeprefix(prefix)} ({b.skip_reason.splitlines()[0][:80]})" for b in skipped[:3])
            + (" ..." if len(skipped) > 3 else ""))
    if run.not_reached:
        lines.append(f"INCOMPLETE: interrupted, {len(run.not_reached)} benchmarks not reached (not judged): "
                     + ", ".join(run.not_reached[:5]) + (" ..." if len(run.not_reached) > 5 else ""))
    lines += ["", f"summary: {outcome(run, result)[1]}"]
    return "\n".join(lines)


def to_json(run: UnitsRun, result: UnitsResult) -> dict[str, Any]:
    code, summary = outcome(run, result)
    by_bench: dict[str, list[UnitVerdict]] = {}
    for v in result.verdicts:
        by_bench.setdefault(v.benchmark, []).append(v)
    benches = []
    for b in run.benchmarks:
        verdicts = {v.uuid: v for v in by_bench.get(b.name, [])}
        units = []
        for uuid, part in b.units.items():
            v = verdicts.get(uuid)
            e = v.estimate if v is not None else None
            units.append({"uuid": uuid, "status": v.status if v else None, "kind": v.kind if v else None,
                          "delta_pct": e.pct if e else None, "interval_pct": list(e.interval_pct) if e else None,
                          "median_s": v.median_s if v else None, "host_s": v.host_s if v else None,
                          "reason": v.reason if v else part.reason, "part_status": part.status,
                          "window_medians_s": part.medians, "windows": part.windows,
                          "lost_windows": part.lost_windows, "telemetry": part.telemetry or None})
        benches.append({"name": b.name, "skip_reason": b.skip_reason or None,
                        "not_reached": b.name in run.not_reached, "units": units})
    return {"units": unit_rows(run, result), "fingerprints": {u.gpu.uuid: u.fingerprint for u in run.units},
            "versions": run.versions, "settings": dataclasses.asdict(run.settings),
            "fail_on_ambiguous": result.fail_on_ambiguous, "passes": run.passes,
            "window_samples": run.window_samples, "wall_s": run.wall_s, "counts": result.counts(),
            "exit_code": code, "summary": summary, "benchmarks": benches, "not_reached": list(run.not_reached)}
