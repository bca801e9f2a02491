"""``fp4bench report``: a markdown page plus the PNG plots of ``plots.py`` for one or more runs.

The page leads with what an engineer checks first (the verdict against a baseline, if one was
given; then throughput and roofline), and each plot has a compact table of the same numbers so
the page reads without the images too.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from fp4bench.gate.baseline import Baseline
from fp4bench.gate.compare import CompareResult
from fp4bench.outputs import write_atomic
from fp4bench.report.tables import format_seconds
from fp4bench.report import plots
from fp4bench.report.data import RunData, best_per_problem, run_data, split_tactic
from fp4bench.report.machine import verdict_markdown


@dataclass
class Report:
    markdown: Path
    images: list[Path] = field(default_factory=list)


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, fmt)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _img(lines: list[str], path: Path | None, out: Path, alt: str) -> None:
    if path is not None:
        lines += [f"![{alt}]({path.relative_to(out).as_posix()})", ""]


def build_report(runs: Sequence[Baseline], out: str | Path, result: CompareResult | None = None,
                 title: str | None = None) -> Report:
    """Write ``out/report.md`` and its PNGs; ``result`` (baseline vs these runs) adds the Δ section."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    data = run_data(runs)
    rep = Report(out / "report.md")
    lines = [f"# {title or 'fp4bench report'}: {data.gpu}", ""]
    lines += _header(data)
    if result is not None:
        lines += ["## Verdict against the baseline", ""]
        lines += verdict_markdown(result, limit=40).splitlines() + [""]
        p = plots.deltas(result, out)
        _img(lines, p, out, "delta vs baseline")
        rep.images += [p] if p else []
    lines += _throughput_section(data, out, rep)
    lines += _tactic_section(data, out, rep)
    lines += _telemetry_section(data, out, rep)
    write_atomic(rep.markdown, "\n".join(lines) + "\n")
    return rep


def _header(d: RunData) -> list[str]:
    fp = d.fingerprint
    stack = ", ".join(f"{k} {fp[k]}" for k in ("driver", "cuda", "torch", "flashinfer", "sgl_kernel", "cublaslt")
                      if fp.get(k))
    sweep = ", ".join(f"{k}={','.join(map(str, v)) if isinstance(v, list) else v}"
                      for k, v in d.sweep.items() if v not in (None, [], ""))
    peaks = "unknown GPU: no peak table entry, % of peak omitted" if d.peaks is None else (
        f"{d.peaks.name}: HBM {d.peaks.bandwidth_tbs:g} TB/s, dense FP4 {d.peaks.fp4_tflops or '-'} / "
        f"FP8 {d.peaks.fp8_tflops or '-'} / BF16 {d.peaks.bf16_tflops or '-'} TFLOP/s (spec sheet)")
    return [f"- source: {', '.join(f'`{s}`' for s in d.sources)}",
            f"- GPU: {fp.get('gpu_name')} (CC {fp.get('compute_capability')}, {fp.get('sm_count')} SMs, "
            f"power limit {fp.get('power_limit_w')} W)",
            f"- stack: {stack}", f"- sweep: {sweep or '-'}", f"- peaks: {peaks}",
            f"- {len(d.rows)} measured cases, {len(d.unsupported)} tactics the library refused; `median`: per case, "
            "the geometric mean of its windows' median GPU time per call (the time the verdict compares; one "
            "window: its median), rates recomputed from it", ""]


def _throughput_section(d: RunData, out: Path, rep: Report) -> list[str]:
    lines = ["## Throughput and roofline", ""]
    for p, alt in ((plots.throughput_vs_m(d.rows, out, d.gpu, d.peaks), "TFLOP/s and TB/s vs M"),
                   (plots.roofline(d.rows, d.peaks, out, d.gpu), "roofline")):
        _img(lines, p, out, alt)
        rep.images += [p] if p else []
    n_tactics = Counter((r.backend, r.problem) for r in d.rows)
    rows = []
    for r in sorted(best_per_problem(d.rows).values(), key=lambda r: (r.kind, r.model, r.role, r.m or 0, r.backend)):
        roof = plots.pct_of_roof(r, d.peaks)
        rows.append([r.backend, f"{r.model} {r.role}", str(r.m), format_seconds(r.median_s), _f(r.tflops, ".1f"),
                     _f(r.tbs, ".2f"), _f(r.intensity, ".1f"), _f(roof, ".0f"), _f(r.pct_bandwidth, ".0f"),
                     str(n_tactics[(r.backend, r.problem)]), r.tactic if len(r.tactic) <= 48 else r.tactic[:47] + "…"])
    lines += ["Fastest tactic per backend and problem (`% roof`: achieved / min(compute peak, intensity × "
              "bandwidth); decode GEMMs sit left of the ridge, so `% BW` is the figure that matters):", ""]
    lines += _md_table(["backend", "problem", "M", "median", "TFLOP/s", "TB/s", "FLOP/B", "% roof", "% BW",
                        "tactics", "fastest tactic"], rows)
    return lines + [""]


def _tactic_section(d: RunData, out: Path, rep: Report) -> list[str]:
    paths = plots.tactic_heatmaps(d.rows, d.unsupported, out)
    if not paths and not d.unsupported:
        return []
    lines = ["## Tactics (tile configs)", ""]
    for p in paths:
        _img(lines, p, out, "tactic heatmap")
    rep.images += paths
    rows = []
    groups: dict[tuple[str, str, str], list] = {}
    for r in d.rows:
        stage, tile = split_tactic(r.tactic)
        if tile != "default":
            groups.setdefault((r.backend, r.problem, stage), []).append(r)
    for (backend, problem, stage), rs in sorted(groups.items()):
        if len(rs) < 2:
            continue
        rs.sort(key=lambda r: r.median_s)
        n_bad = sum(1 for u in d.unsupported if u.backend == backend and u.problem == problem
                    and split_tactic(u.tactic)[0] == stage)
        rows.append([backend, rs[0].label + (f" {stage}" if stage else ""), str(rs[0].m),
                     str(len(rs)), str(n_bad), split_tactic(rs[0].tactic)[1], format_seconds(rs[0].median_s),
                     format_seconds(rs[len(rs) // 2].median_s), f"{rs[-1].median_s / rs[0].median_s:.1f}×"])
    if rows:
        lines += _md_table(["backend", "problem", "M", "measured", "unsupported", "fastest tile", "fastest",
                            "median tile", "slowest / fastest"], rows) + [""]
    reasons = Counter(_reason_class(u.reason) for u in d.unsupported)
    if reasons:
        lines += ["Why tiles were refused (count, reason):", ""]
        lines += [f"- {n} × {why}" for why, n in reasons.most_common(10)] + [""]
    return lines


def _reason_class(reason: str) -> str:
    """'g1-044:…: FlashInfer marks GEMM1 tactic 44 invalid for N=4096, K=6144' -> the sentence
    without the tactic's own label and number, so identical causes group together."""
    text = reason.split(": ", 1)[1] if reason.startswith(("g1-", "g2-")) and ": " in reason else reason
    return " ".join("N" if w.isdigit() else w for w in text.split())


def _number(v: object) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _telemetry_section(d: RunData, out: Path, rep: Report) -> list[str]:
    p = plots.telemetry(d.rows, out, d.gpu, _number(d.fingerprint.get("power_limit_w")),
                        _number(d.fingerprint.get("sm_clock_max_mhz")))
    if p is None:
        return []
    rep.images.append(p)
    lines = ["## Power and clocks", ""]
    _img(lines, p, out, "power and clock per case")
    thr = [r for r in d.rows if r.throttled]
    clocks = sorted({r.sm_clock_mhz for r in d.rows if r.sm_clock_mhz is not None})
    power = [r.power_w for r in d.rows if r.power_w is not None]
    lines.append(f"- {len(thr)} of {len(d.rows)} cases throttled"
                 + (": " + ", ".join(f"`{r.short}`" for r in thr[:10]) if thr else ""))
    if clocks:
        lines.append(f"- mean SM clock per case: {clocks[0]:g}…{clocks[-1]:g} MHz")
    if power:
        lines.append(f"- mean board power per case: {min(power):.0f}…{max(power):.0f} W")
    return lines + [""]
