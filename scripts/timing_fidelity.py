"""Timing fidelity on a GPU: our per-GEMM time vs the profiler's kernel time (issue 3 acceptance).

For a GLM-5 gate_up shape (N = 2·2048, K = 6144) and M = 1 … 16384 it measures, for bf16
``torch.mm`` and FP8 rowwise ``torch._scaled_mm``:

* ``fp4bench``: fp4bench's default timer (CUDA graph of N calls; CUPTI busy time per replay / N), hot L2,
* ``interleaved``: the primary reference (runs 5-7): CUPTI kernel time per call of replays of
  the timer's graph (same calls per replay) and of as many eager launches, *alternating* within
  one profiled window, so both see the same power/clock state (see ``interleaved``),
* ``alternating``: (run 6) fp4bench's own timer (``time_gpu``, unchanged) and a profiled eager
  run of the same calls in adjacent 0.1 s windows, order flipped each round, per-round ratio;
  on the power-capped H200 the clock still moves between such windows at M >= 1024,
* ``sustained``: CUPTI kernel time per call (median) of the last 200 of eager back-to-back calls
  that ran for as long as the timed window (run 4; on the power-capped H200 its clock still
  differed from the timed window's by up to 400 MHz for M >= 256),
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


def interleaved(fn, seconds: float, dev: torch.device, n: int = 8) -> tuple[float | None, float | None, float | None]:
    """Median kernel time per call of graph-launched vs eager-launched calls, interleaved.

    One CUDA graph of ``n`` calls is replayed, then ``n`` eager calls are launched, alternately,
    for ``seconds`` under the profiler; device work is split into blocks of ``n`` calls in time
    order, even blocks from the graph, odd ones eager. Both kinds see the same power/clock state
    (a power-capped GPU moves its clock between windows a second apart, by up to 13 % in run 4),
    so this compares the timer's kernel time inside graphs with the profiler's eager kernel
    time without that confound. ``n``: the timer's calls per sample, so the graph is the one
    the timer replays. Also returns the NVML median SM clock of the window."""
    from torch.profiler import ProfilerActivity, profile

    stream = torch.cuda.Stream(dev)
    stream.wait_stream(torch.cuda.current_stream(dev))
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(n):
            fn()
    pairs = 0
    with torch.cuda.stream(stream):
        graph.replay()
        torch.cuda.synchronize(dev)
        with TelemetrySampler(dev.index or 0) as tel, profile(activities=[ProfilerActivity.CUDA]) as prof:
            t_end = time.perf_counter() + seconds
            while time.perf_counter() < t_end and pairs < max(8, 3200 // n):
                graph.replay()
                for _ in range(n):
                    fn()
                pairs += 1
                if pairs % 8 == 0:
                    torch.cuda.synchronize(dev)
            torch.cuda.synchronize(dev)
    per_call = device_time_per_group(list(prof.events()), 2 * pairs * n)
    del graph
    clock = tel.result.sm_clock_median_mhz if tel.result is not None else None
    if not per_call:
        return None, None, clock
    blocks = [sum(per_call[i:i + n]) / n for i in range(0, len(per_call), n)]
    return statistics.median(blocks[0::2]), statistics.median(blocks[1::2]), clock


def alternating(fn, rounds: int, dev: torch.device, round_s: float = 0.1) -> dict:
    """fp4bench's timer and the profiler's eager kernel time in adjacent windows, ``rounds`` times.

    The H200 is power-capped: its SM clock differs between windows a second apart (by up to
    25 % in run 5 for M >= 1024), which swamps a ±2 % comparison made in separate windows.
    Here each round runs ``time_gpu`` for ``round_s`` and, next to it, the same number of
    seconds of eager calls under the profiler (3 warm-up calls first, as the timer does);
    the order flips every round (timer-eager, eager-timer, ...) so that a monotonic clock
    drift cancels. The per-round ratio compares two measurements ~0.1 s apart."""
    from torch.profiler import ProfilerActivity, profile

    cfg = TimingConfig(mode="graph", time_budget_s=round_s, target_rel_ci=None, min_samples=3, max_samples=1000)
    timer: list[float] = []
    eager: list[float] = []

    def run_eager(calls: int) -> float | None:
        for _ in range(3):
            fn()
        torch.cuda.synchronize(dev)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for i in range(calls):
                fn()
                if i % 32 == 31:
                    torch.cuda.synchronize(dev)
            torch.cuda.synchronize(dev)
        per = device_time_per_group(list(prof.events()), calls)
        return statistics.median(per) if per else None

    est = time_gpu([fn], TimingConfig(mode="graph", time_budget_s=0.02, target_rel_ci=None, min_samples=3), dev).median_s
    calls = max(20, min(2000, int(round_s / est)))
    for r in range(rounds):
        if r % 2:
            e = run_eager(calls)
            t = time_gpu([fn], cfg, dev).median_s
        else:
            t = time_gpu([fn], cfg, dev).median_s
            e = run_eager(calls)
        if e:
            timer.append(t)
            eager.append(e)
    ratios = [t / e - 1 for t, e in zip(timer, eager)]
    return {"rounds": len(ratios), "eager_calls_per_round": calls,
            "timer_median_s": statistics.median(timer) if timer else None,
            "eager_median_s": statistics.median(eager) if eager else None,
            "ratio_median": statistics.median(ratios) if ratios else None,
            "ratio_min": min(ratios) if ratios else None, "ratio_max": max(ratios) if ratios else None,
            "timer_s": timer, "eager_s": eager}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ms", default="1,4,16,64,256,1024,4096,16384")
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--k", type=int, default=6144)
    ap.add_argument("--budget", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=8, help="alternating timer/eager rounds (0: skip)")
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
            il_graph, il_eager, il_clock = interleaved(fn, args.budget, dev, n=res.calls_per_sample)
            alt = alternating(fn, args.rounds, dev) if args.rounds else {}
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
                   "interleaved_graph_s": il_graph, "interleaved_eager_s": il_eager,
                   "interleaved_calls_per_block": res.calls_per_sample, "interleaved_sm_clock_mhz": il_clock,
                   "alternating": alt,
                   "same_kernels": graph_kernels == eager_kernels, "graph_kernels": graph_kernels,
                   "eager_kernels": eager_kernels}
            row["fp4bench_vs_sustained"] = res.median_s / sus - 1 if sus else None
            row["fp4bench_vs_profiler"] = res.median_s / prof - 1 if prof else None
            row["graph_vs_eager_interleaved"] = il_graph / il_eager - 1 if il_graph and il_eager else None
            rows.append(row)
            f = lambda x: x * 1e6 if x else float("nan")  # noqa: E731
            if alt.get("ratio_median") is not None:
                print(f"ALT {name:15s} M={m:6d} timer {f(alt['timer_median_s']):9.2f} us  eager profiler"
                      f" {f(alt['eager_median_s']):9.2f} us  per-round timer/eager - 1: median"
                      f" {alt['ratio_median'] * 100:+6.2f}% [min {alt['ratio_min'] * 100:+6.2f}%,"
                      f" max {alt['ratio_max'] * 100:+6.2f}%] over {alt['rounds']} rounds", flush=True)
            print(f"{name:15s} M={m:6d} fp4bench {f(res.median_s):9.2f} us  sustained {f(sus):9.2f} us"
                  f" d={row['fp4bench_vs_sustained'] * 100 if sus else float('nan'):+6.2f}%"
                  f" | burst {f(prof):9.2f} (before {f(before):.2f}, after {f(after):.2f})"
                  f" d={row['fp4bench_vs_profiler'] * 100 if prof else float('nan'):+6.2f}%"
                  f" | clock sustained {sus_tel['sm_clock_mhz']} timed {row['timed_sm_clock_mhz']} MHz"
                  f" | interleaved x{res.calls_per_sample} graph {f(il_graph):9.2f} eager {f(il_eager):9.2f} us"
                  f" at {il_clock} MHz"
                  f" d={row['graph_vs_eager_interleaved'] * 100 if row['graph_vs_eager_interleaved'] is not None else float('nan'):+6.2f}%"
                  f" | span {f(span):9.2f} naive {f(naive):9.2f} | same kernels {row['same_kernels']}"
                  f" [{res.method}]", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "timing_fidelity.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
