"""PNG plots of a run (matplotlib, Agg backend: no display needed on a CI runner).

Each function takes the rows of ``data.py`` and writes one file, returning its path (or None
when the run holds nothing to plot, e.g. no tactic sweep for the heatmap).
"""

from __future__ import annotations

import io
import math
from collections import defaultdict
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from fp4bench.gate.compare import CompareResult  # noqa: E402
from fp4bench.gate.verdict import Status  # noqa: E402
from fp4bench.measure.peaks import GpuPeaks, shares_of_peak  # noqa: E402
from fp4bench.report.data import (CaseRow, UnsupportedTile, best_per_problem,  # noqa: E402
                                     split_tactic)

DPI = 90
_STATUS_COLOR = {Status.FAIL: "#d62728", Status.MISSING: "#9467bd", Status.AMBIGUOUS: "#ff7f0e",
                 Status.INVALID: "#8c564b", Status.NEW: "#17becf", Status.PASS: "#2ca02c"}
_KIND_MARKER = {"dense": "o", "grouped": "s", "moe": "D"}


def _backend_colors(backends: Sequence[str]) -> dict[str, str]:
    cmap = plt.get_cmap("tab10")
    return {b: cmap(i % 10) for i, b in enumerate(sorted(set(backends)))}


def _save(fig, path: Path) -> Path:
    """PNG with a 256-colour palette: flat plot colours survive it and the file is ~3× smaller,
    which matters for reports committed to the repository or uploaded per CI run. Rendered in
    memory and written through ``fp4bench.outputs.write_atomic`` (the one write path)."""
    from PIL import Image  # a matplotlib dependency

    from fp4bench.outputs import write_atomic

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    buf.seek(0)
    png = io.BytesIO()
    Image.open(buf).convert("RGB").quantize(256).save(png, format="PNG", optimize=True)
    return write_atomic(path, png.getvalue())


def _log2_m_axis(ax, ms: Sequence[int]) -> None:
    ax.set_xscale("log", base=2)
    ticks = sorted(set(ms))
    if len(ticks) <= 16:
        ax.set_xticks(ticks, [str(t) for t in ticks])
    if len(ticks) == 1:  # a single batch: centre it instead of a degenerate axis
        ax.set_xlim(ticks[0] / 2, ticks[0] * 2)


def throughput_vs_m(rows: Sequence[CaseRow], out: Path, gpu: str, peaks: GpuPeaks | None = None) -> Path | None:
    """TFLOP/s (top) and TB/s (bottom) against M, one column per problem kind, one line per
    backend × model × role; for tactic-swept backends the fastest tactic at each M. A kind
    measured at fewer than three M values is drawn as bars (a line through one point says nothing)."""
    best = [r for r in best_per_problem(rows).values() if r.m is not None and r.tflops is not None]
    if not best:
        return None
    kinds = [k for k in ("dense", "grouped", "moe") if any(r.kind == k for r in best)]
    kinds += sorted({r.kind for r in best} - set(kinds))
    colors = _backend_colors([r.backend for r in best])
    n_bars = max([len([r for r in best if r.kind == k]) for k in kinds])
    height = max(7.5, 2 * (0.28 * n_bars + 1.2))
    fig, axes = plt.subplots(2, len(kinds), figsize=(5.6 * len(kinds), height), squeeze=False)
    for j, kind in enumerate(kinds):
        mine = [r for r in best if r.kind == kind]
        if len({r.m for r in mine}) >= 3:
            _lines_vs_m(axes[:, j], mine, colors, peaks)
        else:
            _bars(axes[:, j], mine, colors, peaks)
        axes[0, j].set_title(f"{kind}: TFLOP/s" + (" vs M" if len({r.m for r in mine}) >= 3 else ""))
        lines = len({r.m for r in mine}) >= 3
        axes[1, j].set_title(f"{kind}: TB/s" + (" vs M (dashed: HBM peak)" if lines else " (% of HBM peak)"))
    fig.suptitle(f"Throughput on {gpu}: fastest tactic per backend and problem, GPU time per call")
    fig.tight_layout()
    return _save(fig, out / "throughput_vs_m.png")


def _plain_log(ax, axis: str = "y") -> None:
    """Log axis with plain numbers (0.2, 5, 100) instead of 2×10^1 labels."""
    fmt = FuncFormatter(lambda v, _: f"{v:g}")
    a = ax.yaxis if axis == "y" else ax.xaxis
    a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    a.set_major_formatter(fmt)
    a.set_minor_formatter(NullFormatter())


def _lines_vs_m(axes, mine: Sequence[CaseRow], colors: dict, peaks: GpuPeaks | None) -> None:
    styles = ["-", "--", ":", "-."]
    series: dict[str, list[CaseRow]] = defaultdict(list)
    for r in mine:
        series[r.series].append(r)
    roles = sorted({(r.model, r.role) for r in mine})
    for name, pts in sorted(series.items()):
        pts.sort(key=lambda r: r.m)
        style = styles[roles.index((pts[0].model, pts[0].role)) % len(styles)]
        for ax, attr in zip(axes, ("tflops", "tbs")):
            ax.plot([r.m for r in pts], [getattr(r, attr) for r in pts], style, marker=_KIND_MARKER.get(pts[0].kind, "o"),
                    ms=4, color=colors[pts[0].backend], label=name)
    for ax, unit in zip(axes, ("TFLOP/s", "TB/s")):
        _log2_m_axis(ax, [r.m for r in mine])
        ax.set_yscale("log")
        _plain_log(ax)
        ax.grid(True, which="both", alpha=0.3)
        ax.set_ylabel(unit)
        ax.set_xlabel("M (tokens)")
    if peaks is not None:
        axes[1].axhline(peaks.bandwidth_tbs, color="0.3", ls="--", lw=1)
        axes[1].text(axes[1].get_xlim()[0], peaks.bandwidth_tbs, f" HBM peak {peaks.bandwidth_tbs:g} TB/s",
                     va="bottom", fontsize=7, color="0.3")
    axes[0].legend(fontsize=7, loc="best")


def _bars(axes, mine: Sequence[CaseRow], colors: dict, peaks: GpuPeaks | None) -> None:
    rs = sorted(mine, key=lambda r: (r.model, r.role, r.m, r.backend), reverse=True)
    y = np.arange(len(rs))
    labels = [f"{r.backend} · {r.model} {r.role} M={r.m}" for r in rs]
    for ax, attr, unit in zip(axes, ("tflops", "tbs"), ("TFLOP/s", "TB/s")):
        vals = [getattr(r, attr) or 0.0 for r in rs]
        ax.barh(y, vals, color=[colors[r.backend] for r in rs])
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_xscale("log")
        _plain_log(ax, "x")
        ax.set_xlabel(unit + " (log)")
        ax.grid(True, axis="x", which="both", alpha=0.3)
        for yi, v, r in zip(y, vals, rs):
            pct = r.pct_bandwidth if attr == "tbs" else None
            text = f" {v:.3g}" + (f" ({pct:.0f}%)" if pct is not None else "")
            ax.text(v, yi, text, va="center", fontsize=6)
        lo, hi = min(v for v in vals if v > 0), max(vals)
        ax.set_xlim(lo / 2, hi * 6)
        if attr == "tbs" and peaks is not None:
            ax.axvline(peaks.bandwidth_tbs, color="0.3", ls="--", lw=1)
            ax.set_xlim(lo / 2, max(hi, peaks.bandwidth_tbs) * 6)


def roofline(rows: Sequence[CaseRow], peaks: GpuPeaks | None, out: Path, gpu: str) -> Path | None:
    """Achieved TFLOP/s against arithmetic intensity under the GPU's roofs; each backend's
    fastest case per problem is labelled with its % of the roof that bounds it."""
    pts = [r for r in rows if r.intensity and r.tflops]
    if not pts:
        return None
    fig, ax = plt.subplots(figsize=(10, 6.5))
    colors = _backend_colors([r.backend for r in pts])
    xs = np.array([r.intensity for r in pts])
    lo, hi = max(xs.min() / 4, 0.1), max(xs.max() * 4, 10.0)
    if peaks is not None:
        grid = np.geomspace(lo, max(hi, 4 * (peaks.ridge_point("bf16") or 1)), 200)
        for fmt, ls in (("nvfp4", "-"), ("fp8", "--"), ("bf16", ":")):
            peak = peaks.peak_tflops(fmt)
            if peak is None:
                continue
            roof = np.minimum(peak, grid * peaks.bandwidth_tbs)
            ax.plot(grid, roof, ls, color="0.3", lw=1.2, label=f"{fmt} roof {peak:g} TFLOP/s, ridge "
                    f"{peaks.ridge_point(fmt):.0f} FLOP/B")
        ax.text(lo * 1.2, lo * 1.2 * peaks.bandwidth_tbs * 1.4, f"HBM {peaks.bandwidth_tbs:g} TB/s",
                fontsize=8, color="0.3")
    tactic_rows = [r for r in pts if r.tactic != "default"]
    if tactic_rows:  # every tactic, faint: the spread a tile choice makes
        ax.scatter([r.intensity for r in tactic_rows], [r.tflops for r in tactic_rows], s=6, alpha=0.25,
                   color=[colors[r.backend] for r in tactic_rows], label="every tactic measured")
    best = list(best_per_problem(pts).values())
    seen_backends: set[str] = set()
    for r in best:
        ax.scatter([r.intensity], [r.tflops], s=45, marker=_KIND_MARKER.get(r.kind, "o"), color=colors[r.backend],
                   edgecolor="k", linewidth=0.5, zorder=3,
                   label=r.backend if r.backend not in seen_backends else None)
        seen_backends.add(r.backend)
    # one label per backend and kind (its problems cluster at one intensity): the % range
    clusters: dict[tuple[str, str], list[CaseRow]] = defaultdict(list)
    for r in best:
        clusters[(r.backend, r.kind)].append(r)
    for (backend, kind), rs in sorted(clusters.items()):
        pcts = [p for p in (_pct_of_roof(r, peaks) for r in rs) if p is not None]
        if not pcts:
            continue
        top = max(rs, key=lambda r: r.tflops)
        rng = f"{min(pcts):.0f}%" if round(min(pcts)) == round(max(pcts)) else f"{min(pcts):.0f}–{max(pcts):.0f}%"
        ax.annotate(f"{backend} {kind}: {rng}", (top.intensity, top.tflops), textcoords="offset points",
                    xytext=(7, 4), fontsize=7, color=colors[backend])
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte moved)")
    ax.set_ylabel("achieved TFLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    src = "no peak table entry for this GPU" if peaks is None else f"{peaks.name} spec-sheet peaks"
    ax.set_title(f"Roofline on {gpu} ({src})\nlarge markers: fastest tactic per problem, labelled with % of the "
                 "roof that bounds it", fontsize=10)
    return _save(fig, out / "roofline.png")


def _pct_of_roof(r: CaseRow, peaks: GpuPeaks | None) -> float | None:
    """Achieved / attainable at this intensity: min(compute peak, intensity × bandwidth)."""
    if r.intensity is None:
        return None
    return shares_of_peak(r.tflops, r.tbs, peaks, r.fmt).pct_roof


def pct_of_roof(r: CaseRow, peaks: GpuPeaks | None) -> float | None:
    return _pct_of_roof(r, peaks)


def tactic_heatmaps(rows: Sequence[CaseRow], unsupported: Sequence[UnsupportedTile], out: Path) -> list[Path]:
    """Per tactic-swept backend: tile (rows) × problem and GEMM stage at each M (columns); colour =
    time / fastest tile of the column (log scale), grey × = the library refused the tile."""
    paths = []
    for backend in sorted({r.backend for r in rows}):
        mine = [r for r in rows if r.backend == backend]
        bad = [u for u in unsupported if u.backend == backend]
        if len({r.tactic for r in mine} | {u.tactic for u in bad}) < 3:
            continue
        m_of = {r.problem: r.m for r in mine}
        label_of = {r.problem: r.label for r in mine}
        cols: dict[tuple, str] = {}
        cells: dict[tuple[str, tuple], float] = {}
        refused: set[tuple[str, tuple]] = set()
        for problem, tactic, value in [(r.problem, r.tactic, r.median_s) for r in mine] + \
                                      [(u.problem, u.tactic, None) for u in bad]:
            stage, tile = split_tactic(tactic)
            if tile == "default":
                continue
            m = m_of.get(problem) or 0
            col = (m, problem, stage)
            cols[col] = f"{label_of.get(problem, problem)}\nM={m}" + (f" {stage}" if stage else "")
            if value is None:
                refused.add((tile, col))
            else:
                cells[(tile, col)] = value
        tiles = sorted({t for t, _ in cells} | {t for t, _ in refused})
        order = sorted(cols)
        if not tiles or not order:
            continue
        grid = np.full((len(tiles), len(order)), np.nan)
        for (tile, col), v in cells.items():
            grid[tiles.index(tile), order.index(col)] = v
        with np.errstate(invalid="ignore"):
            rel = grid / np.nanmin(np.where(np.isnan(grid), np.inf, grid), axis=0, keepdims=True)
        h = max(4.0, 0.13 * len(tiles) + 2.0)
        w = max(6.0, 1.25 * len(order) + 4.5)
        fig, ax = plt.subplots(figsize=(w, h))
        finite = rel[np.isfinite(rel)]
        vmax = max(2.0, float(np.nanmax(finite))) if finite.size else 2.0
        im = ax.imshow(np.ma.masked_invalid(rel), aspect="auto", cmap="viridis_r",
                       norm=LogNorm(vmin=1.0, vmax=vmax), interpolation="nearest")
        for (tile, col) in refused:
            i, j = tiles.index(tile), order.index(col)
            ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="0.6", hatch="xx",
                                       lw=0.3))
        small = len(tiles) * len(order) <= 1200
        for i in range(len(tiles)):
            for j in range(len(order)):
                v = rel[i, j]
                if not math.isfinite(v):
                    continue
                if v == 1.0:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", lw=1.5))
                if small:
                    ax.text(j, i, f"{v:.2f}" if v < 10 else f"{v:.0f}", ha="center", va="center",
                            fontsize=5 if len(tiles) > 30 else 8,
                            color="white" if v > math.sqrt(vmax) else "black")
        ax.set_yticks(range(len(tiles)), tiles, fontsize=6)
        ax.set_xticks(range(len(order)), [cols[c] for c in order], fontsize=7)
        ax.xaxis.tick_top()
        cb = fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
        cb.set_label("time / fastest tile of the column (1 = fastest, red box)")
        cb.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}×"))
        cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}×" if vmax < 10 else ""))
        ax.set_title(f"{backend}: tactic × M  —  grey × = unsupported ({len(refused)}), blank = not measured",
                     fontsize=9, pad=40)
        paths.append(_save(fig, out / f"tactics_{_slug(backend)}.png"))
    return paths


def telemetry(rows: Sequence[CaseRow], out: Path, gpu: str, power_limit_w: float | None = None,
              max_clock_mhz: float | None = None) -> Path | None:
    """Board power and SM clock of every case, one row per backend × problem (each dot a case,
    i.e. a tactic; the line spans its min…max over the timing window); throttled cases in red."""
    rs = [r for r in rows if r.power_w is not None or r.sm_clock_mhz is not None]
    if not rs:
        return None
    groups: dict[str, list[CaseRow]] = defaultdict(list)
    for r in sorted(rs, key=lambda r: (r.backend, r.kind, r.model, r.role, r.m or 0)):
        groups[f"{r.backend} · {r.label} M={r.m}"].append(r)
    names = list(groups)[::-1]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(13, max(3.5, 0.3 * len(names) + 1.6)), sharey=True)
    rng = np.random.default_rng(0)  # fixed jitter: the same file gives the same picture
    for yi, name in enumerate(names):
        g = groups[name]
        jitter = rng.uniform(-0.25, 0.25, len(g)) if len(g) > 1 else np.zeros(1)
        col = ["#d62728" if r.throttled else "#1f77b4" for r in g]
        for ax, mean, lo, hi in ((a1, "power_w", None, "power_max_w"),
                                 (a2, "sm_clock_mhz", "sm_clock_min_mhz", "sm_clock_max_mhz")):
            xs = [getattr(r, mean) for r in g]
            ok = [i for i, v in enumerate(xs) if v is not None]
            for i in ok:
                a, b = getattr(g[i], lo) if lo else xs[i], getattr(g[i], hi)
                if a is not None and b is not None and b > a:
                    ax.plot([a, b], [yi + jitter[i]] * 2, color="0.75", lw=0.7)
            ax.scatter([xs[i] for i in ok], [yi + jitter[i] for i in ok], s=10, c=[col[i] for i in ok], zorder=3)
    a1.set_yticks(range(len(names)), names, fontsize=7)
    a1.set_xlabel("board power, W (dot: mean; line: to the max)")
    a2.set_xlabel("SM clock, MHz (dot: mean; line: min…max)")
    if power_limit_w:
        a1.axvline(power_limit_w, color="#d62728", ls="--", lw=1)
        a1.text(power_limit_w, len(names) - 0.5, f"limit {power_limit_w:g} W ", ha="right", va="top", fontsize=7,
                color="#d62728")
    clocks = [v for r in rs for v in (r.sm_clock_min_mhz, r.sm_clock_max_mhz, r.sm_clock_mhz) if v is not None]
    if max_clock_mhz:
        a2.axvline(max_clock_mhz, color="#d62728", ls="--", lw=1)
        a2.text(max_clock_mhz, len(names) - 0.5, f"max {max_clock_mhz:g} MHz ", ha="right", va="top", fontsize=7,
                color="#d62728")
        clocks.append(max_clock_mhz)
    if clocks:
        lo, hi = min(clocks), max(clocks)
        pad = max(50.0, 0.1 * (hi - lo))
        a2.set_xlim(lo - pad, hi + pad)
    for ax in (a1, a2):
        ax.grid(True, axis="x", alpha=0.3)
        ax.set_ylim(-0.6, len(names) - 0.4)
    n_thr = sum(r.throttled for r in rs)
    fig.suptitle(f"Power and clock per case on {gpu}: {len(rs)} cases, {n_thr} throttled (red)", fontsize=10)
    fig.tight_layout()
    return _save(fig, out / "power_clock.png")


def deltas(result: CompareResult, out: Path, top: int = 40) -> Path | None:
    """Δ% of the median, baseline → now: the distribution over every timed benchmark (left) and
    the ``top`` largest |Δ| with their verdict colour and the gate's floor (right)."""
    vs = [v for v in result.verdicts if v.kind == "timing" and v.pct is not None and math.isfinite(v.pct)]
    if not vs:
        return None
    floor = result.policy.floor * 100
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(14, max(4.5, 0.2 * min(top, len(vs)) + 1.5)),
                                 gridspec_kw={"width_ratios": [1, 1.6]})
    pct = np.array([v.pct for v in vs])
    a1.hist(pct, bins=min(60, max(10, len(vs) // 3)), color="#1f77b4")
    for f in (-floor, floor):
        a1.axvline(f, color="#d62728", ls="--", lw=1)
    a1.set_xlabel("Δ median, % (+ = slower)")
    a1.set_ylabel("benchmarks")
    a1.set_title(f"{len(vs)} timed benchmarks; median |Δ| {np.median(np.abs(pct)):.2f}%, "
                 f"floor ±{floor:g}% dashed", fontsize=9)
    worst = sorted(vs, key=lambda v: -abs(v.pct))[:top][::-1]
    y = np.arange(len(worst))
    a2.barh(y, [v.pct for v in worst], color=[_STATUS_COLOR.get(v.status, "0.5") for v in worst])
    a2.set_yticks(y, [_short_name(v.name) for v in worst], fontsize=6)
    a2.axvline(floor, color="#d62728", ls="--", lw=1)
    a2.axvline(0, color="k", lw=0.6)
    a2.set_xlabel("Δ median, %")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for s, c in _STATUS_COLOR.items()]
    a2.legend(handles, [s.value for s in _STATUS_COLOR], fontsize=7, loc="lower right")
    a2.set_title(f"largest |Δ| ({len(worst)} of {len(vs)}), coloured by verdict", fontsize=9)
    fig.tight_layout()
    return _save(fig, out / "delta_vs_baseline.png")


def _short_name(fullname: str) -> str:
    name = fullname.split("::")[-1]
    return name if len(name) <= 90 else name[:60] + "…" + name[-29:]


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in s).strip("-")
