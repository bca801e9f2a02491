"""Machine-readable gate output: verdict JSON, a markdown verdict (GitHub job summary) and CSV.

Same ``CompareResult`` as the terminal table of ``fp4bench.report.tables``, told the same way: the
rule in its words (``policy_text``), each benchmark's headline medians, Δ, interval and windows;
FAIL and MISSING first.
The verdict JSON is the document of ``fp4bench.gate.verdict_json`` (source ``"gate"``).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from fp4bench.gate import verdict_json as vj
from fp4bench.gate.compare import CompareResult
from fp4bench.gate.coverage import OUTCOME
from fp4bench.gate.verdict import Status, Verdict
from fp4bench.report.tables import (MEDIANS, OTHER_UNIT, describe_changes, format_interval, format_pct, format_seconds,
                                   format_windows, policy_text, spread_text, verdict_label, verdict_summary)


def verdict_json(result: CompareResult, baseline: str | None = None) -> dict[str, Any]:
    """The gate's verdict as the verdict JSON document (``exit_code`` is the gate's decision);
    its evidence: the baseline file and what makes the comparison less sensitive."""
    rows = [vj.benchmark(v, result.is_failure(v), v.interval,
                         {"noise": vj.number(v.noise), "windows_base": v.windows_base, "windows_new": v.windows_new})
            for v in result.sorted()]
    return vj.document(result, source="gate", exit_code=result.exit_code, summary=verdict_summary(result),
                       evidence={"baseline": baseline, "notes": list(result.notes)}, benchmarks=rows)


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def verdict_markdown(result: CompareResult, baseline: str | None = None, limit: int = 60) -> str:
    """A GitHub-flavoured markdown verdict: outcome line, counts, what changed, then a table with
    FAIL and MISSING first (``limit`` rows; passes beyond it are only counted)."""
    counts = ", ".join(f"{n} {s}" for s, n in result.counts().items() if n) or "no verdicts"
    icon = "❌" if result.exit_code else "✅"
    lines = [f"### {icon} fp4bench: {OUTCOME[result.exit_code]} (exit {result.exit_code})", "", f"**{counts}**", ""]
    if result.coverage is not None:
        lines += [f"- coverage: {_md_escape(result.coverage.summary())}"]
    if baseline:
        lines.append(f"- baseline: `{baseline}`")
    lines.append(f"- what changed: {describe_changes(result.changes)}")
    lines.append(f"- policy: {_md_escape(policy_text(result))}")
    if result.less_sensitive():
        lines.append(f"- {OTHER_UNIT}")
    lines += [f"- {_md_escape(note)}" for note in result.notes]
    lines.append(f"- {MEDIANS}")
    spread = spread_text(result)
    if spread:
        lines.append(f"- {spread}")
    lines.append("")
    ordered = result.sorted()
    shown = [v for i, v in enumerate(ordered) if v.status is not Status.PASS or i < limit][:max(limit, 0)]
    shown_fail = sum(1 for v in shown if result.is_failure(v))
    rows = ["| verdict | benchmark | base | now | Δ | interval | windows | notes |", "|---|---|---|---|---|---|---|---|"]
    for v in shown:
        label = verdict_label(v)
        rows.append(f"| {'**' + label + '**' if result.is_failure(v) else label} | `{_md_escape(v.name.split('::')[-1])}` | "
                    f"{format_seconds(v.base_median)} | {format_seconds(v.new_median)} | {format_pct(v)} | "
                    f"{format_interval(v.interval)} | {format_windows(v)} | {_md_escape(v.reason)} |")
    lines += rows
    rest = len(ordered) - len(shown)
    if rest:
        missed = len(result.failures) - shown_fail
        lines += ["", f"… and {rest} more rows" + (f", {missed} of them failing" if missed else " (none failing)")]
    return "\n".join(lines) + "\n"


def step_summary_path(env: Mapping[str, str] | None = None, inputs: Sequence[Any] = ()) -> Path | None:
    """``$GITHUB_STEP_SUMMARY`` checked as an output (``fp4bench.outputs``; appended to by design),
    or None when unset. Called before the run, so an unwritable one is refused at the start."""
    from fp4bench.outputs import check_output

    target = (env if env is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    return check_output(target, "$GITHUB_STEP_SUMMARY", inputs=inputs, append=True, stdout=False) if target else None


def write_step_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append to ``$GITHUB_STEP_SUMMARY`` when set (GitHub Actions renders it on the run page), in
    one write to a regular file (``fp4bench.outputs.append_once``: a FIFO or device is refused,
    a failed write is a ``WriteError`` naming the file)."""
    from fp4bench.outputs import append_once

    target = (env if env is not None else os.environ).get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    append_once(target, "$GITHUB_STEP_SUMMARY", markdown + "\n")
    return Path(target)


CSV_COLUMNS = ("fullname", "backend", "tactic", "problem", "kind", "model", "role", "m", "median_s", "tflops",
               "tbs", "pct_compute", "pct_bandwidth", "rel_ci95", "power_w", "sm_clock_mhz", "throttled",
               "verdict", "delta_pct")


def results_csv(rows: Sequence[Any], verdicts: Mapping[str, Verdict] | None = None) -> str:
    """One line per measured case (``report.data.CaseRow``), with its verdict when gated."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in rows:
        v = (verdicts or {}).get(r.fullname)
        values = {**r.__dict__, "verdict": v.status.value if v else "",
                  "delta_pct": "" if v is None or v.pct is None else f"{v.pct:.3f}"}
        w.writerow(["" if values.get(c) is None else values.get(c) for c in CSV_COLUMNS])
    return buf.getvalue()
