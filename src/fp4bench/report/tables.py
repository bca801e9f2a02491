"""How results read: plain-text, fixed-width tables for terminals and CI logs, and the text of
one verdict (``verdict_message``), of times and intervals (``format_seconds``, ``format_interval``)
and of the gate's rule (``policy_text``), which the markdown verdict (``report.machine``) shares.

``verdict_table`` explains a gate decision: what changed in the stack, then every benchmark with
FAIL first, then MISSING / NEW listed explicitly (renames show up as one of each).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from fp4bench.gate.compare import CompareResult, delta_spread
from fp4bench.gate.coverage import EXIT_INCOMPLETE, OUTCOME, collapsed
from fp4bench.gate.policy import Policy
from fp4bench.gate.power import PowerRow
from fp4bench.gate.picks import choice_of, choice_text
from fp4bench.gate.verdict import KERNEL_CHANGE, LOST_TACTIC, MISPICK, NEW_TACTIC, TIMING, Status, Verdict
from fp4bench.report.textfit import common_parts, common_prefix, fit_table, wrap_line


#: shown in the report header when the gate cannot rely on being on the baseline's own GPU
OTHER_UNIT = ("baseline from another/unknown GPU unit: less sensitive (a unit offset widens every interval); "
              "record one on this runner (units/<UUID>.json) or use fp4bench ab")


def format_seconds(s: float | None) -> str:
    """``2.31e-5`` -> ``"23.1 µs"``; ``"-"`` for no value."""
    if s is None or not math.isfinite(s):
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if abs(s) >= scale:
            return f"{s / scale:.4g} {unit}"
    return f"{s / 1e-9:.4g} ns"


def format_interval(iv: tuple[float, float] | None) -> str:
    """``(1.234, 5.6)`` (percent) -> ``"[+1.2, +5.6]%"``; ``"-"`` for none."""
    if iv is None or not all(math.isfinite(x) for x in iv):
        return "-"
    return f"[{iv[0]:+.1f}, {iv[1]:+.1f}]%"


def verdict_headline(v: Verdict) -> str:
    """A verdict in a few words (``FAIL +67.0%``, ``FAIL (kernel change)``): the first line of a
    failed test's message, where pytest's summary leaves little room after the test id."""
    if v.kind != TIMING:
        return f"{v.status.value} ({v.kind})"
    return v.status.value + (f" {v.pct:+.1f}%" if v.pct is not None else "")


def verdict_message(v: Verdict) -> str:
    """One line that explains a verdict at a glance (pytest failure text, tables)."""
    tag = v.status.value if v.kind == TIMING else f"{v.status.value} ({v.kind})"
    head = f"{tag} {v.name}"
    if v.kind in (LOST_TACTIC, NEW_TACTIC, KERNEL_CHANGE, MISPICK):
        return f"{head}: {v.reason}"
    if v.status is Status.MISSING:
        return f"{head}: in the baseline ({format_seconds(v.base_median)}) but not measured now"
    if v.status is Status.NEW:
        return f"{head}: {format_seconds(v.new_median)} (not in the baseline)"
    parts = [f"{v.pct:+.1f}%"] if v.pct is not None else []
    if v.interval is not None:
        parts.append(f"interval {format_interval(v.interval)}")
    if v.floor is not None:
        parts.append(f"floor {v.floor * 100:g}%")
    if v.windows_base:
        parts.append(f"windows {v.windows_base}+{v.windows_new}")
    line = f"{head}: {format_seconds(v.base_median)} → {format_seconds(v.new_median)}"
    if parts:
        line += f" ({', '.join(parts)})"
    # what neither side recorded (a CPU run has no SM clock or throttle state) is left out
    state = []
    if v.base_clock or v.new_clock:
        state.append(f"SM clock {v.base_clock or '?'}→{v.new_clock or '?'} MHz")
    if v.base_throttle or v.new_throttle:
        state.append(f"throttle: {v.base_throttle or '?'}→{v.new_throttle or '?'}")
    if state:
        line += "; " + ", ".join(state)
    if v.reason:
        line += f" — {v.reason}"
    return line


def _render(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        out = [c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)]
        return "  ".join(out).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def _fmt_value(v: Any) -> str:
    return "-" if v is None else str(v)


def describe_changes(changes: Sequence[tuple[str, Any, Any]]) -> str:
    """``"driver 580.1 → 590.2; torch 2.9 → 2.10"`` or a sentence saying nothing changed."""
    if not changes:
        return "nothing (same software stack)"
    return "; ".join(f"{k} {_fmt_value(old)} → {_fmt_value(new)}" for k, old, new in changes)


def verdict_label(v: Verdict) -> str:
    """The verdict column: status, with the kind of a non-timing verdict or "(improved)"."""
    label = v.status.value
    if v.kind != "timing":
        label += f" ({v.kind})"
    elif v.improved:
        label += " (improved)"
    return label


def format_pct(v: Verdict) -> str:
    """The Δ column: the change of the headline median (``"+1.2%"``), ``"-"`` for none."""
    return "-" if v.pct is None or not math.isfinite(v.pct) else f"{v.pct:+.1f}%"


def sub_floor_ambiguous(result: CompareResult) -> list[Verdict]:
    """AMBIGUOUS timing verdicts whose interval lies below the floor (shown not to reach it, not
    shown below the guard band): on an unchanged stack (another GPU unit especially) these are
    most AMBIGUOUS verdicts, so the table shows them as one explained line instead of a row each.
    Failing ones stay rows."""
    return [v for v in result.verdicts
            if v.status is Status.AMBIGUOUS and v.kind == "timing" and not v.undecided
            and v.interval is not None and v.interval[1] < result.policy.floor * 100
            and not result.is_failure(v) and not v.remeasure]


def _collapsed_note(items: Sequence[Verdict], floor: float, shown: int = 5, prefix: str = "") -> str:
    pcts = sorted((v.pct or 0.0 for v in items))
    worst = sorted(items, key=lambda v: -(v.ratio or 0.0))[:shown]
    names = ", ".join(f"{v.name.removeprefix(prefix)} {format_pct(v)}" for v in worst)
    more = f", ... {len(items) - shown} more" if len(items) > shown else ""
    return (f"AMBIGUOUS ({len(items)}, not listed above): Δ {pcts[0]:+.1f}% to {pcts[-1]:+.1f}%, each interval "
            f"below the {floor * 100:g}% floor but not below the guard band. "
            f"On an unchanged stack this is window-to-window or unit-to-unit drift; it does not fail the gate. "
            f"Largest: {names}{more}")


def policy_text(result: CompareResult) -> str:
    """The gate's rule in words, as every verdict (terminal, markdown, report.md) states it: the
    floor, the guard band and the bounds a FAIL and a PASS need, what the medians are, the unit
    offset of a baseline from another GPU unit, and what else fails."""
    p = result.policy
    rs = p.rule_settings()
    drift = p.drift_note or next((q.drift_note for q in result.policies.values() if q.drift_note), "")
    return (f"floor {p.floor * 100:g}% (FAIL when shown by >= {rs.min_new_for_fail} new windows beyond "
            f"{math.expm1(rs.threshold) * 100:.2g}%, PASS when shown below; {rs.confidence:g} (FAIL) / "
            f"{rs.pass_confidence:g} (PASS) one-sided bounds on window medians{'; ' + drift if drift else ''}), "
            f"min samples {p.min_samples}, missing {'allowed' if p.allow_missing else 'fails'}, "
            f"dispatch {'fails' if p.dispatch == 'fail' else 'reported'}")


def format_windows(v: Verdict) -> str:
    """The windows column: windows judged, base + now (``"3+2"``); ``"-"`` without a baseline."""
    return f"{v.windows_base}+{v.windows_new}" if v.windows_base else "-"


def spread_text(result: CompareResult) -> str:
    """The spread of Δ over the timed benchmarks in one line ('' when none was timed on both sides)."""
    spread = delta_spread(result)
    if spread is None:
        return ""
    return (f"Δ of the medians over {spread[0]} timed benchmarks: median |Δ| {spread[1] * 100:.2f}%, "
            f"p95 |Δ| {spread[2] * 100:.2f}%, max |Δ| {spread[3] * 100:.2f}%")


#: what the base / now columns of every verdict are (``gate.record.headline_median``)
MEDIANS = "base / now: each side's median (geometric mean of its window medians); Δ their ratio - 1, interval: the rule's bounds"


def verdict_table(result: CompareResult) -> str:
    """The gate report: header with fingerprint changes, one row per verdict, missing/new lists."""
    lines: list[str] = []
    fp = result.baseline_fingerprint
    if fp is not None:
        lines.append(f"baseline GPU: {fp.model}")
    lines += wrap_line(f"what changed: {describe_changes(result.changes)}")
    p = result.policy
    lines += wrap_line(f"policy: {policy_text(result)}")
    lines.append(MEDIANS)
    noise = next(iter(result.policies.values()), p).noise
    lines += wrap_line(noise.header())
    if result.less_sensitive():
        lines += wrap_line(OTHER_UNIT)
    lines += list(result.notes)
    lines.append("")
    header = ["verdict", "benchmark", "base", "now", "Δ", "interval", "windows", "notes"]
    rows = []
    sub_floor = sub_floor_ambiguous(result)
    many_missing = len(result.by_status(Status.MISSING)) > LIST_LIMIT
    folded = {id(v) for v in sub_floor}  # by identity: a list test compares whole verdicts (quadratic)
    shown = [v for v in result.sorted() if id(v) not in folded and not (many_missing and v.status is Status.MISSING)]
    # what every row shares is said once above the table: the test file of the names, notes
    # over every verdict's name, so a table of one row (the rest collapsed) still uses it
    prefix = common_prefix([v.name for v in result.verdicts])
    notes = []
    for v in shown:
        note = v.reason
        if v.kind == "timing" and v.status is Status.INVALID and (v.base_throttle or v.new_throttle):
            note += f" [throttle {v.base_throttle or '?'}→{v.new_throttle or '?'}]"
        notes.append(note)
    common, notes = common_parts(notes)
    if prefix:
        lines.append(f"benchmark names: {prefix}<name> (the table and the notes below it leave the prefix out)")
    if common:
        lines += wrap_line(f"notes of every row: {'; '.join(common)}")
    for v, note in zip(shown, notes):
        rows.append(
            [
                verdict_label(v),
                v.name.removeprefix(prefix),
                format_seconds(v.base_median),
                format_seconds(v.new_median),
                format_pct(v),
                format_interval(v.interval),
                format_windows(v),
                note,
            ]
        )
    lines += fit_table(header, rows, [False, False, True, True, True, True, True, False], wrap=1, trail=7)

    if sub_floor:
        lines += [""] + wrap_line(_collapsed_note(sub_floor, p.floor, prefix=prefix))
    for status, what in ((Status.MISSING, "in the baseline, not measured now"), (Status.NEW, "new, no baseline")):
        items = result.by_status(status)
        if items:
            lines.append("")
            lines.append(f"{status.value} ({len(items)}) — {what}:")
            if len(items) > LIST_LIMIT and result.coverage is not None:
                group = result.coverage.group
                for line in collapsed([v.name for v in items], group, prefix):
                    lines += wrap_line(line, indent=4)
            else:
                lines += [f"  {v.name}" + (f"  [{v.kind}]" if v.kind != "timing" else "") for v in items]
    lines += _coverage_lines(result, prefix)
    suspects = result.suspects()
    if suspects:
        lines.append("")
        lines += wrap_line(f"suspects to re-measure ({len(suspects)}): "
                           + ", ".join(n.removeprefix(prefix) for n in suspects))
    spread = spread_text(result)
    if spread:
        lines += ["", spread]
    lines.append("")
    lines.append(f"summary: {verdict_summary(result)}")
    return "\n".join(lines)


#: a list of more names than this is shown as one line per backend and model
LIST_LIMIT = 10


def _coverage_lines(result: CompareResult, prefix: str) -> list[str]:
    """What was judged of what was expected, and the cases skipped on both sides (collapsed)."""
    cov = result.coverage
    if cov is None:
        return []
    lines = ["", *wrap_line(f"coverage: {cov.summary()}")]
    if cov.skipped_both:
        shown = ", ".join(n.removeprefix(prefix) for n in cov.skipped_both[:3])
        more = f", ... {len(cov.skipped_both) - 3} more" if len(cov.skipped_both) > 3 else ""
        lines += wrap_line(f"SKIPPED on both sides ({len(cov.skipped_both)}, not judged): {shown}{more}")
    return lines


def verdict_summary(result: CompareResult) -> str:
    """The verdict in one line, e.g. ``2 PASS, 1 FAIL → regression (exit 1)``: the table's last
    line, and the message a failed gate test shows in pytest's short summary. An incomplete
    comparison says what was expected and what was judged."""
    counts = ", ".join(f"{n} {s}" for s, n in result.counts().items() if n)
    code = result.exit_code
    outcome = OUTCOME[code]
    if code == EXIT_INCOMPLETE and result.coverage is not None and result.coverage.incomplete:
        outcome = result.coverage.problem()
    elif code == EXIT_INCOMPLETE and result.remeasure:
        n = len(result.remeasure)
        outcome = (f"re-measure: {n} benchmark{'s' if n != 1 else ''} shown slower beyond the guard band "
                   "without the evidence a FAIL needs (each names what it needs)")
    failing = result.regressions
    if code != EXIT_INCOMPLETE and failing and not any(v.status is Status.FAIL for v in failing):
        # nothing measured slower: these fail because no verdict is not a pass
        kinds = ", ".join(sorted({v.status.value for v in failing}))
        outcome = (f"regression: {len(failing)} benchmarks without a verdict ({kinds}: too few samples, "
                   "undecided or not judgeable) fail the gate, none was shown slower")
    return f"{counts or 'no verdicts'} → {outcome} (exit {code})"


def power_table(rows: Sequence[PowerRow], policy: Policy) -> str:
    """``fp4bench power``'s rows (``gate.power``) as a text table, with the policy that produced them."""
    rs = policy.rule_settings()
    head = (f"gate: floor {policy.floor * 100:g}%, guard band {math.expm1(rs.threshold) * 100:.2g}%, "
            f"bounds {rs.confidence:g} (FAIL) / {rs.pass_confidence:g} (PASS) on window medians")
    lines = [head, f"{'slowdown':>9} {'FAIL':>11} {'rate':>6} {'AMBIGUOUS':>9} {'PASS':>5} {'other':>5} "
                   f"{'median Δ':>9}"]
    for r in rows:
        lines.append(f"{r.slowdown * 100:8.2f}% {r.fail:5d} / {r.timed:<3d} {r.fail_rate:6.0%} {r.ambiguous:9d} "
                     f"{r.passed:5d} {r.other:5d} {r.median_delta * 100:+8.2f}%")
    return "\n".join(lines)


# --- sweep results ----------------------------------------------------------------------------

_Formatter = Callable[[Any], str]


def _num(fmt: str) -> _Formatter:
    return lambda v: format(float(v), fmt)


#: known row keys -> (column title, formatter); other keys print as-is under their own name
KNOWN_COLUMNS: dict[str, tuple[str, _Formatter]] = {
    "time_s": ("time", format_seconds),
    "median_s": ("median", format_seconds),
    "min_s": ("min", format_seconds),
    "tflops": ("TFLOP/s", _num(".1f")),
    "gbps": ("GB/s", _num(".0f")),
    "pct_peak": ("% peak", _num(".1f")),
    "pct_peak_bw": ("% peak BW", _num(".1f")),
    "noise": ("CI95", lambda v: f"±{float(v) * 100:.1f}%"),  # of the median of the case's (first) window
}


def _cell(key: str, v: Any) -> tuple[str, bool]:
    """(text, right-aligned?) for one value."""
    if v is None:
        return "-", True
    if key in KNOWN_COLUMNS:
        return KNOWN_COLUMNS[key][1](v), True
    if isinstance(v, bool):
        return str(v), False
    if isinstance(v, int):
        return str(v), True
    if isinstance(v, float):
        return f"{v:.4g}", True
    return str(v), False


def table_cells(rows: list[dict], columns: list[str]) -> tuple[list[str], list[list[str]], list[bool]]:
    """Header, formatted cells and right-alignment per column of a results table (a column is
    right-aligned when any of its values is a number)."""
    header = [KNOWN_COLUMNS[c][0] if c in KNOWN_COLUMNS else c for c in columns]
    body, right = [], [False] * len(columns)
    for r in rows:
        cells = []
        for i, c in enumerate(columns):
            text, is_right = _cell(c, r.get(c))
            right[i] = right[i] or (is_right and r.get(c) is not None)
            cells.append(text)
        body.append(cells)
    return header, body, right


def check_text(extra: dict) -> str:
    """A case's correctness check in a few words: ``ok: 0.31 of its error bound, SQNR 55.4 dB``,
    ``ok: bit-exact`` (a quantizer), or the failure's kind and detail."""
    kind = extra.get("check")
    if kind is None:
        return "-"
    if kind != "ok":
        detail = str(extra.get("check_detail") or "")
        return f"{kind}: {detail}" if detail else str(kind)
    parts = []
    if extra.get("worst_bound_ratio") is not None:
        parts.append(f"{float(extra['worst_bound_ratio']):.2g} of its error bound")
    if extra.get("sqnr_db") is not None:
        parts.append(f"SQNR {float(extra['sqnr_db']):.1f} dB")
    return "ok: " + (", ".join(parts) if parts else "bit-exact")


def check_row(spec: Any, res: Any) -> dict:
    """One line of the table a run prints when it times nothing (``--benchmark-disable``): the
    case (``sweep.CaseSpec``) and its check (``case.CaseResult``)."""
    o = spec.problem.origin
    return {"backend": spec.backend, "tactic": spec.tactic.label, "problem": f"{o.model} b{o.batch} {o.role}",
            "size": spec.problem.size, "time_s": None, "check": check_text(res.extra_info)}


def result_row(spec: Any, res: Any) -> dict:
    """One line of the end-of-run table for a measured case (``sweep.CaseSpec``, ``case.CaseResult``):
    size -> time, TFLOP/s, % of peak, notes."""
    x = res.extra_info
    p = spec.problem
    notes = [x.get("timer", ""), x.get("l2", "")]
    if x.get("throttled"):
        notes.append("THROTTLED " + ",".join(x.get("throttle_reasons") or []))
    if x.get("timing_note"):
        notes.append(x["timing_note"])
    if choice_of(x) is not None:
        notes.append("chose " + choice_text(choice_of(x)))
    return {"backend": spec.backend, "tactic": spec.tactic.label, "problem": f"{p.origin.model} b{p.origin.batch} {p.origin.role}",
            "size": p.size, "median_s": res.timing.median_s, "tflops": x.get("tflops"),
            "gbps": x["tbps"] * 1e3 if x.get("tbps") is not None else None, "pct_peak": x.get("pct_peak_compute"),
            "pct_peak_bw": x.get("pct_peak_bandwidth"), "noise": x.get("rel_ci95"),
            "sqnr_db": x.get("sqnr_db"), "notes": "; ".join(n for n in notes if n)}
