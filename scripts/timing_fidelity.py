"""Timing fidelity on a GPU: our per-GEMM time vs the profiler's kernel time (issue 3 acceptance).

For a GLM-5 gate_up shape (N = 2·2048, K = 6144) and M = 1 … 16384 it measures, for bf16
``torch.mm`` and FP8 rowwise ``torch._scaled_mm``:

* ``fp4bench``: fp4bench's default timer (CUDA graph of N calls; CUPTI busy time per replay / N), hot L2,
* ``profiler``: torch.profiler (CUPTI) kernel durations of 30 eager back-to-back calls, per call,
  measured just before and just after the timed window (mean of both: power/clock drift),
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

import torch

from fp4bench.measure.kernels import kernel_times
from fp4bench.measure.timing import TimingConfig, time_gpu


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
            before = kernel_times(fn, repeats=30).per_call_s  # eager launches, CUPTI kernel durations
            res = time_gpu([fn], cfg, dev)  # fp4bench's timer: CUPTI busy time inside graph replays
            after = kernel_times(fn, repeats=30).per_call_s
            prof = (before + after) / 2 if before and after else None  # brackets the timed window
            naive = naive_events(fn)
            span = res.extra.get("span_median_s")
            row = {"op": name, "m": m, "n": args.n, "k": args.k, "fp4bench_s": res.median_s, "timer": res.method,
                   "calls_per_sample": res.calls_per_sample, "samples": len(res.samples_s),
                   "rel_ci95": res.rel_ci, "profiler_s": prof, "profiler_before_s": before, "profiler_after_s": after,
                   "graph_span_s": span, "naive_events_s": naive}
            row["fp4bench_vs_profiler"] = res.median_s / prof - 1 if prof else None
            rows.append(row)
            print(f"{name:15s} M={m:6d} fp4bench {res.median_s * 1e6:9.2f} us  profiler {prof * 1e6 if prof else float('nan'):9.2f} us"
                  f" (before {before * 1e6 if before else float('nan'):.2f}, after {after * 1e6 if after else float('nan'):.2f})"
                  f"  graph-span {span * 1e6 if span else float('nan'):9.2f} us  naive-events {naive * 1e6:9.2f} us"
                  f"  d={row['fp4bench_vs_profiler'] * 100 if prof else float('nan'):+6.2f}%  [{res.method}]", flush=True)
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "timing_fidelity.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
