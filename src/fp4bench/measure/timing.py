"""GPU time per call, measured the way a kernel engineer trusts.

Default method: capture ``N`` back-to-back calls in one CUDA graph and time each replay with a
CUDA event pair; one sample = replay time / N. That measures decode-size kernels of a few µs
as kernel time, not launch latency (per-call events would report ~25 µs for a 7 µs GEMM).
Fallbacks, always named in ``TimingResult.method``/``note``:

* ``events``: N back-to-back launches between one event pair (a backend that cannot be
  captured); launch gaps are included when the CPU launches slower than the GPU runs.
* ``cpu``: ``perf_counter`` around N calls, for CPU-only backends; labelled as such.

Cold L2 is done by *rotating input copies* (each callable in ``fns`` works on its own copy)
so that back-to-back launches stay back-to-back; the caller decides how many copies. A captured
graph replays a fixed sequence, so it covers every copy (at least one call per copy); eager and
CPU launches continue the rotation from one sample to the next (``Rotation``), so a call longer
than a sample's target (the eager emulation's 0.1 s calls) is one call per sample, never a
second call on a copy the previous one just left in L2.
Sampling is adaptive: after ``min_samples`` it stops once the distribution-free 95 %
confidence interval of the median is within ``target_rel_ci`` of the median, or when
the time budget or ``max_samples`` is reached (``stopped_by`` says which).
"""

from __future__ import annotations

import math
from fp4bench import clock
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from scipy import stats

from fp4bench.measure.kernels import KERNEL, device_event_kind, device_time_per_group, normalize_kernel_name

import torch

Fn = Callable[[], Any]

#: environment variable naming the timer a worker process's samples use, ``cupti`` (kernel busy
#: time, the default) or ``span`` (event span); ``fp4bench ab`` and ``fp4bench units`` set it for
#: their workers so that test-only code sized in the timer's unit (``fp4bench.testing.slowdown``)
#: can read it
TIMER_ENV = "FP4BENCH_TIMER"


@dataclass(frozen=True)
class TimingConfig:
    mode: str = "graph"  # "graph" | "events" | "cpu"
    calls_per_sample: int | None = None  # None: auto so one sample lasts ~target_sample_s
    target_sample_s: float = 1e-3
    max_calls_per_sample: int = 256
    warmup_calls: int = 3
    min_samples: int = 10
    max_samples: int = 300
    target_rel_ci: float | None = 0.005  # None: run to the budget / max_samples
    time_budget_s: float = 2.0
    #: seconds of extra, untimed-for-latency replays inside an NVML sampler to get joules per
    #: call; NVML's energy counter ticks ~every 100 ms, so below ~1 s the number is not reported
    energy_window_s: float = 0.0
    #: sample = GPU busy time of the replay's kernels from CUPTI (torch.profiler), so graph-node
    #: launch gaps (~1-2 µs on an H200) are not charged to µs-scale kernels; the event span is
    #: kept as ``span_median_s``. False: event span per call.
    kernel_time: bool = True

    def __post_init__(self) -> None:
        if self.mode not in ("graph", "events", "cpu"):
            raise ValueError(f"timing mode must be graph, events or cpu, got {self.mode!r}")
        if self.min_samples < 3 or self.max_samples < self.min_samples:
            raise ValueError(f"need 3 <= min_samples <= max_samples, got {self.min_samples}, {self.max_samples}")
        if self.calls_per_sample is not None and self.calls_per_sample < 1:
            raise ValueError(f"calls_per_sample must be >= 1, got {self.calls_per_sample}")
        if self.max_calls_per_sample < 1:
            raise ValueError(f"max_calls_per_sample must be >= 1, got {self.max_calls_per_sample}")
        if not self.target_sample_s > 0:
            raise ValueError(f"target_sample_s must be > 0 seconds, got {self.target_sample_s}")
        if self.warmup_calls < 0:
            raise ValueError(f"warmup_calls must be >= 0, got {self.warmup_calls}")
        if not self.time_budget_s >= 0:
            raise ValueError(f"time_budget_s must be >= 0 seconds, got {self.time_budget_s}")
        if self.target_rel_ci is not None and not self.target_rel_ci > 0:
            raise ValueError(f"target_rel_ci must be > 0 (relative) or None, got {self.target_rel_ci}")


@dataclass
class TimingResult:
    samples_s: list[float]  # seconds per call, one entry per sample
    method: str
    calls_per_sample: int
    rotating_copies: int
    stopped_by: str
    rel_ci: float
    note: str = ""
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    def to_extra_info(self) -> dict[str, Any]:
        return {
            "timer": self.method,
            "calls_per_sample": self.calls_per_sample,
            "rotating_copies": self.rotating_copies,
            "stopped_by": self.stopped_by,
            "rel_ci95": round(self.rel_ci, 6),
            "timing_note": self.note,
            **self.extra,
        }


def median_rel_ci(samples: Sequence[float], confidence: float = 0.95) -> float:
    """Half-width of the order-statistic CI of the median, relative to the median.

    Distribution-free (binomial order statistics), so skewed GPU timing tails do not fool it.
    With B ~ Binomial(n, 1/2) and l the smallest count with P(B <= l) >= (1 - confidence) / 2,
    the interval [x_(l), x_(n+1-l)] (1-based order statistics) covers the median with
    probability 1 - 2 P(B <= l - 1) >= confidence (the interval ``scipy.stats.quantile_test``
    gives). Too few samples for that coverage (n < 6 at 95 %) give ``inf``.
    """
    x = np.sort(np.asarray(samples, dtype=float))
    n = len(x)
    if n < 3:
        return math.inf
    lo = int(stats.binom.ppf((1 - confidence) / 2, n, 0.5)) - 1  # 0-based index of x_(l)
    if lo < 0:
        return math.inf
    hi = n - 1 - lo
    med = float(np.median(x))
    if med <= 0:
        return math.inf
    return max(med - x[lo], x[hi] - med) / med


class _Sampler:
    """Collects samples until the stop rule fires."""

    def __init__(self, cfg: TimingConfig):
        self.cfg, self.samples, self.t0 = cfg, [], clock.now()

    def done(self) -> str | None:
        n = len(self.samples)
        if n >= self.cfg.max_samples:
            return "max_samples"
        if n < self.cfg.min_samples:
            return None
        if self.cfg.target_rel_ci is not None and median_rel_ci(self.samples) <= self.cfg.target_rel_ci:
            return "ci"
        if clock.now() - self.t0 >= self.cfg.time_budget_s:
            return "budget"
        return None


def _calls_for(est_s: float, cfg: TimingConfig, copies: int = 1, continuous: bool = False) -> int:
    """Calls per sample. A replay that restarts its rotation every sample (a CUDA graph) runs at
    least one call per rotating copy in auto mode: with fewer, every sample would re-run the same
    first copies (still in L2 from the previous sample) and the other copies would never be
    timed. ``continuous``: the rotation carries on across samples (``Rotation``), so no floor."""
    if cfg.calls_per_sample is not None:
        return cfg.calls_per_sample
    floor = 1 if continuous else copies
    if est_s <= 0:
        return max(cfg.max_calls_per_sample, floor)
    return int(max(floor, min(cfg.max_calls_per_sample, max(1, math.ceil(cfg.target_sample_s / est_s)))))


class Rotation:
    """``calls`` calls of ``fns`` per launch, continuing the rotation where the last launch
    stopped: call ``k`` of the whole run always works on copy ``k mod len(fns)``."""

    def __init__(self, fns: Sequence[Fn], calls: int) -> None:
        self.fns, self.calls, self.next = list(fns), calls, 0

    def __call__(self) -> None:
        n = len(self.fns)
        for i in range(self.calls):
            self.fns[(self.next + i) % n]()
        self.next = (self.next + self.calls) % n


MAX_PROFILED_CALLS = 20_000


def _estimate_gpu_call_s(fns: Sequence[Fn], stream: torch.cuda.Stream, reps: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        for i in range(reps):
            fns[i % len(fns)]()
        end.record(stream)
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def time_cpu(fns: Sequence[Fn], cfg: TimingConfig) -> TimingResult:
    """Plain wall-clock timing for CPU-only backends (labelled ``cpu``)."""
    if not fns:
        raise ValueError("time_cpu needs at least one callable")
    for i in range(cfg.warmup_calls):
        fns[i % len(fns)]()
    t = clock.now()
    fns[0]()
    n = _calls_for(clock.now() - t, cfg, len(fns), continuous=True)
    launch = Rotation(fns, n)
    launch.next = 1 % len(fns)  # the sizing call ran copy 0
    s = _Sampler(cfg)
    while (why := s.done()) is None:
        t0 = clock.now()
        launch()
        s.samples.append((clock.now() - t0) / n)
    return TimingResult(s.samples, "cpu perf_counter", n, len(fns), why, median_rel_ci(s.samples),
                        note="CPU-only backend: wall clock, not GPU time", wall_s=clock.now() - s.t0)


def time_gpu(fns: Sequence[Fn], cfg: TimingConfig, device: torch.device, no_graph_reason: str | None = None,
             primed: Primed | None = None) -> TimingResult:
    """GPU time per call of ``fns`` (rotated), by CUDA graph replay or, failing that, events.

    Three steps: ``capture`` the calls into one replayable unit (:func:`prime_gpu`), ``sample``
    its replays until the stop rule fires, and (with ``cfg.energy_window_s``) ``energy`` per call
    in a separate pass. ``no_graph_reason``: the callable is known not to be capturable; events
    are used directly and the reason goes into the note. ``primed``: a :func:`prime_gpu` of
    the same ``fns`` to sample again instead of capturing anew."""
    if cfg.mode == "cpu":
        return time_cpu(fns, cfg)
    p = primed if primed is not None else prime_gpu(fns, cfg, device, no_graph_reason)
    unit, stream = p.unit, p.stream
    got = sample(unit, cfg, stream, device)
    extra: dict[str, Any] = {"estimate_s": p.estimate_s, **got.extra}
    if cfg.energy_window_s > 0:
        with torch.cuda.stream(stream):
            extra.update(energy(unit, cfg.energy_window_s, device))
    notes = "; ".join(n for n in (unit.note, got.note) if n)
    return TimingResult(got.per_call_s, got.method, unit.calls, len(fns), got.stopped_by,
                        median_rel_ci(got.per_call_s), note=notes, wall_s=got.wall_s, extra=extra)


@dataclass
class Primed:
    """A case ready to sample: warmed up, sized and captured once on its own stream. Sampling it
    again keeps warm-up, sizing and capture out of every later measurement (``fp4bench ab``
    times one case in many short alternating rounds)."""

    unit: Replay
    stream: torch.cuda.Stream
    estimate_s: float


def prime_gpu(fns: Sequence[Fn], cfg: TimingConfig, device: torch.device,
               no_graph_reason: str | None = None, sized: Primed | None = None) -> Primed:
    """Warm ``fns`` up off the default stream (JIT, autotune, allocator), estimate one call, size
    a sample and capture it (graph mode) or line it up back to back (events mode). ``sized``: an
    earlier priming of the same case whose estimate and calls per sample are kept (the case in
    fresh memory is captured again, not sized again: its samples stay comparable)."""
    if not fns:
        raise ValueError("time_gpu needs at least one callable")
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for i in range(max(cfg.warmup_calls, len(fns))):
            fns[i % len(fns)]()
    torch.cuda.synchronize(device)
    if sized is not None:
        est, calls = sized.estimate_s, sized.unit.calls
    else:
        est = _estimate_gpu_call_s(fns, stream)
        calls = _calls_for(est, cfg, len(fns), continuous=cfg.mode != "graph" or bool(no_graph_reason))
    unit = capture(fns, calls, stream, device, no_graph_reason) if cfg.mode == "graph" else back_to_back(fns, calls)
    return Primed(unit, stream, est)


@dataclass
class Replay:
    """``calls`` back-to-back calls as one launchable unit: a CUDA graph, or (when it cannot be
    captured) the calls themselves launched eagerly; ``method`` and ``note`` say which and why."""

    launch: Fn
    calls: int
    method: str
    note: str = ""
    graph: Any = None  # the captured graph, kept alive as long as ``launch`` replays it


def back_to_back(fns: Sequence[Fn], calls: int, note: str = "") -> Replay:
    """``calls`` calls of ``fns``, launched eagerly one after the other, the rotation continuing
    from one launch to the next (``Rotation``)."""
    return Replay(Rotation(fns, calls), calls, f"cuda-events x{calls} back-to-back", note)


def capture(fns: Sequence[Fn], calls: int, stream: torch.cuda.Stream, device: torch.device,
            no_graph_reason: str | None = None) -> Replay:
    """``calls`` calls of ``fns`` (rotated) captured into one CUDA graph on ``stream``; eager
    back-to-back launches when ``no_graph_reason`` is given or the capture fails."""
    if no_graph_reason:
        return back_to_back(fns, calls, f"no CUDA graph: {no_graph_reason}")
    eager = back_to_back(fns, calls)
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for i in range(calls):
                fns[i % len(fns)]()
    except Exception as exc:  # capture is a property of the backend, not a failure of it
        torch.cuda.synchronize(device)
        eager.note = f"graph capture failed ({type(exc).__name__}: {exc}); fell back to events"
        return eager
    return Replay(graph.replay, calls, f"cuda-graph x{calls}", graph=graph)


@dataclass
class Sampled:
    """What ``sample`` measured: seconds per call (one entry per replay) and how."""

    per_call_s: list[float]
    stopped_by: str
    wall_s: float
    method: str
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def sample(unit: Replay, cfg: TimingConfig, stream: torch.cuda.Stream, device: torch.device) -> Sampled:
    """Replay ``unit`` between CUDA events until ``cfg``'s stop rule fires. With
    ``cfg.kernel_time`` and a CUDA graph, a sample is the GPU busy time of the replay's kernels
    from CUPTI (the event span is kept as ``span_median_s``) and the executed kernel names are
    recorded. Eager launches are timed by their event span (launch gaps included: the time an
    eager caller pays), and with ``cfg.kernel_time`` their kernel names come from profiling the
    one untimed launch: profiling every sample of a path that launches thousands of small kernels
    a call cost more than the samples themselves and its launch overhead is not the kernels'."""
    n = unit.calls
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s = _Sampler(cfg)
    prof = _profiler() if cfg.kernel_time and unit.graph is not None else None
    names: list[str] | None = None
    with torch.cuda.stream(stream):
        if cfg.kernel_time and unit.graph is None:
            names = _kernel_names(unit, device)
        else:
            unit.launch()  # one untimed replay: the first replay uploads the graph
            torch.cuda.synchronize(device)
        if prof is not None:
            prof.start()
        while (why := s.done()) is None:
            if prof is not None and len(s.samples) * n >= MAX_PROFILED_CALLS and len(s.samples) >= cfg.min_samples:
                why = "profiled-call cap"  # keeps the profiler's event parsing to about a second
                break
            start.record(stream)
            unit.launch()
            end.record(stream)
            end.synchronize()
            s.samples.append(start.elapsed_time(end) / 1e3 / n)
    out = Sampled(s.samples, why, clock.now() - s.t0, unit.method)
    if names is not None:
        out.extra["kernels"] = names
        out.note = "eager launches: event span per call (launch gaps included), not CUPTI busy time"
    if prof is None:
        return out
    try:
        prof.stop()
        events = list(prof.events())
    except Exception as exc:  # profiler trouble must not lose the measurement
        events = []
        out.note = f"profiler failed ({type(exc).__name__})"
    busy = device_time_per_group(events, len(s.samples))
    out.extra["kernels"] = sorted({normalize_kernel_name(e.name) for e in events if device_event_kind(e) == KERNEL})
    if busy is None:
        out.note = "; ".join(x for x in (out.note, "profiler grouping failed; event span per call reported") if x)
        return out
    out.extra["span_median_s"] = float(np.median(s.samples))  # replay time incl. launch gaps
    out.per_call_s = [b / n for b in busy]
    out.method = f"cupti kernel time, {unit.method}"
    return out


def _kernel_names(unit: Replay, device: torch.device) -> list[str]:
    """Launch ``unit`` once under the profiler; the normalized names of the kernels it ran
    (empty where CUPTI is unavailable or the profiler fails: the launch still happens)."""
    prof = _profiler()
    try:
        if prof is not None:
            prof.start()
    except Exception:  # profiler trouble must not stop the measurement
        prof = None
    try:
        unit.launch()
        torch.cuda.synchronize(device)
    finally:
        events = []
        if prof is not None:
            try:
                prof.stop()
                events = list(prof.events())
            except Exception:
                events = []
    return sorted({normalize_kernel_name(e.name) for e in events if device_event_kind(e) == KERNEL})


def _profiler():
    """A CUDA-activity torch.profiler, or None where CUPTI is unavailable."""
    try:
        from torch.profiler import ProfilerActivity, profile, supported_activities

        if ProfilerActivity.CUDA not in supported_activities():
            return None
        # one start/stop cycle per profile; acc_events keeps its events readable after stop
        # without torch's "clears events at the end of each cycle" warning
        try:
            return profile(activities=[ProfilerActivity.CUDA], acc_events=True)
        except TypeError:  # a torch without acc_events (< 2.4): the warning stays, nothing else
            return profile(activities=[ProfilerActivity.CUDA])
    except Exception:
        return None


def energy(unit: Replay, window_s: float, device: torch.device) -> dict[str, Any]:
    """Replay ``unit`` back-to-back for ``window_s`` under the NVML sampler: energy-counter delta
    per call (``energy_*`` keys). A separate pass, so that NVML reads never sit inside the timed
    samples."""
    from fp4bench.measure.telemetry import for_device

    replays = 0
    with for_device(device, min_energy_window_s=min(1.0, window_s)) as tel:
        t_end = clock.now() + window_s
        while clock.now() < t_end:
            for _ in range(8):
                unit.launch()
            replays += 8
            torch.cuda.synchronize(device)
    info = tel.result.to_extra_info(replays * unit.calls) if tel.result is not None else {}
    return {"energy_" + k if not k.startswith(("energy", "joules")) else k: v for k, v in info.items()}
