"""How an ``fp4bench ab`` run reads: the report (``report``: header, per-process offsets, the
verdict table) and its verdict JSON (``to_json``), from the run and its judgement (``ab.judge``)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

from fp4bench.ab.judge import TIMED, outcome, skipped_on_both
from fp4bench.ab.records import AbRun, GpuPart, Paired
from fp4bench.gate import verdict_json
from fp4bench.gate.compare import CompareResult, delta_spread
from fp4bench.gate.picks import choice_of, choice_text
from fp4bench.gate.verdict import TIMING, Status, Verdict
from fp4bench.report.tables import _render, describe_changes, format_seconds
from fp4bench.report.textfit import common_prefix, fit_table, wrap_line


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


def gpu_line(part: GpuPart) -> str:
    """One GPU of a run spread over several: its benchmarks, and its telemetry or why it crashed."""
    head = f"GPU {part.index} {part.uuid}: {len(part.benchmarks)} benchmarks"
    if part.error:
        done = len(part.run.pairs) if part.run is not None else 0
        return (f"{head}, RUN CRASHED after {done} ({part.error}); the rest of its share is not judged")
    if part.run is None:
        return f"{head}, interrupted before it listed the sweep"
    return f"{head}, wall {part.run.wall_s:.0f} s; " + telemetry_line(telemetry_summary(part.run))


def version_changes(run: AbRun, result: CompareResult) -> list[tuple[str, str, str]]:
    """(benchmark, version on A, version on B) where the backend's version differs."""
    out = []
    for p in run.pairs:
        va, vb = p.a.extra_info.get("backend_version"), p.b.extra_info.get("backend_version")
        if va != vb and (va or vb):
            out.append((p.name, str(va or "-"), str(vb or "-")))
    return out


def choices(run: AbRun) -> list[list[str]]:
    """[benchmark, A's choice, B's choice, "changed" or ""] of every library-choice row (``gate.picks``)."""
    out = []
    for p in run.pairs:
        a, b = choice_of(p.a.extra_info), choice_of(p.b.extra_info)
        if a is not None or b is not None:
            out.append([p.name, choice_text(a), choice_text(b), "" if choice_text(a) == choice_text(b) else "changed"])
    return out


def _interval(v: Verdict, p: Paired | None) -> str:
    if p is None or p.estimate is None or v.kind not in TIMED or v.status is Status.INVALID:
        return "-" if v.pct is None or not math.isfinite(v.pct) else f"{v.pct:+.1f}%"
    lo, hi = p.estimate.est.interval_pct
    return f"{p.estimate.est.pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]"


def process_offsets(run: AbRun) -> list[dict[str, Any]]:
    """Per process: side, slot, start index, how often it allocated first in its slot, and its
    offset ``m_p`` (in %, ``exp(m_p) - 1``) per benchmark and as the median over benchmarks."""
    out = []
    for info in run.processes:
        per: dict[str, float] = {}
        first = allocated = 0
        for p in run.pairs:
            part = next((x for x in p.parts if x.proc == info.proc), None)
            if part is None:
                continue
            allocated += 1
            mate = [x for x in p.parts if x.slot == part.slot and x.side != part.side]
            first += all(part.alloc_index < m.alloc_index for m in mate)
            if p.estimate is not None and info.proc in p.estimate.offsets:
                per[p.name] = math.expm1(p.estimate.offsets[info.proc]) * 100
        out.append({"process": info.proc, "side": info.side, "slot": info.slot, "start_index": info.start_index,
                    "pid": info.pid, "extra": info.extra, "replaces": info.replaces, "crash": info.crash,
                    "benchmarks": allocated, "allocated_first_in_slot": first,
                    "offset_pct_median": statistics.median(per.values()) if per else None,
                    "offset_pct": per})
    return out


def report(run: AbRun, result: CompareResult) -> str:
    st = run.settings
    where = (f"{len(run.gpus)} GPUs, each benchmark's A and B on one of them (per GPU below)" if run.gpus
             else run.fingerprints['A'].get('gpu_uuid') or '')
    lines = [f"A: {run.fingerprints['A'].get('gpu_name')} {where}".rstrip(),
             f"stack A → B: {describe_changes(result.changes)}",
             "prepare + check (JIT build/load included, never timed): "
             + ", ".join(f"{s} {run.check_seconds[s]:.1f} s" for s in ("A", "B"))]
    lines += wrap_line(f"rule: floor {st.floor * 100:g}%, guard band {math.expm1(st.threshold) * 100:.2g}% "
                       f"(margin {st.margin:g}), {st.confidence * 100:g}% one-sided bounds on the mean of "
                       f"per-process round-centred log times; {len(run.processes)} processes, "
                       f"wall {run.wall_s:.0f} s")
    for side, found in sorted(run.test_only.items()):
        if found:
            lines.append(f"side {side} ran TEST-ONLY backends: " + "; ".join(found.values()))
    for c in run.crashes:
        lines += wrap_line(f"CRASH: process {c.proc} (side {c.side}) lost during {c.during} {c.benchmark}: "
                           f"{c.reason.splitlines()[0][:200]}")
    lines += wrap_line(telemetry_line(telemetry_summary(run)))
    for part in run.gpus:
        lines += wrap_line(gpu_line(part))
    taking_turns = [p for p in run.pairs if p.turns]
    if taking_turns:
        lines += wrap_line(f"in turns ({len(taking_turns)} benchmarks): the GPU could not hold every process's copy at "
                           f"once, so the processes took turns and Δ is the mean per-slot log-ratio (one process a "
                           f"turn: a slot's A and B in adjacent turns, sharing no round): "
                           + ", ".join(f"{p.name} ({len(p.turns)} turns of {len(p.turns[0])})" for p in taking_turns[:3])
                           + (" ..." if len(taking_turns) > 3 else ""))
    lines.append("")
    offs = process_offsets(run)
    if offs:
        lines.append("per-process offsets (median over benchmarks of exp(m_p) - 1; a pattern that follows the "
                     "start order, not the side, is placement):")
        lines += _render(["process", "side", "started", "alloc first", "offset"],
                         [[o["process"], o["side"], str(o["start_index"] + 1),
                           f"{o['allocated_first_in_slot']}/{o['benchmarks']}",
                           "-" if o["offset_pct_median"] is None else f"{o['offset_pct_median']:+.2f}%"]
                          for o in offs], [False, False, True, True, True])
        lines.append("")
    changed = version_changes(run, result)
    if changed:
        lines.append("backend versions that differ, per benchmark:")
        lines += _render(["benchmark", "A", "B"], [list(c) for c in changed], [False, False, False])
        lines.append("")
    chosen = choices(run)
    if chosen:
        lines.append("what the library chose (library-choice rows), A and B:")
        lines += _render(["benchmark", "A", "B", ""], chosen, [False, False, False, False])
        lines.append("")
    pairs = {p.name: p for p in run.pairs}
    prefix = common_prefix([v.name for v in result.verdicts])
    if prefix:
        lines.append(f"benchmark names: {prefix}<name>")
    rows = []
    for v in result.sorted():
        p = pairs.get(v.name)
        label = v.status.value + (f" ({v.kind})" if v.kind != TIMING else " (improved)" if v.improved else "")
        reps = f"{v.n_base}/{v.n_new}" if p is not None and p.estimate is not None else "-"
        rounds = str(len(p.order)) if p is not None and p.order else "-"
        rows.append([label, v.name.removeprefix(prefix), format_seconds(v.base_median), format_seconds(v.new_median),
                     _interval(v, p), reps, rounds, v.reason])
    # A: the geometric mean of A's per-process round times, B: A x exp(Δ) (``_side_level``)
    head = ["verdict", "benchmark", "A", "B", f"Δ [{st.confidence * 100:g}% bounds]", "procs", "rounds", "notes"]
    right = [False, False, True, True, True, True, True, False]
    if run.gpus:  # which GPU measured each benchmark
        index = {g.uuid: str(g.index) for g in run.gpus}
        for row, v in zip(rows, result.sorted()):
            row.insert(2, index.get(run.gpu_of.get(v.name, ""), "-"))
        head.insert(2, "GPU")
        right.insert(2, True)
    lines += fit_table(head, rows, right, wrap=1, trail=len(head) - 1)
    both = skipped_on_both(run)
    if both:
        lines.append("")
        lines += wrap_line(f"skipped on both sides ({len(both)}): "
                           + ", ".join(f"{n.removeprefix(prefix)} ({why.splitlines()[0][:80]})" for n, why in both[:3])
                           + (" ..." if len(both) > 3 else ""))
    if run.not_reached:
        lines.append(f"INCOMPLETE: interrupted, {len(run.not_reached)} benchmarks not reached (not judged): "
                     + ", ".join(run.not_reached[:5]) + (" ..." if len(run.not_reached) > 5 else ""))
    spread = delta_spread(result)
    if spread is not None:
        lines.append("")
        lines.append(f"Δ over {spread[0]} timed benchmarks: median |Δ| {spread[1] * 100:.2f}%, "
                     f"p95 |Δ| {spread[2] * 100:.2f}%, max |Δ| {spread[3] * 100:.2f}%")
    lines += ["", f"summary: {outcome(run, result)[1]}"]
    return "\n".join(lines)


def to_json(run: AbRun, result: CompareResult) -> dict[str, Any]:
    """The run as the verdict JSON document (``gate.verdict_json``, source ``"ab"``): per
    benchmark its processes, rounds, telemetry and versions; for the run its fingerprints,
    settings, processes, crashes and GPUs."""
    pairs = {p.name: p for p in run.pairs}
    info = {i.proc: i for i in run.processes}
    rows = []
    for v in result.sorted():
        p = pairs.get(v.name)
        e = p.estimate if p else None
        rows.append(verdict_json.benchmark(v, result.is_failure(v), e.est.interval_pct if e else None, {
            "decision": e.decision.value if e else None,
            "stopped": p.stopped if p else None,
            # the processes of each turn when the slots took turns (device memory), else None
            "turns": [list(t) for t in p.turns] or None if p else None,
            "memory_bytes": p.memory if p else None, "resident_capacity": p.capacity if p else None,
            # rotating operand copies (placements) of each side's captures (measure.copies)
            "round_samples": p.round_samples if p else None, "wall_s": p.wall_s if p else None,
            "check_s": {"A": p.a.check_s, "B": p.b.check_s} if p else None,
            "a_copies": p.a.extra_info.get("rotating_copies") if p else None,
            "b_copies": p.b.extra_info.get("rotating_copies") if p else None,
            "between_var": e.between_var if e else None, "within_var_of_mean": e.within_var_of_mean if e else None,
            "round_order": [list(o) for o in p.order] if p else None,
            "processes": [{"process": x.proc, "side": x.side, "slot": x.slot,
                           "start_index": info[x.proc].start_index, "alloc_index": x.alloc_index,
                           "status": x.status, "reason": x.reason, "rounds": len(x.rounds),
                           "round_medians_s": [x.rounds[r] for r in sorted(x.rounds)],
                           "offset": e.offsets.get(x.proc) if e else None} for x in p.parts] if p else None,
            "crashes": [dataclasses.asdict(c) for c in p.crashes] if p else [],
            "a_version": p.a.extra_info.get("backend_version") if p else None,
            "b_version": p.b.extra_info.get("backend_version") if p else None,
            # what the library chose on each side (library-choice rows, ``gate.picks``; None: a fixed call)
            "a_choice": choice_of(p.a.extra_info) if p else None,
            "b_choice": choice_of(p.b.extra_info) if p else None,
            # NVML per timing round, in round order (None: not measured, e.g. on CPU)
            "a_telemetry": (p.a.telemetry or None) if p else None,
            "b_telemetry": (p.b.telemetry or None) if p else None,
            "gpu_uuid": run.gpu_of.get(v.name) or run.fingerprints.get("A", {}).get("gpu_uuid"),
        }))
    code, summary = outcome(run, result)
    evidence = {
        "fingerprints": run.fingerprints, "settings": dataclasses.asdict(run.settings),
        "check_seconds": run.check_seconds, "test_only": run.test_only, "wall_s": run.wall_s,
        "telemetry": telemetry_summary(run), "processes": process_offsets(run),
        "crashes": [dataclasses.asdict(c) for c in run.crashes],
        "skipped_on_both": [{"name": n, "reason": r} for n, r in skipped_on_both(run)],
        "not_reached": list(run.not_reached),
        # a run spread over several GPUs: each GPU, its share, its telemetry per side ([] on one GPU)
        "gpus": [{"index": g.index, "uuid": g.uuid, "name": g.name, "benchmarks": list(g.benchmarks),
                  "measured": len(g.run.pairs) if g.run is not None else 0, "error": g.error or None,
                  "wall_s": g.run.wall_s if g.run is not None else None,
                  "telemetry": telemetry_summary(g.run) if g.run is not None else None} for g in run.gpus],
    }
    # what ab judged is its own account (``outcome``, ``not_reached``), not the coverage of the
    # records it handed to ``compare``
    return verdict_json.document(result, source="ab", exit_code=code, summary=summary, evidence=evidence,
                                 benchmarks=rows, coverage=False)
