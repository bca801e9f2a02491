"""Test-only: slow named backends down by a fraction of their own time, under their own names.

    FP4BENCH_SLOWDOWN="torch-bf16=0.05,flashinfer-cutlass=0.05" \\
        pytest bench --fp4-plugin fp4bench.testing.slowdown --benchmark-compare

Each named backend is replaced by a wrapper with the same name (``wrap_backends``), so the
benchmark names are those of an unwrapped run: the gate, or ``fp4bench ab`` with the plugin on
one side only (``--b-plugin fp4bench.testing.slowdown --b-env FP4BENCH_SLOWDOWN=...``), pairs
the slowed benchmarks with their plain twins. This is how the gate's detection power is measured
on a device: a known slowdown that really runs on the device, inside whatever the timer times.

After every call the wrapper adds busy time worth ``fraction`` x the call's own time, on the
device the call ran on: on CUDA a ``torch.cuda._sleep`` spin kernel on the current stream (so it
is captured into the timer's CUDA graph next to the kernel), on a CPU a busy-wait. The sizing
is made once per (problem, tactic), at its first call, which is the correctness check and never
a timed call (``Spin.calibrate``): on CUDA the call's time and the time a spin of ``c`` cycles
realizes after it are both measured over repeated [L2 flush, call, spin] launches queued behind
a spin (no launch latency, no warm-cache shortcut), and ``c`` is solved for so that the realized
added time is the asked fraction of the call's time within 5 % (``solve_cycles``). "Time" is
what the timer of the process reports (``$FP4BENCH_TIMER``, ``TIMERS``): ``cupti`` (the pytest
run's default) sums the kernels' busy time, so the spin kernel's own duration is what it adds;
``span`` (``fp4bench ab``'s and ``fp4bench units``' default, which set the variable for their
workers) is the event span, so the gap one more kernel leaves in the stream counts too. Sized in
the other unit, a 5 % spin after a 95 µs memory-bound grouped GEMM on an H200 realized +0.6 % of
busy time (docs/results-h200.md, run 26), as it would if its span-sized cycles were mostly that
gap (a fit, not yet measured per kernel). The call is sized cold-L2 (the timer's default);
under ``--fp4-l2 hot`` the added time is that fraction of the cold call.

The spin kernel shows in the recorded kernel names: the gate notes "kernels changed" on the
slowed benchmarks, and for an explicit tactic (``--fp4-tactics all``) reports a kernel change
instead of judging the time. Measure detection power on the default tactics.

``FP4BENCH_SLOWDOWN_GPUS=GPU-...,GPU-...`` (optional) slows down only a process pinned by UUID
to one of those GPUs (its ``CUDA_VISIBLE_DEVICES``, as ``fp4bench.gpus.devices.pin_env`` sets
it); every other process keeps the plain backends. That makes one unit of a host slow on
purpose: the acceptance test of ``fp4bench units``, or one GPU's share of ``fp4bench ab --gpus``.

A run that measures a test-only backend records it in ``sweep.test_only``; it is not clean,
``fp4bench baseline approve`` refuses it even with ``--force``, and it is never gated against.
"""

from __future__ import annotations

import os
import statistics
from fp4bench import clock
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.measure.timing import TIMER_ENV
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem

ENV = "FP4BENCH_SLOWDOWN"
GPUS_ENV = "FP4BENCH_SLOWDOWN_GPUS"
#: timer -> what the calibration measures: kernel busy time (CUPTI) or the event span
TIMERS = {"cupti": "busy", "span": "span"}


def timer_measure(environ: dict[str, str] | None = None) -> str:
    """``busy`` or ``span``: what ``$FP4BENCH_TIMER`` (default ``cupti``, the pytest run's timer) counts."""
    env = os.environ if environ is None else environ
    timer = env.get(TIMER_ENV, "cupti").strip() or "cupti"
    if timer not in TIMERS:
        raise ValueError(f"{TIMER_ENV}={timer!r}: expected one of {', '.join(TIMERS)}")
    return TIMERS[timer]


def parse_spec(text: str) -> dict[str, float]:
    """``"torch-bf16=0.05,fault-nan=1"`` -> ``{"torch-bf16": 0.05, "fault-nan": 1.0}`` (fractions)."""
    out: dict[str, float] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        name, sep, value = item.partition("=")
        try:
            fraction = float(value) if sep else float("nan")
        except ValueError:
            fraction = float("nan")
        if not name.strip() or not 0 < fraction <= 10:
            raise ValueError(f"{ENV}: {item.strip()!r} is not BACKEND=FRACTION with a fraction in (0, 10] "
                             f"(0.05 = 5 %)")
        out[name.strip()] = fraction
    if not out:
        raise ValueError(f"{ENV} is not set: name the backends to slow down, e.g. {ENV}=torch-bf16=0.05")
    return out


class CudaClock:
    """The device steps the calibration is made of, on one CUDA device (``FakeClock`` in the
    tests stands in for it): an L2 flush, a spin of some cycles, and the GPU span of a sequence
    of launches."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        # 2x L2, read (not written): the flush leaves clean lines, as the timer's rotating operand
        # copies do; a written flush leaves dirty lines whose write-back the next call would pay
        self._scratch = torch.ones(max(1, 2 * l2 // 4), dtype=torch.float32, device=device)
        self._sink = torch.empty((), dtype=torch.float32, device=device)
        self._ahead = 0

    def rate(self) -> float:
        """Nominal ``torch.cuda._sleep`` cycles per second, from one long spin (the first guess)."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # warm
        start.record()
        torch.cuda._sleep(20_000_000)
        end.record()
        end.synchronize()
        rate = 20_000_000 / (start.elapsed_time(end) / 1e3)
        self._ahead = int(2e-3 * rate)
        return rate

    def capturing(self) -> bool:
        return torch.cuda.is_current_stream_capturing()

    def flush(self) -> None:
        torch.sum(self._scratch, dim=0, out=self._sink)

    def spin(self, cycles: int) -> None:
        torch.cuda._sleep(max(1, int(cycles)))

    def span(self, launch: Callable[[], None]) -> float:
        """Seconds between two events around ``launch()``'s kernels, queued behind a 2 ms spin so
        the CPU's launch time is not in the span."""
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(max(1, self._ahead))
        start.record()
        launch()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    def busy(self, launch: Callable[[], None]) -> float:
        """Seconds of device work (kernels, memsets, copies: CUPTI durations summed) of
        ``launch()``, as the ``cupti`` timer counts a replay; the 2 ms spin ahead is not counted."""
        from torch.profiler import ProfilerActivity, profile

        from fp4bench.measure.kernels import device_time_per_group

        torch.cuda._sleep(max(1, self._ahead))
        torch.cuda.synchronize(self.device)
        with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
            launch()
            torch.cuda.synchronize(self.device)
        got = device_time_per_group(prof.events(), 1)
        if not got:
            raise RuntimeError("fp4bench.testing.slowdown: the profiler saw no device work to size the spin on")
        return got[0]


def solve_cycles(added: Callable[[int], float], target_s: float, guess: int, tol: float = 0.05,
                 tries: int = 5) -> tuple[int, float]:
    """Spin cycles whose *realized* added time ``added(cycles)`` is ``target_s`` within ``tol``
    (relative), by the secant method from ``guess``: ``added`` is affine in the cycles (a fixed
    cost of one more kernel plus cycles / SM clock), neither term known in advance. Returns the
    cycles and the added time measured with them."""
    c1, c2 = max(1, int(guess)), max(2, 2 * int(guess))
    a1, a2 = added(c1), added(c2)
    for _ in range(tries):
        slope = (a2 - a1) / (c2 - c1)
        if not slope > 0:
            raise RuntimeError(f"fp4bench.testing.slowdown: a longer spin did not add time ({c1} cycles: "
                               f"{a1 * 1e6:.2f} us, {c2} cycles: {a2 * 1e6:.2f} us); the calibration is too noisy")
        c = round(c2 + (target_s - a2) / slope)
        if c < 1:
            fixed = a2 - slope * c2
            raise ValueError(f"fp4bench.testing.slowdown: cannot add {target_s * 1e6:.2f} us per call: one spin "
                             f"kernel alone adds {fixed * 1e6:.2f} us; ask for a larger fraction")
        a = added(c)
        if abs(a - target_s) <= tol * target_s:
            return c, a
        c1, a1, c2, a2 = c2, a2, c, a
    raise RuntimeError(f"fp4bench.testing.slowdown: the spin did not settle within {tol:.0%} of "
                       f"{target_s * 1e6:.2f} us in {tries} tries (last {a * 1e6:.2f} us)")


@dataclass
class Calibration:
    """One call's sizing: its own time, the spin cycles, and the time they add after it."""

    call_s: float
    cycles: int
    added_s: float


class Spin:
    """Busy time on the device a call ran on, sized on the call's own time.

    On CUDA the spin is sized on what it *adds* after the call, as the process's timer counts
    it (``measure``: ``busy`` or ``span``, from ``$FP4BENCH_TIMER``), not on its length alone:
    under the span each spin is one more kernel, and its fixed cost (the gap a graph leaves
    between two kernels, the call's tail) is time the spin adds too; under busy time only the
    spin kernel's own duration is. The calibration measures ``k`` repetitions of [flush, call]
    and of [flush, call, spin(c)] (so the event overhead and the flush cancel in the
    difference), the median of ``reps`` rounds, and solves for ``c`` with ``solve_cycles``
    (within ``tol``)."""

    def __init__(self, reps: int = 10, k: int = 16, tol: float = 0.05,
                 clock: Callable[[torch.device], Any] = CudaClock, measure: str | None = None) -> None:
        self.reps, self.k, self.tol, self._clock = reps, k, tol, clock
        self.measure = measure if measure is not None else timer_measure()
        if self.measure not in TIMERS.values():
            raise ValueError(f"Spin(measure={self.measure!r}): expected busy or span")
        self._clocks: dict[Any, Any] = {}

    def call_seconds(self, call: Callable[[], Any], device: torch.device) -> float:
        """The median time of one ``call`` on a CPU (after one warm-up call)."""
        call()
        times = []
        for _ in range(self.reps):
            t = clock.now()
            call()
            times.append(clock.now() - t)
        return statistics.median(times)

    def calibrate(self, call: Callable[[], Any], fraction: float, device: torch.device) -> Calibration:
        """How to add ``fraction`` x the time of ``call`` after each call on ``device``."""
        if device.type != "cuda":
            t0 = self.call_seconds(call, device)
            return Calibration(t0, 0, fraction * t0)
        if device not in self._clocks:
            self._clocks[device] = self._clock(device)
        clock = self._clocks[device]
        if clock.capturing():
            raise RuntimeError("fp4bench.testing.slowdown: the first call of a case is being captured into a "
                               "CUDA graph: measure the call's time before (run the case's check first)")
        rate = clock.rate()
        call()  # warm

        def per_call(*steps: Callable[[], Any]) -> float:
            def launch(times: int) -> Callable[[], None]:
                def go() -> None:
                    for _ in range(times):
                        for step in steps:
                            step()
                return go
            if self.measure == "busy":  # a sum of kernel durations: one profiled pass of k x reps
                return clock.busy(launch(self.k * self.reps)) / (self.k * self.reps)
            return statistics.median(clock.span(launch(self.k)) for _ in range(self.reps)) / self.k

        flush = per_call(clock.flush)
        t0 = per_call(clock.flush, call) - flush
        if not t0 > 0:
            raise RuntimeError(f"fp4bench.testing.slowdown: the call measured {t0 * 1e6:.2f} us; cannot size a spin")

        def added(cycles: int) -> float:
            return per_call(clock.flush, call, lambda: clock.spin(cycles)) - flush - t0

        cycles, got = solve_cycles(added, fraction * t0, int(fraction * t0 * rate), self.tol)
        return Calibration(t0, cycles, got)

    def add(self, cal: Calibration, device: torch.device) -> None:
        """The calibrated busy time: a spin kernel on the current CUDA stream, or a CPU busy-wait."""
        if device.type == "cuda":
            self._clocks[device].spin(cal.cycles)
            return
        clock.spin(cal.added_s)


class Slowed(Backend):
    """``inner`` under its own name, each call followed by ``fraction`` x its time of busy time."""

    test_only = True

    def __init__(self, inner: Backend, fraction: float, spin: Spin | None = None) -> None:
        self.inner, self.fraction = inner, fraction
        self.spin = spin if spin is not None else Spin()
        self.name = inner.name
        self.kinds = inner.kinds
        self.act_format, self.weight_format = inner.act_format, inner.weight_format
        self.api = f"{inner.api or inner.name} + test-only slowdown {fraction:g}"
        self.alignment = inner.alignment
        self.padding = getattr(inner, "padding", None)
        self.no_graph_reason = inner.no_graph_reason
        self.output_roundings = inner.output_roundings
        self.calibrations: dict[tuple[str, str], Calibration] = {}

    def availability(self, device: torch.device) -> Availability:
        return self.inner.availability(device)

    def unsupported_reason(self, problem: Problem) -> str | None:
        return self.inner.unsupported_reason(problem)

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        return self.inner.tactics(problem, device)

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        return self.inner.prepare(problem, operands, device)

    def reference_options(self, prepared: Prepared) -> dict[str, Any]:
        return self.inner.reference_options(prepared)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        device = prepared.out.device
        key = (prepared.problem.id, tactic.label)
        if key not in self.calibrations:
            self.calibrations[key] = self.spin.calibrate(lambda: self.inner.run(prepared, tactic), self.fraction,
                                                         device)
        out = self.inner.run(prepared, tactic)
        self.spin.add(self.calibrations[key], device)
        return out


def on_chosen_gpu() -> bool:
    """Whether this process slows down: ``$FP4BENCH_SLOWDOWN_GPUS`` unset, or naming the UUID this
    process is pinned to (``CUDA_VISIBLE_DEVICES``)."""
    chosen = os.environ.get(GPUS_ENV)
    if chosen is None:
        return True
    uuids = {u.strip() for u in chosen.split(",") if u.strip()}
    if not uuids or not all(u.startswith(("GPU-", "MIG-")) for u in uuids):
        raise ValueError(f"{GPUS_ENV}={chosen!r}: expected comma-separated GPU UUIDs (GPU-...)")
    return os.environ.get("CUDA_VISIBLE_DEVICES", "").strip() in uuids


def wrap_backends(get_backend: Callable[[str], Backend]) -> list[Backend]:
    """The backends named in ``$FP4BENCH_SLOWDOWN``, wrapped (the registry puts them in place);
    none in a process that ``$FP4BENCH_SLOWDOWN_GPUS`` leaves out."""
    spec = parse_spec(os.environ.get(ENV, ""))
    if not on_chosen_gpu():
        return []
    out = []
    for name, fraction in spec.items():
        inner = get_backend(name)  # ValueError names an unknown backend
        out.append(Slowed(inner.inner if isinstance(inner, Slowed) else inner, fraction))
    return out
