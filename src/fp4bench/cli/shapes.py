"""``fp4bench shapes --model M --batch B [--tp T] [--gpu NAME] [--format F]``: the GEMMs one decode
step of an MoE layer runs, per role, with their M, N, K, tokens per expert, FLOP/byte and where
that sits against the GPU's ridge point (intensity below the ridge = bandwidth-bound)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.options.registry import plain

PROG = "fp4bench shapes"


def detected_gpu() -> str | None:
    """The name of the first GPU this process may use (``gpus.devices``, from NVML: no torch
    import, ``CUDA_VISIBLE_DEVICES`` honoured); None without a GPU or NVML."""
    from fp4bench.gpus.devices import GpuListError, visible_gpus

    try:
        seen = visible_gpus()
    except GpuListError:
        return None
    return seen[0].name if seen else None


def shapes_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=plain(__doc__))
    ap.add_argument("--model", default="glm-5", help="model name or alias (default %(default)s)")
    ap.add_argument("--batch", default="512", help="decode batch sizes, comma-separated (default %(default)s)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel size (default %(default)d)")
    ap.add_argument("--routing", default="uniform", help="uniform or zipf:<s> (default %(default)s)")
    ap.add_argument("--format", default=None, help="operand format (default: the model's FP4 format)")
    from fp4bench.measure.peaks import known_gpus

    ap.add_argument("--gpu", default=None, help=f"GPU for the ridge point: {', '.join(known_gpus())}, or the name "
                    "nvidia-smi shows (default: the detected GPU; none detected: no ridge point)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code in (0, None) else 2
    from fp4bench.measure.peaks import gpu_by_name
    from fp4bench.workload.problems import BYTES_PER_ELEMENT
    from fp4bench.options.registry import parse_batches
    from fp4bench.workload.decode import decode_problems, get_model, mean_tokens_per_expert

    try:
        model = get_model(args.model)
        batches = parse_batches(args.batch, "batch")
        fmt = args.format or model.fp4_format
        if fmt not in BYTES_PER_ELEMENT:
            raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(BYTES_PER_ELEMENT)}")
        gpu = args.gpu or detected_gpu()
        peaks = gpu_by_name(gpu) if gpu else None
        problems = {b: decode_problems(model, b, args.tp, args.routing) for b in batches}
    except ValueError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    ridge = None
    if peaks is not None:
        ridge = peaks.ridge_point(fmt)
        print(f"{peaks.name}: ridge point " + (f"{ridge:.0f} FLOP/B for {fmt}" if ridge is not None else
              f"n/a: no {fmt} tensor-core peak (e.g. no FP4 on Hopper)") +
              f", {peaks.memory_type} {peaks.bandwidth_tbs:g} TB/s" + ("" if args.gpu else " (detected GPU)"))
    else:
        print(f"no GPU detected: no ridge point (give --gpu, one of {', '.join(known_gpus())})")
    print(f"{model.name}: H={model.hidden} I={model.moe_intermediate} E={model.num_experts} top_k={model.top_k} "
          f"TP={args.tp} format={fmt} routing={args.routing}")
    header = f"{'batch':>6} {'role':<15} {'M':>6} {'N':>6} {'K':>6} {'tok/expert':>10} {'active':>6} " \
             f"{'max rows':>8} {'FLOP/B':>8}  bound"
    print(header)
    for b, probs in problems.items():
        tpe = mean_tokens_per_expert(model, b)
        for p in probs:
            if p.kind == "moe":
                continue  # the fused layer is its two grouped GEMMs, listed above it
            rows = p.expert_rows
            active, maxrows, per_expert = ("-", "-", "-") if rows is None else \
                (str(sum(1 for r in rows if r)), str(max(rows)), f"{tpe:.2f}")
            intensity = p.flops / p.bytes_moved(fmt)
            bound = "-" if ridge is None else ("bandwidth" if intensity < ridge else "compute")
            print(f"{b:>6} {p.origin.role:<15} {p.rows:>6} {p.n:>6} {p.k:>6} {per_expert:>10} {active:>6} "
                  f"{maxrows:>8} {intensity:>8.1f}  {bound}")
    print("M of a grouped role = routed rows summed over experts; tok/expert = batch·top_k/E (mean); "
          "FLOP/B counts each operand once, block scales included, bf16 output")
    return 0
