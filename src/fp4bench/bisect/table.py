"""The bisect's report: the table of the steps tried (each release against the one it was measured
against, Δ and interval of its slowest benchmark, verdict) and the finding, ready to paste into
an upstream issue."""

from __future__ import annotations

from typing import Sequence

from fp4bench.bisect.search import CULPRIT, CUMULATIVE, Outcome
from fp4bench.bisect.step import Step


def _pct(x: float | None) -> str:
    return "?" if x is None else f"{x:+.1f}%"


def step_rows(steps: Sequence[Step]) -> list[str]:
    """One markdown row per step."""
    rows = ["| release | against | Δ | interval | verdict | benchmark |", "|---|---|---|---|---|---|"]
    seen = set()
    for s in steps:
        if (s.a, s.b) in seen:
            continue
        seen.add((s.a, s.b))
        worst = s.worst
        name, (d, lo, hi, _) = worst if worst else ("", (None, None, None, None))
        rows.append(f"| {s.b} | {s.a} | {_pct(d)} | [{_pct(lo)}, {_pct(hi)}] | {s.status} | {name} |")
    return rows


def render(package: str, outcome: Outcome, floor_pct: float, page: str | None = None) -> str:
    vs = outcome.versions
    lines = [f"bisect of {package} {vs[0]} (good) .. {vs[-1]} (bad): {len(vs)} releases, floor {floor_pct:g}%",
             f"releases: {', '.join(vs)}", "", "steps tried:", *step_rows(outcome.tried)]
    if outcome.broken:
        lines += ["", "not tested (could not be built):", *(f"  {v}: {why}" for v, why in outcome.broken.items())]
    lines.append("")
    if outcome.kind == CULPRIT:
        lines.append(f"culprit: {package} {outcome.culprit} (slower than {outcome.previous}, the release before it)")
        if page:
            lines.append(f"release page: {page}")
    elif outcome.kind == CUMULATIVE:
        lines += [f"cumulative, no single culprit: {outcome.reason}", "", "per step:", *step_rows(outcome.per_step)]
    else:
        lines.append(f"{outcome.kind}: {outcome.reason}")
    return "\n".join(lines)
