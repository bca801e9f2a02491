"""Timing fidelity on a GPU: our per-GEMM time vs the profiler's kernel time (issue 3 acceptance).

For a GLM-5 gate_up shape (N = 2·2048, K = 6144) and M = 1 … 16384 it measures, for bf16
``torch.mm`` and FP8 rowwise ``torch._scaled_mm``:

* ``fp4bench``: fp4bench's default timer (CUDA graph of N calls; CUPTI busy time per replay / N), hot L2,
* ``sustained``: torch.profiler (CUPTI) kernel time per call (median) of the last 200 of eager
  back-to-back calls that ran for as long as the timed window, so the GPU is in the same
  power/clock state as during timing (the primary reference; run 2 showed that a 30-call burst
  runs at a higher clock than a 1 s window of a ~800 TFLOP/s GEMM on a power-capped GPU),
* ``profiler``: the same for 30-call bursts just before and just after the timed window
  (run 2's reference, kept for comparison),
* ``sm_clock``: NVML median SM clock during the sustained window and during the timed window,
* ``kernels``: whether the graph-captured call launched the same kernels as the eager call,
* ``graph_span``: event-pair time per replay / N (includes graph-node launch gaps),
* ``naive_events``: one event pair around every eager call (what not to do, for contrast).

Writes JSON to $OUT/timing_fidelity.json when OUT is set and prints a table.
Usage: python scripts/timing_fidelity.py [--ms 1,4,16,...] [--budget 1.0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from fp4bench.measure.kernels import KERNEL, device_event_kind, device_time_per_group, kernel_times, normalize_kernel_name
from fp4bench.measure.telemetry import TelemetrySampler
from fp4bench.measure.timing import TimingConfig, time_gpu


def sustained(fn, seconds: float, dev: torch.device, profiled: int = 200) -> tuple[float | None, dict, list[str]]:
    """Eager back-to-back calls for ``seconds``; CUPTI kernel time per call of the last ``profiled``."""
    from torch.profiler import ProfilerActivity, profile

    with TelemetrySampler(dev.index or 0) as tel:
        t_end = time.perf_counter() + seconds
        while time.perf_counter() < t_end:
            for _ in range(32):
                fn()
            torch.cuda.synchronize(dev)  # bounded queue; ~ms of work between syncs keeps it busy
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(profiled):
                fn()
            torch.cuda.synchronize(dev)
    events = list(prof.events())
    per = device_time_per_group(events, profiled)
    names = sorted({normalize_kernel_name(e.name) for e in events if device_event_kind(e) == KERNEL})
    clock = tel.result.sm_clock_median_mhz if tel.result is not None else None
    return (statistics.median(per) if per else None), {"sm_clock_mhz": clock,
                                                       "throttle": tel.result.reasons if tel.result else None}, names


def naive_events(fn, reps: int = 50) -> float:
    ts = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    return statistics.median(ts)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,16,64,256,1024,4096,16384")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=6144)
    ap.add_argument("--budget", type=float, default=1.0)
    args = ap.parse_args()
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for m in [int(x) for x in args.ms.split(",")]:
        a = torch.randn(m, args.k, device=dev, generator=g).to(torch.bfloat16)
        w = (torch.randn(args.n, args.k, device=dev, generator=g) * args.k ** -0.5).to(torch.bfloat16)
        out = torch.empty(m, args.n, device=dev, dtype=torch.bfloat16)
        a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        sa = torch.ones(m, 1, device=dev)
        sb = torch.ones(1, args.n, device=dev)
        fns = {
            "bf16 torch.mm": lambda: torch.mm(a, w.t(), out=out),
            "fp8 _scaled_mm": lambda: torch._scaled_mm(a8, w8.t(), sa, sb, out_dtype=torch.bfloat16, out=out),
        }
        for name, fn in fns.items():
            cfg = TimingConfig(mode="graph", time_budget_s=args.budget, target_rel_ci=0.002, max_samples=200)
            before = kernel_times(fn, repeats=30).per_call_s  # eager burst, CUPTI kernel durations
            sus, sus_tel, eager_kernels = sustained(fn, args.budget, dev)
            with TelemetrySampler(dev.index or 0) as tel:
                res = time_gpu([fn], cfg, dev)  # fp4bench's timer: CUPTI busy time inside graph replays
            after = kernel_times(fn, repeats=30).per_call_s
            prof = (before + after) / 2 if before and after else None  # brackets the timed window
            naive = naive_events(fn)
            span = res.extra.get("span_median_s")
            graph_kernels = res.extra.get("kernels", [])
            row = {"op": name, "m": m, "n": args.n, "k": args.k, "fp4bench_s": res.median_s, "timer": res.method,
                   "calls_per_sample": res.calls_per_sample, "samples": len(res.samples_s),
                   "rel_ci95": res.rel_ci, "sustained_s": sus, "sustained_sm_clock_mhz": sus_tel["sm_clock_mhz"],
                   "timed_sm_clock_mhz": tel.result.sm_clock_median_mhz if tel.result else None,
                   "timed_throttle": tel.result.reasons if tel.result else None,
                   "sustained_throttle": sus_tel["throttle"],
                   "profiler_s": prof, "profiler_before_s": before, "profiler_after_s": after,
                   "graph_span_s": span, "naive_events_s": naive,
                   "same_kernels": graph_kernels == eager_kernels, "graph_kernels": graph_kernels,
                   "eager_kernels": eager_kernels}
            row["fp4bench_vs_sustained"] = res.median_s / sus - 1 if sus else None
            row["fp4bench_vs_profiler"] = res.median_s / prof - 1 if prof else None
            rows.append(row)
            f = lambda x: x * 1e6 if x else float("nan")  # noqa: E731
            print(f"{name:15s} M={m:6d} fp4bench {f(res.median_s):9.2f} us  sustained {f(sus):9.2f} us"
                  f" d={row['fp4bench_vs_sustained'] * 100 if sus else float('nan'):+6.2f}%"
                  f" | burst {f(prof):9.2f} (before {f(before):.2f}, after {f(after):.2f})"
                  f" d={row['fp4bench_vs_profiler'] * 100 if prof else float('nan'):+6.2f}%"
                  f" | clock sustained {sus_tel['sm_clock_mhz']} timed {row['timed_sm_clock_mhz']} MHz"
                  f" | span {f(span):9.2f} naive {f(naive):9.2f} | same kernels {row['same_kernels']}"
                  f" [{res.method}]", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "timing_fidelity.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
