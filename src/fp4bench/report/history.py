"""How the approvals of a baseline read: each benchmark's median across approvals as a table, and
as a plot (the change against the first approval, approvals marked, stack changes drawn as
vertical lines naming what changed)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from fp4bench.gate.history import Approved
from fp4bench.report.tables import format_seconds
from fp4bench.report.textfit import common_prefix, fit_table

Change = list[tuple[str, object, object]]


def describe(change: Change) -> str:
    return ", ".join(f"{k} {o}→{n}" for k, o, n in change)


def approvals_lines(history: Sequence[Approved], changes: Sequence[Change]) -> list[str]:
    """One line per approval: its number, commit, date, the run it came from, what changed."""
    out = []
    for i, (a, ch) in enumerate(zip(history, changes), 1):
        rec = a.baseline.approval
        notes = [f"from {rec.get('from', '?')}"]
        if rec.get("forced"):
            notes.append("forced")
        if (rec.get("drift") or {}).get("accepted"):
            notes.append(f"drift accepted ({rec['drift'].get('cumulative_pct', 0):+.1f}% since {rec['drift'].get('anchor')})")
        if ch:
            notes.append(f"stack: {describe(ch)}")
        out.append(f"#{i} {a.label}: " + "; ".join(notes))
    return out


def medians_table(history: Sequence[Approved], medians: dict[str, list[float | None]]) -> list[str]:
    """Each benchmark's median at each approval, and its change from the first approval that has it
    to the last; lines of at most 160 characters (``textfit``), the names' shared ``...::`` prefix
    said once above the table."""
    prefix = common_prefix(list(medians))
    head = ["benchmark", *(f"#{i}" for i in range(1, len(history) + 1)), "Δ first→last"]
    rows = []
    for name, ms in medians.items():
        known = [m for m in ms if m is not None]
        delta = f"{(known[-1] / known[0] - 1) * 100:+.1f}%" if len(known) > 1 else "-"
        rows.append([name[len(prefix):], *("-" if m is None else format_seconds(m) for m in ms), delta])
    lines = fit_table(head, rows, [False] + [True] * (len(head) - 1), wrap=0)
    return ([f"benchmarks: {prefix}..."] if prefix else []) + lines


def history_plot(history: Sequence[Approved], medians: dict[str, list[float | None]], changes: Sequence[Change],
                 out: Path, title: str) -> Path:
    """PNG: each benchmark's change against its first approval (%), one marker per approval, a
    dashed vertical line before each approval whose stack changed, labelled with the change, and a
    dotted red one at each approval that accepted drift."""
    from fp4bench.report.plots import _save, plt

    x = list(range(1, len(history) + 1))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(x) + 3), 4.8))
    for name, ms in medians.items():
        first = next((m for m in ms if m is not None), None)
        pts = [(i, (m / first - 1) * 100) for i, m in zip(x, ms) if m is not None]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", lw=1, ms=4, alpha=0.7,
                label=name.split("::")[-1] if len(medians) <= 12 else None)
    for i, ch in zip(x, changes):
        if ch:
            ax.axvline(i - 0.5, color="grey", ls="--", lw=1)
            ax.annotate(describe(ch), (i - 0.5, 1), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        va="top", ha="right", color="dimgrey")
    for i, a in zip(x, history):
        if (a.baseline.approval.get("drift") or {}).get("accepted"):
            ax.axvline(i, color="#d62728", ls=":", lw=1)
            ax.annotate("drift accepted", (i, 0), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        va="bottom", ha="right", color="#d62728")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xticks(x, [f"#{i}\n{a.label}" for i, a in zip(x, history)], fontsize=7)
    ax.set_xlabel("approval (commit, date)")
    ax.set_ylabel("median vs first approval (%)")
    ax.set_title(title, fontsize=9)
    if len(medians) <= 12:
        ax.legend(fontsize=6, loc="upper left")
    return _save(fig, out)
