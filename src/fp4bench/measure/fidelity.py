"""Timer fidelity: is fp4bench's time per call the kernels' own time? (``fp4bench fidelity``)

fp4bench's timer (``timing.time_gpu``) captures N back-to-back calls into a CUDA graph and takes
CUPTI busy time per replay / N. The question is whether a kernel takes as long inside that graph
as when launched eagerly, the way a profiler (Nsight, ``torch.profiler``) measures it.

The reference must see the same power state: on a power-capped GPU (an H200 at its 700 W cap
for M >= 256) the SM clock moves by hundreds of MHz between windows a second apart, and a
kernel's time with it. So the check is *interleaved*: the timer's own graph (same N) is
replayed, then N eager calls are launched, alternately, within one profiled window; per call
CUPTI kernel time of each, median over blocks. It also checks that the graph launched exactly
the kernels of an eager call (``same_kernels``).

The ops are bf16 ``torch.mm`` and FP8 rowwise ``torch._scaled_mm`` on a GEMM shape (default the
GLM-5 routed-expert gate_up projection N = 2 x 2048, K = 6144) for a range of M.
"""

from __future__ import annotations

import statistics
from fp4bench import clock
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch

from fp4bench.measure.kernels import device_time_per_group, kernel_names
from fp4bench.measure.telemetry import for_device
from fp4bench.measure.timing import TimingConfig, time_gpu

Fn = Callable[[], Any]


@dataclass(frozen=True)
class FidelityRow:
    """One op at one M: fp4bench's timer and the interleaved graph / eager kernel times."""

    op: str
    m: int
    n: int
    k: int
    timer_s: float  # fp4bench's median, own window
    timer_method: str
    calls_per_sample: int
    graph_s: float | None  # interleaved: kernel time per call inside the timer's graph
    eager_s: float | None  # interleaved: kernel time per eager call, same window
    sm_clock_mhz: float | None  # NVML median SM clock of the interleaved window
    same_kernels: bool
    graph_kernels: tuple[str, ...]
    eager_kernels: tuple[str, ...]

    @property
    def delta(self) -> float | None:
        """graph / eager - 1 in the same window: the timer's error against a profiler."""
        return self.graph_s / self.eager_s - 1 if self.graph_s and self.eager_s else None

    def ok(self, tolerance: float) -> bool:
        return self.same_kernels and self.delta is not None and abs(self.delta) <= tolerance

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "delta": self.delta}


def split_interleaved(per_call_s: Sequence[float], n: int) -> tuple[float, float]:
    """Median per-call time of the graph blocks and of the eager blocks.

    ``per_call_s`` are the device times of 2·pairs·n calls in time order: blocks of ``n`` calls,
    even blocks from graph replays, odd ones eager."""
    if n < 1 or not per_call_s or len(per_call_s) % (2 * n):
        raise ValueError(f"{len(per_call_s)} calls do not split into graph/eager blocks of {n}")
    blocks = [sum(per_call_s[i:i + n]) / n for i in range(0, len(per_call_s), n)]
    return statistics.median(blocks[0::2]), statistics.median(blocks[1::2])


def interleaved(fn: Fn, seconds: float, dev: torch.device, n: int) -> tuple[float | None, float | None, float | None]:
    """(graph, eager, SM clock): kernel time per call of a graph of ``n`` calls vs ``n`` eager
    calls, alternating for ``seconds`` (at most 3200 calls of each) under one profiler window."""
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
        with for_device(dev) as tel, profile(activities=[ProfilerActivity.CUDA]) as prof:
            t_end = clock.now() + seconds
            while clock.now() < t_end and pairs < max(8, 3200 // n):
                graph.replay()
                for _ in range(n):
                    fn()
                pairs += 1
                if pairs % 8 == 0:  # bounded launch queue, the GPU stays busy
                    torch.cuda.synchronize(dev)
            torch.cuda.synchronize(dev)
    per_call = device_time_per_group(list(prof.events()), 2 * pairs * n)
    del graph
    sm_clock = tel.result.sm_clock_median_mhz if tel.result is not None else None
    if not per_call:
        return None, None, sm_clock
    graph_s, eager_s = split_interleaved(per_call, n)
    return graph_s, eager_s, sm_clock


def gemm_ops(m: int, n: int, k: int, dev: torch.device, gen: torch.Generator) -> dict[str, Fn]:
    """bf16 ``torch.mm`` and FP8 rowwise ``torch._scaled_mm`` of an (M, K) x (K, N) GEMM."""
    a = torch.randn(m, k, device=dev, generator=gen).to(torch.bfloat16)
    w = (torch.randn(n, k, device=dev, generator=gen) * k ** -0.5).to(torch.bfloat16)
    out = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    sa, sb = torch.ones(m, 1, device=dev), torch.ones(1, n, device=dev)
    return {
        "bf16 torch.mm": lambda: torch.mm(a, w.t(), out=out),
        "fp8 _scaled_mm": lambda: torch._scaled_mm(a8, w8.t(), sa, sb, out_dtype=torch.bfloat16, out=out),
    }


def measure(op: str, fn: Fn, m: int, n: int, k: int, dev: torch.device, budget_s: float) -> FidelityRow:
    """Time ``fn`` with fp4bench's timer (hot L2), then the interleaved reference with its N."""
    cfg = TimingConfig(mode="graph", time_budget_s=budget_s, target_rel_ci=0.002, max_samples=200)
    res = time_gpu([fn], cfg, dev)
    graph_s, eager_s, clock = interleaved(fn, budget_s, dev, n=res.calls_per_sample)
    graph_k = tuple(res.extra.get("kernels", ()))
    eager_k = tuple(kernel_names(fn, repeats=3))
    return FidelityRow(op=op, m=m, n=n, k=k, timer_s=res.median_s, timer_method=res.method,
                       calls_per_sample=res.calls_per_sample, graph_s=graph_s, eager_s=eager_s,
                       sm_clock_mhz=clock, same_kernels=graph_k == eager_k, graph_kernels=graph_k,
                       eager_kernels=eager_k)


def run(ms: Sequence[int], n: int, k: int, budget_s: float, dev: torch.device,
        on_row: Callable[[FidelityRow], None] | None = None) -> list[FidelityRow]:
    """Every op at every M; ``on_row`` sees each row as it is measured (progress output)."""
    if dev.type != "cuda" or not torch.cuda.is_available():
        raise RuntimeError(f"timer fidelity needs a CUDA device, got {dev} "
                           f"(torch.cuda.is_available() = {torch.cuda.is_available()})")
    gen = torch.Generator(device=dev).manual_seed(0)
    rows = []
    for m in ms:
        for op, fn in gemm_ops(m, n, k, dev, gen).items():
            row = measure(op, fn, m, n, k, dev, budget_s)
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def _us(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e6:.2f}"


def format_row(row: FidelityRow, tolerance: float) -> str:
    d = "-" if row.delta is None else f"{row.delta * 100:+.2f}%"
    clock = "-" if row.sm_clock_mhz is None else f"{row.sm_clock_mhz:.0f}"
    verdict = "ok" if row.ok(tolerance) else ("KERNELS DIFFER" if not row.same_kernels else "OUT")
    return (f"{row.op:<15} {row.m:>6} {row.calls_per_sample:>5} {_us(row.timer_s):>10} {_us(row.graph_s):>10} "
            f"{_us(row.eager_s):>10} {d:>8} {clock:>6}  {verdict}")


HEADER = (f"{'op':<15} {'M':>6} {'calls':>5} {'timer µs':>10} {'graph µs':>10} {'eager µs':>10} {'Δ':>8} "
          f"{'MHz':>6}  verdict")
