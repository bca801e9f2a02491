"""Which of the visible GPUs a command uses: ``--gpus all`` or a list of indices / UUIDs.

An index is a position among the visible GPUs (``devices.visible_gpus``: CUDA's numbering
under the caller's ``CUDA_VISIBLE_DEVICES``); a UUID may be given whole or by a unique prefix,
as CUDA accepts it. Every bad value is a ``ValueError`` of one line that names it and lists
the visible GPUs, so a front end reports it as a usage error before any worker starts.
"""

from __future__ import annotations

from fp4bench.gpus.devices import Gpu


def describe(gpus: list[Gpu]) -> str:
    """``0 GPU-aa11, 1 GPU-bb22`` (or ``none``): the visible GPUs, for an error message."""
    return ", ".join(f"{g.index} {g.uuid}" for g in gpus) or "none"


def _one(entry: str, visible: list[Gpu], option: str) -> Gpu:
    if entry.lstrip("-").isdigit():
        i = int(entry)
        if not 0 <= i < len(visible):
            raise ValueError(f"{option}: GPU {entry} is not visible ({len(visible)} visible: {describe(visible)})")
        return visible[i]
    hit = [g for g in visible if g.uuid == entry] or [g for g in visible if g.uuid.startswith(entry)]
    if len(hit) != 1:
        what = "is not visible" if not hit else f"matches {len(hit)} GPUs"
        raise ValueError(f"{option}: GPU {entry!r} {what} (visible: {describe(visible)})")
    return hit[0]


def select_gpus(spec: str, visible: list[Gpu], option: str = "--gpus") -> list[Gpu]:
    """The GPUs ``spec`` names, in the order given (``all``: every visible one, in order)."""
    text = (spec or "").strip()
    if not visible:
        raise ValueError(f"{option} {text}: no GPU is visible (NVML lists none, or CUDA_VISIBLE_DEVICES hides them)")
    if text == "all":
        return list(visible)
    entries = [e.strip() for e in text.split(",")]
    if not text or any(not e for e in entries):
        raise ValueError(f"{option}: expected all or comma-separated GPU indices / UUIDs, got {spec!r}")
    if len(entries) > len(visible):
        raise ValueError(f"{option} {text}: asks for {len(entries)} GPUs, {len(visible)} are visible "
                         f"({describe(visible)})")
    chosen: list[Gpu] = []
    for e in entries:
        g = _one(e, visible, option)
        if g in chosen:
            raise ValueError(f"{option} {text}: names GPU {g.index} ({g.uuid}) twice")
        chosen.append(g)
    return chosen


def one_model(gpus: list[Gpu], option: str = "--gpus") -> None:
    """Refuse GPUs of different models: their sweeps, timings and baselines differ."""
    names = sorted({g.name for g in gpus})
    if len(names) > 1:
        raise ValueError(f"{option}: the GPUs are of different models ({', '.join(names)}); choose GPUs of one "
                         "model")
