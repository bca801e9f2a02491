"""Which CUDA kernels a call launched, and how long each ran, via ``torch.profiler``.

Why: a timing change is only a kernel regression if the same kernels ran.
cuBLASLt heuristics after a library upgrade, an autotuner's silent fallback, an M-threshold
config switch or an extra per-call memset all change *which* kernels run; recording the set per
benchmark lets the gate call that a dispatch change instead of a slowdown. The device time of
the profiled kernels, split per replay (``device_time_per_group``), is the timer's sample.

Run these in separate, untimed passes: the profiler (CUPTI) adds overhead to every launch.
Without CUDA everything here returns empty results with a ``reason``, never an error.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import torch

#: Names longer than this are cut and suffixed with a hash of the whole name. CUTLASS template
#: instantiations run to thousands of characters; reports need a bounded, still-unique key.
MAX_KERNEL_NAME_LEN = 200

_WS = re.compile(r"\s+")

KERNEL, MEMSET, MEMCPY = "kernel", "memset", "memcpy"
# Kineto activity types (FunctionEvent.activity_type on recent torch) -> our kinds. Anything
# else on the device timeline (e.g. "gpu_user_annotation" ranges) is not device work.
_ACTIVITY_KINDS = {"kernel": KERNEL, "gpu_memset": MEMSET, "gpu_memcpy": MEMCPY}


def normalize_kernel_name(name: str, max_len: int = MAX_KERNEL_NAME_LEN) -> str:
    """A run-to-run comparable kernel name: whitespace collapsed, and names over ``max_len``
    truncated to a prefix plus ``~`` and 12 hex digits of the SHA-1 of the full collapsed name.

    Deliberately conservative: template arguments are kept (they *are* the kernel's identity:
    tile shape, stages, cluster), only formatting noise and length are touched.
    """
    if not isinstance(name, str):
        raise TypeError(f"kernel name must be str, got {type(name).__name__}")
    if max_len < 20:
        raise ValueError(f"max_len must be >= 20 to leave room for the hash suffix, got {max_len}")
    collapsed = _WS.sub(" ", name).strip()
    if len(collapsed) <= max_len:
        return collapsed
    digest = hashlib.sha1(collapsed.encode()).hexdigest()[:12]
    return f"{collapsed[: max_len - 13]}~{digest}"


def device_event_kind(event: Any) -> str | None:
    """``"kernel"``, ``"memset"``, ``"memcpy"`` for a profiler event that is GPU work, else None.

    Uses the Kineto activity type when the torch version exposes it; otherwise falls back to
    Kineto's fixed names for copies/sets (``"Memcpy ..."``, ``"Memset ..."``).
    """
    device_type = getattr(event, "device_type", None)
    if device_type != torch.autograd.DeviceType.CUDA:
        return None
    if getattr(event, "is_user_annotation", False):
        return None
    activity = getattr(event, "activity_type", None)
    if activity is not None:
        return _ACTIVITY_KINDS.get(activity)
    name = getattr(event, "name", "")
    if name.startswith("Memset"):
        return MEMSET
    if name.startswith("Memcpy"):
        return MEMCPY
    return KERNEL


def _duration_s(event: Any) -> float:
    tr = event.time_range  # microseconds
    return (tr.end - tr.start) * 1e-6


@dataclass(frozen=True)
class KernelCapture:
    """Device work seen in one profiled pass. Names are normalized, sorted, unique.

    ``counts`` is launches per name over all repeats (``counts[n] / repeats`` = per call): an
    extra memset per call is a dispatch change worth flagging. ``total_s`` is device time per
    name over all repeats. ``reason`` is set when capture was impossible or saw nothing.
    """

    repeats: int
    kernels: tuple[str, ...] = ()
    memsets: tuple[str, ...] = ()
    memcpys: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=dict)
    total_s: dict[str, float] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    reason: str | None = None

    @classmethod
    def from_events(cls, events: Iterable[Any], repeats: int, reason: str | None = None) -> "KernelCapture":
        """Reduce profiler events (``FunctionEvent``-like) to the device-work summary."""
        counts: Counter[str] = Counter()
        total: dict[str, float] = {}
        kinds: dict[str, str] = {}
        for event in events:
            kind = device_event_kind(event)
            if kind is None:
                continue
            name = normalize_kernel_name(event.name)
            counts[name] += 1
            total[name] = total.get(name, 0.0) + _duration_s(event)
            kinds[name] = kind
        if not counts and reason is None:
            reason = "no device activity recorded (fn launched no GPU work, or CUPTI is unavailable)"
        by_kind = {k: tuple(sorted(n for n, kk in kinds.items() if kk == k)) for k in (KERNEL, MEMSET, MEMCPY)}
        return cls(
            repeats=repeats,
            kernels=by_kind[KERNEL],
            memsets=by_kind[MEMSET],
            memcpys=by_kind[MEMCPY],
            counts=dict(counts),
            total_s=total,
            kinds=kinds,
            reason=reason,
        )

    def names(self, *, include_memset: bool = False, include_memcpy: bool = False) -> list[str]:
        """Sorted unique names of kernels, optionally with memsets/memcpys."""
        out = set(self.kernels)
        if include_memset:
            out.update(self.memsets)
        if include_memcpy:
            out.update(self.memcpys)
        return sorted(out)


def _check_repeats(repeats: int, warmup: int) -> None:
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")


def capture_kernels(fn: Callable[[], Any], *, repeats: int = 1, warmup: int = 1) -> KernelCapture:
    """Run ``fn`` ``warmup`` times untraced, then ``repeats`` times under ``torch.profiler``.

    Warm-up keeps JIT builds, autotuning and first-call setup kernels out of the set. Errors
    raised by ``fn`` propagate (a broken benchmark is not a profiler problem); profiler failures
    become ``reason``. Without CUDA the calls run unprofiled and the capture is empty: a CPU
    profiler sees only host-side events, and its start/stop log lines would reach the terminal.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    _check_repeats(repeats, warmup)
    from torch.profiler import ProfilerActivity, profile, supported_activities

    cuda = torch.cuda.is_available() and ProfilerActivity.CUDA in supported_activities()
    for _ in range(warmup):
        fn()
    if not cuda:
        for _ in range(repeats):
            fn()
        return KernelCapture(repeats=repeats, reason="CUDA (or CUDA profiling) not available")
    torch.cuda.synchronize()
    try:
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.start()
    except Exception as exc:
        return KernelCapture(repeats=repeats, reason=f"torch.profiler failed to start: {exc!r}")
    stop_error: Exception | None = None
    try:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()  # every kernel finished before CUPTI buffers are flushed
    finally:
        try:
            prof.stop()
        except Exception as exc:
            stop_error = exc
    if stop_error is not None:
        return KernelCapture(repeats=repeats, reason=f"torch.profiler failed to stop: {stop_error!r}")
    try:
        events = list(prof.events())
    except Exception as exc:
        return KernelCapture(repeats=repeats, reason=f"torch.profiler events unavailable: {exc!r}")
    return KernelCapture.from_events(events, repeats)


def kernel_names(
    fn: Callable[[], Any],
    *,
    repeats: int = 1,
    warmup: int = 1,
    include_memset: bool = False,
    include_memcpy: bool = False,
) -> list[str]:
    """Sorted unique (normalized) names of the CUDA kernels ``fn`` launched; [] without CUDA.

    Memsets/copies are left out unless asked; use :func:`capture_kernels` to see them separately.
    """
    cap = capture_kernels(fn, repeats=repeats, warmup=warmup)
    return cap.names(include_memset=include_memset, include_memcpy=include_memcpy)


def device_time_per_group(events: Iterable[Any], groups: int) -> list[float] | None:
    """Split the device work of ``groups`` identical back-to-back launches (e.g. graph replays)
    into per-group sums of kernel + memset + memcpy durations (seconds), in time order.

    This is GPU *busy* time: the gaps between kernels that a graph replay still has (~1-2 µs
    per node on an H200) are excluded, which is what the profiler calls a kernel's time.
    None when the work does not divide evenly into ``groups`` (then the caller falls back).
    """
    work = sorted((e for e in events if device_event_kind(e) is not None), key=lambda e: e.time_range.start)
    if groups < 1 or not work or len(work) % groups:
        return None
    per = len(work) // groups
    return [sum(_duration_s(e) for e in work[i * per:(i + 1) * per]) for i in range(groups)]
