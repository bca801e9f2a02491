"""What a library chose for a call, and the verdicts about that choice.

A *library-choice row* (``Backend.library_choice``) calls a library the way a serving engine does
(FlashInfer's ``mm_fp4(backend="auto")``, its autotuner's pick, ``cutlass_fused_moe`` without
``profile_ids``) and records what the library chose in ``extra_info["choice"]``::

    {"backend": "cudnn", "tactic": -1, "tuned": false, "compare_with": "flashinfer-cudnn"}

``backend``: the library's backend (or runner) it dispatched to; ``tactic``: the tactic it ran (an
int, or ``[gemm1, gemm2]`` for the fused MoE; -1: the library's default); ``tuned``: the autotuner
picked it; ``compare_with``: the fp4bench backend whose explicit rows time the same library path
with fixed tactics (None when there is none).

* **choice change** (``choice_change``): baseline and candidate chose differently (another backend
  or tactic); the row is still judged on its time (a slower choice row FAILs, whatever the reason),
  the change is named with both medians.
* **autotuner mis-pick** (``mispick``): within one run, a tuned choice whose median is slower than
  the fastest explicit row of ``compare_with`` on the same problem beyond the floor (FlashInfer
  #3537: a pick 2x slower than the default, frozen into CUDA graphs).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from fp4bench.gate.verdict import MISPICK, Status, Verdict


def choice_of(extra: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The recorded choice of a library-choice row, or None for any other row."""
    c = extra.get("choice")
    return c if isinstance(c, Mapping) else None


def choice_text(choice: Mapping[str, Any] | None) -> str:
    """``cudnn tactic -1`` / ``cutlass tactic [3, 41] (tuned)``: one short phrase."""
    if choice is None:
        return "-"
    tuned = " (tuned)" if choice.get("tuned") else ""
    return f"{choice.get('backend', '?')} tactic {choice.get('tactic', '?')}{tuned}"


def _seconds(s: float) -> str:
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.2f} us"


def _key(choice: Mapping[str, Any] | None) -> tuple[Any, Any] | None:
    if choice is None:
        return None
    t = choice.get("tactic")
    return choice.get("backend"), tuple(t) if isinstance(t, (list, tuple)) else t


def choice_change(base_extra: Mapping[str, Any], new_extra: Mapping[str, Any], base_s: float | None,
                  new_s: float | None) -> str | None:
    """'choice changed: ...' when both sides recorded a choice and they differ, with both medians."""
    old, new = choice_of(base_extra), choice_of(new_extra)
    if old is None or new is None or _key(old) == _key(new):
        return None
    times = ""
    if base_s is not None and new_s is not None:
        times = f" ({_seconds(base_s)} → {_seconds(new_s)})"
    return f"choice changed: {choice_text(old)} → {choice_text(new)}{times}"


def _median(samples: Any) -> float:
    seq = list(samples)
    flat = [x for w in seq for x in w] if seq and isinstance(seq[0], (list, tuple)) else seq
    return float(np.median(np.asarray(flat, dtype=float)))


def mispick(name: str, extra: Mapping[str, Any], median_s: float,
            measured: Mapping[str, tuple[Sequence[Any], Mapping[str, Any] | None]], floor: float) -> str | None:
    """Why ``name``'s tuned choice is an autotuner mis-pick, or None: its median is slower than the
    fastest row of ``compare_with`` on the same problem in ``measured`` by more than ``floor``."""
    choice = choice_of(extra)
    if choice is None or not choice.get("tuned") or not choice.get("compare_with"):
        return None
    rivals = {n: _median(s) for n, (s, x) in measured.items()
              if n != name and (x or {}).get("backend") == choice["compare_with"]
              and (x or {}).get("problem") == extra.get("problem")}
    if not rivals:
        return None
    best = min(rivals, key=rivals.__getitem__)
    if median_s <= rivals[best] * (1.0 + floor):
        return None
    tactic = (measured[best][1] or {}).get("tactic", "?")
    return (f"{MISPICK}: the autotuner chose {choice_text(choice)}, {_seconds(median_s)}; "
            f"{choice['compare_with']} tactic {tactic} of the same run takes {_seconds(rivals[best])} "
            f"({(median_s / rivals[best] - 1) * 100:+.0f}%, floor {floor * 100:.0f}%)")


def mispick_verdicts(current: Mapping[str, tuple[Sequence[Any], Mapping[str, Any] | None]],
                     floor: float) -> list[Verdict]:
    """A FAIL of kind ``MISPICK`` for every tuned choice row of ``current`` that ``mispick`` names."""
    out = []
    for name, (samples, extra) in current.items():
        x = extra or {}
        if choice_of(x) is None or not list(samples):
            continue
        why = mispick(name, x, _median(samples), current, floor)
        if why is not None:
            out.append(Verdict(name=name, status=Status.FAIL, kind=MISPICK, reason=why))
    return out
