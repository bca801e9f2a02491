"""Cumulative drift: a candidate compared with the last approved baseline and with the anchor.

Each upgrade is gated against the baseline before it, so five steps of +1.5 % each pass while the
runner ends 7.7 % slower. Before a candidate becomes the approved baseline, ``check_drift``
compares each benchmark's time (the median of its window medians, ``gate.history.median_s``) with
the last approved file (the step) and with the **anchor** (the cumulative change), and refuses
when a benchmark's cumulative slowdown is beyond the floor, naming both numbers.

The anchor is an approval in git's history of the approved file (``gate.history``) on the same
GPU model and unit (``Fingerprint.same_model``; the GPU UUID where both recorded one), timed the
same way (``gate.compatibility.check_same_measurement``): the first such approval, across stack
changes, or the latest one that accepted drift (``--accept-drift`` records the decision in the
approval record: that runner's new normal), or the revision the user pins (``--anchor``). Without
a git history the last approved file is the anchor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fp4bench.gate.baseline import Baseline, BaselineError, load_baseline
from fp4bench.gate.compatibility import IncompatibleBaseline, check_same_measurement
from fp4bench.gate.history import Approved, HistoryError, approvals, at_revision, median_s
from fp4bench.gate.record import INVALID_FLAGS

#: the approval record's key for the drift decision
DRIFT = "drift"


@dataclass(frozen=True)
class DriftSettings:
    """``floor``: the largest cumulative slowdown (a fraction) a candidate may carry; ``anchor``: a
    git revision pinning the anchor; ``accept``: approve beyond the floor and record it."""

    floor: float = 0.05
    anchor: str | None = None
    accept: bool = False


@dataclass(frozen=True)
class Change:
    name: str
    step_pct: float | None
    cumulative_pct: float


def _comparable(a: Baseline, cand: Baseline) -> bool:
    fa, fc = a.fingerprint, cand.fingerprint
    if not fa.same_model(fc) or (fa.gpu_uuid and fc.gpu_uuid and fa.gpu_uuid != fc.gpu_uuid):
        return False
    try:
        check_same_measurement(a.sweep, cand.sweep)
    except IncompatibleBaseline:
        return False
    return True


def anchor_of(dest: Path, cand: Baseline, pinned: str | None) -> tuple[Baseline, str]:
    """The anchor approval and its label; without git history the approved file itself."""
    if pinned:
        try:
            a = at_revision(dest, pinned)
        except HistoryError as exc:
            raise BaselineError(f"--anchor {pinned}: {exc}") from None
        return a.baseline, f"{a.label} (--anchor {pinned})"
    try:
        history = [a for a in approvals(dest) if _comparable(a.baseline, cand)]
    except HistoryError:
        history = []
    if not history:
        return load_baseline(dest), f"{dest} (no git history of it: the last approval)"
    accepted = [a for a in history if (a.baseline.approval.get(DRIFT) or {}).get("accepted")]
    a: Approved = accepted[-1] if accepted else history[0]
    why = "the last approval that accepted drift" if accepted else "the first approval on this GPU model/unit"
    return a.baseline, f"{a.label} ({why})"


def _usable(b: Baseline) -> dict[str, float]:
    return {n: median_s(r) for n, r in b.benchmarks.items() if not any(r.extra_info.get(k) for k in INVALID_FLAGS)}


def changes(cand: Baseline, last: Baseline, anchor: Baseline) -> list[Change]:
    """Per benchmark of the candidate that the anchor has: its step and cumulative change (%)."""
    c, prev, a = _usable(cand), _usable(last), _usable(anchor)
    return [Change(n, (c[n] / prev[n] - 1) * 100 if n in prev else None, (c[n] / a[n] - 1) * 100)
            for n in sorted(c) if n in a]


def check_drift(cand: Baseline, dest: str | os.PathLike[str], settings: DriftSettings) -> dict[str, Any]:
    """What the approval record gets (``{}``, or ``{"drift": ...}`` when drift is accepted);
    ``BaselineError`` when a benchmark's cumulative slowdown is beyond the floor and not accepted."""
    dest = Path(dest)
    if not dest.exists():
        return {}
    last = load_baseline(dest)
    anchor, label = anchor_of(dest, cand, settings.anchor)
    floor = settings.floor * 100
    beyond = sorted((ch for ch in changes(cand, last, anchor) if ch.cumulative_pct > floor),
                    key=lambda ch: -ch.cumulative_pct)
    if not beyond:
        return {}
    worst = beyond[0]
    step = "n/a" if worst.step_pct is None else f"{worst.step_pct:+.1f}%"
    alone = worst.step_pct is not None and worst.step_pct > floor
    if not settings.accept:
        lines = "\n  ".join(f"{ch.name}: {ch.cumulative_pct:+.1f}% since the anchor, "
                            f"{'n/a' if ch.step_pct is None else f'{ch.step_pct:+.1f}%'} against the last approved"
                            for ch in beyond[:10])
        raise BaselineError(
            f"{cand.source}: {len(beyond)} benchmark{'s' if len(beyond) > 1 else ''} drifted beyond the {floor:g}% "
            f"floor since the anchor {label}: {worst.name} is {worst.cumulative_pct:+.1f}% since the anchor, {step} "
            f"against the last approved {dest}" + (" (that step alone is beyond the floor too)" if alone else
                                                   " (that step alone is within the floor: the slowdown built up)")
            + f"; --accept-drift to approve and record it, --anchor REV to measure from another approval:\n  {lines}")
    return {DRIFT: {"accepted": True, "anchor": label, "floor_pct": floor, "benchmarks": len(beyond),
                    "worst": worst.name, "cumulative_pct": round(worst.cumulative_pct, 3),
                    "step_pct": None if worst.step_pct is None else round(worst.step_pct, 3)}}
