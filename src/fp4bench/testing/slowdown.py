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
is captured into the timer's CUDA graph next to the kernel), on a CPU a busy-wait. The call's
time is measured once per (problem, tactic), at its first call, which is the correctness
check and never a timed call: on CUDA as the median event span of a few calls, each queued
behind a spin (no launch latency in the span) after an L2 flush (no warm-cache shortcut).

The spin kernel shows in the recorded kernel names: the gate notes "kernels changed" on the
slowed benchmarks, and for an explicit tactic (``--fp4-tactics all``) reports a kernel change
instead of judging the time. Measure detection power on the default tactics.

A run that measures a test-only backend records it in ``sweep.test_only``; it is not clean,
``fp4bench baseline approve`` refuses it even with ``--force``, and it is never gated against.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Callable

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.operands import Operands
from fp4bench.problems import Problem

ENV = "FP4BENCH_SLOWDOWN"


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


class Spin:
    """Busy time on the device a call ran on, and the call's own time to size it."""

    def __init__(self, reps: int = 10) -> None:
        self.reps = reps
        self._cycles_per_s: dict[int, float] = {}

    def _rate(self, device: torch.device) -> float:
        """``torch.cuda._sleep`` cycles per second on ``device``, from one long timed spin (the
        SM clock, which moves with power, sets it)."""
        idx = device.index if device.index is not None else torch.cuda.current_device()
        if idx not in self._cycles_per_s:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1_000_000)  # warm
            start.record()
            torch.cuda._sleep(20_000_000)
            end.record()
            end.synchronize()
            self._cycles_per_s[idx] = 20_000_000 / (start.elapsed_time(end) / 1e3)
        return self._cycles_per_s[idx]

    def call_seconds(self, call: Callable[[], Any], device: torch.device) -> float:
        """The median time of one ``call`` (after one warm-up call)."""
        if device.type != "cuda":
            call()
            times = []
            for _ in range(self.reps):
                t = time.perf_counter()
                call()
                times.append(time.perf_counter() - t)
            return statistics.median(times)
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("fp4bench.testing.slowdown: the first call of a case is being captured into a "
                               "CUDA graph; the call's time must be measured before (run the case's check first)")
        call()
        torch.cuda.synchronize(device)
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        scratch = torch.empty(max(1, 2 * l2 // 4), dtype=torch.float32, device=device)  # 2x L2: a write evicts it
        ahead = int(1e-3 * self._rate(device))  # 1 ms of spin queued ahead: the CPU launches meanwhile
        spans = []
        for _ in range(self.reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(ahead)
            scratch.zero_()
            start.record()
            call()
            end.record()
            end.synchronize()
            spans.append(start.elapsed_time(end) / 1e3)
        return statistics.median(spans)

    def add(self, seconds: float, device: torch.device) -> None:
        """``seconds`` of busy time: a spin kernel on the current CUDA stream, or a CPU busy-wait."""
        if device.type == "cuda":
            torch.cuda._sleep(max(1, int(seconds * self._rate(device))))
            return
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


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
        self._call_s: dict[tuple[str, str], float] = {}

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
        if key not in self._call_s:
            self._call_s[key] = self.spin.call_seconds(lambda: self.inner.run(prepared, tactic), device)
        out = self.inner.run(prepared, tactic)
        self.spin.add(self.fraction * self._call_s[key], device)
        return out


def wrap_backends(get_backend: Callable[[str], Backend]) -> list[Backend]:
    """The backends named in ``$FP4BENCH_SLOWDOWN``, wrapped (the registry puts them in place)."""
    out = []
    for name, fraction in parse_spec(os.environ.get(ENV, "")).items():
        inner = get_backend(name)  # ValueError names an unknown backend
        out.append(Slowed(inner.inner if isinstance(inner, Slowed) else inner, fraction))
    return out
