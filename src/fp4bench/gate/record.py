"""One benchmark's measurement as the gate reads it: its raw samples, window by window, and the
``extra_info`` recorded with them.

A **window** is one independent measurement of a benchmark (its own prepared operands, graph
capture and cold-L2 copies; ``run/windows.py``); ``BenchmarkRecord.samples`` is every sample of
every window in order. Samples are seconds per call and must be possible for one call
(``check_samples``).

``extra_info`` keys the verdict reads (``GATE_KEYS``; written by the measure layer):
``throttled`` (bool), ``clock_anomaly`` (bool or text), ``invalid`` (text: any other reason the
sample set is void), ``kernels`` (list of kernel names; a different *set* of names is a dispatch
change), ``sm_clock_mhz`` (number or per-sample list), ``throttle_reasons`` (text or list of NVML
reason names), and what the case is (``backend``, ``problem``, ``tactic``, ``explicit_tactic``,
``tactic_config``), and what a library-choice row's library chose (``choice``, ``gate.picks``).
``noise_floor`` is read only to say that it no longer applies.
``check_extra`` holds those values to the types the readers below compute with.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

#: the shortest time one call of a GPU kernel can take, in seconds. CUDA events, which time every
#: GPU sample here, resolve "around 0.5 microseconds" (CUDA Runtime API, cudaEventElapsedTime),
#: and a kernel's launch and drain on the GPU take about a microsecond even inside a CUDA graph;
#: a CPU call pays torch's dispatch (microseconds). 1e-7 s is five times below the event
#: resolution: no real call is refused, while 1e-30 s or a denormal (a broken timer or a corrupt
#: file, which would make any slowdown read as a speed-up) is.
MIN_SAMPLE_S = 1e-7
#: the longest one call can take, in seconds: the largest GEMM of the model catalog (~2.5e12
#: FLOP) takes milliseconds on a GPU and the per-case time budget is seconds; a minute per call is
#: not a timing (a unit error or a corrupt file, e.g. 1e6 s)
MAX_SAMPLE_S = 60.0
#: ``extra_info`` keys the verdict reads (tests/gate/test_slim_baseline.py checks the list against the
#: gate's modules)
GATE_KEYS = ("backend", "problem", "tactic", "explicit_tactic", "tactic_config", "kernels", "sm_clock_mhz",
             "throttle_reasons", "throttled", "clock_anomaly", "invalid", "noise_floor", "choice")
#: ``extra_info`` flags that make a timing INVALID (not judged)
INVALID_FLAGS = ("clock_anomaly", "invalid")


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a result file: raw samples (seconds) and what was recorded with them."""

    fullname: str
    name: str
    samples: tuple[float, ...]
    extra_info: dict[str, Any] = field(default_factory=dict)
    #: the samples window by window (independent measurements); ``()`` means one window
    windows: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.windows:
            object.__setattr__(self, "windows", (tuple(self.samples),))

    @property
    def median(self) -> float:
        """The headline median over every window of the record (``headline_median``)."""
        return headline_median(self.windows)

    @property
    def window_medians(self) -> tuple[float, ...]:
        return window_medians(self.windows)


def with_windows(fullname: str, name: str, windows: Any, extra_info: dict[str, Any]) -> BenchmarkRecord:
    """A record from its windows (each a list of samples); ``samples`` is all of them in order."""
    ws = tuple(tuple(w) for w in windows)
    return BenchmarkRecord(fullname, name, tuple(x for w in ws for x in w), extra_info, ws)


def windows_of(samples: Any) -> tuple[tuple[float, ...], ...]:
    """The windows of one side: a sequence of sample sequences, or one flat sample sequence
    (one window)."""
    seq = list(samples)
    if seq and isinstance(seq[0], (list, tuple, np.ndarray)):
        return tuple(tuple(w) for w in seq)
    return (tuple(seq),)


def window_medians(samples: Any) -> tuple[float, ...]:
    """The median of each window (``samples``: windows, or one flat sample list)."""
    return tuple(float(np.median(np.asarray(w, dtype=float))) for w in windows_of(samples) if len(w))


def headline_median(samples: Any) -> float:
    """A benchmark's **headline median**: the one time every output reports for it
    (``gate.headline`` says where). ``samples``: the windows the gate judges (or one flat sample
    list). The geometric mean of the window medians; with one window, its median. ``gate.rule``
    pools the windows as the mean of their log medians, so this is the rule's pooling in seconds
    and a verdict's Δ is exactly ``headline_median(now) / headline_median(base) - 1``.
    ``ValueError`` for no samples."""
    meds = window_medians(samples)
    if not meds:
        raise ValueError("a headline median needs at least one sample")
    return meds[0] if len(meds) == 1 else float(np.exp(np.mean(np.log(meds))))


# --- validation -----------------------------------------------------------------------------------


def short(value: Any) -> str:
    """``repr(value)``, cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(x: Any) -> bool:
    """A JSON number (``true``/``false`` are not: Python would read them as 1/0)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def finite(x: Any) -> bool:
    """A JSON number that is a finite float: an integer beyond the float range is not (JSON
    integers have no size limit; ``float(10**400)`` raises ``OverflowError``)."""
    try:
        return is_number(x) and math.isfinite(x)
    except OverflowError:
        return False


def check_samples(samples: Any, what: str) -> tuple[float, ...]:
    """Raw timings as seconds: numbers, finite and > 0, and possible for one call: between
    ``MIN_SAMPLE_S`` and ``MAX_SAMPLE_S`` (``ValueError`` naming ``what`` and the value otherwise).

    A time of 0 or below, NaN/Inf, or a boolean is a broken measurement, not a fast kernel; judged,
    it would make any slowdown look like a speed-up (or leave the ratio undefined)."""
    if not isinstance(samples, (list, tuple)) or not samples:
        raise ValueError(f"{what} has no raw samples")
    bad = [x for x in samples if not (finite(x) and x > 0)]
    if bad:
        raise ValueError(f"{what} has {len(bad)} invalid sample(s) (times must be finite numbers of "
                         f"seconds > 0), e.g. [{', '.join(short(x) for x in bad[:3])}]")
    impossible = [x for x in samples if not MIN_SAMPLE_S <= x <= MAX_SAMPLE_S]
    if impossible:
        raise ValueError(f"{what} has {len(impossible)} impossible sample(s), e.g. {impossible[0]:g} s: one call "
                         f"takes between {MIN_SAMPLE_S:g} s and {MAX_SAMPLE_S:g} s")
    return tuple(float(x) for x in samples)


def check_extra(extra: Mapping[str, Any], where: str) -> None:
    """The ``extra_info`` values the gate computes with must have the types it expects
    (``ValueError`` starting with ``where`` otherwise)."""
    nf = extra.get("noise_floor")
    if nf is not None and not (finite(nf) and nf >= 0):
        raise ValueError(f"{where}['noise_floor'] must be a relative number >= 0 (0.02 = 2 %), got {short(nf)}")
    clk = extra.get("sm_clock_mhz")
    if clk is not None:
        vals = clk if isinstance(clk, list) else [clk]
        if not all(finite(v) for v in vals):
            raise ValueError(f"{where}['sm_clock_mhz'] must be a number or a list of numbers (MHz), "
                             f"got {short(clk)}")
    for key in ("kernels", "throttle_reasons"):
        v = extra.get(key)
        if v is not None and not (isinstance(v, list) or (key == "throttle_reasons" and isinstance(v, str))):
            raise ValueError(f"{where}[{key!r}] must be a list of names, got {short(v)}")


# --- readers ----------------------------------------------------------------------------------------


def invalid_reason(extra: Mapping[str, Any], side: str, throttle_invalid: bool = False) -> str | None:
    """Why ``side``'s timing is void (``INVALID_FLAGS``, and ``throttled`` with
    ``throttle_invalid``), or None."""
    flags = INVALID_FLAGS + (("throttled",) if throttle_invalid else ())
    for key in flags:
        v = extra.get(key)
        if v:
            detail = "" if v is True else f": {v}"
            return f"{side} run {key.replace('_', ' ')}{detail}"
    return None


def clock(extra: Mapping[str, Any]) -> str | None:
    """The SM clock in MHz as text (the median of a per-sample list), or None."""
    v = extra.get("sm_clock_mhz")
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        if not v:
            return None
        v = float(np.median(np.asarray(v, dtype=float)))
    return f"{float(v):.0f}"


def throttle(extra: Mapping[str, Any]) -> str | None:
    """The throttle reasons as text (``"none"`` for an empty list), or None when not recorded."""
    v = extra.get("throttle_reasons")
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ", ".join(str(x) for x in v) if v else "none"
    return str(v) or "none"


def kernel_change(base_extra: Mapping[str, Any],
                  new_extra: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(added, removed) kernel names, or None when either side did not record kernels."""
    kb, kn = base_extra.get("kernels"), new_extra.get("kernels")
    if kb is None or kn is None:
        return None
    sb, sn = set(map(str, kb)), set(map(str, kn))
    if sb == sn:
        return None
    return tuple(sorted(sn - sb)), tuple(sorted(sb - sn))


def identity(extra: Mapping[str, Any]) -> str:
    """What a tactic ran: its kernel names, else its recorded config."""
    kernels = extra.get("kernels")
    return ", ".join(map(str, kernels)) if kernels else str(extra.get("tactic_config") or "?")
