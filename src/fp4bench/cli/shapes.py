"""``fp4bench shapes --models M --batches B [--tp T] [--gpu NAME] [--format F]``: the GEMMs one
decode step of an MoE layer runs, per role, with their M, N, K, tokens per expert, FLOP/byte and where
that sits against the GPU's ridge point (intensity below the ridge = bandwidth-bound)."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, run

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


def build_parser() -> argparse.ArgumentParser:
    return parser("shapes", description=plain(__doc__))


def shapes_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _shapes)


def _shapes(args: argparse.Namespace) -> int:
    from fp4bench.measure.peaks import gpu_by_name, known_gpus
    from fp4bench.options.values import parse_batches, parse_models, parse_routings, parse_tps, split_list
    from fp4bench.workload.decode import decode_problems
    from fp4bench.workload.problems import BYTES_PER_ELEMENT

    try:
        models = parse_models(args.models, "models")
        batches = parse_batches(args.batches, "batch")
        tps = parse_tps(args.tp, models, "tp")
        parse_routings(args.routing, "routing")
        routings = split_list(args.routing, "routing")
        fmts = {m.name: args.format or m.fp4_format for m in models}
        for fmt in fmts.values():
            if fmt not in BYTES_PER_ELEMENT:
                raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(BYTES_PER_ELEMENT)}")
        gpu = args.gpu or detected_gpu()
        peaks = gpu_by_name(gpu) if gpu else None
        blocks = [(m, tp, r, {b: decode_problems(m, b, tp, r) for b in batches})
                  for m in models for tp in tps for r in routings]
    except ValueError as exc:
        return fail(PROG, exc, None)
    said = None  # the format whose ridge point was printed last
    for model, tp, routing, problems in blocks:
        fmt = fmts[model.name]
        ridge = None if peaks is None else peaks.ridge_point(fmt)
        if said != fmt:
            said = fmt
            if peaks is not None:
                print(f"{peaks.name}: ridge point " + (f"{ridge:.0f} FLOP/B for {fmt}" if ridge is not None else
                      f"n/a: no {fmt} tensor-core peak (e.g. no FP4 on Hopper)") +
                      f", {peaks.memory_type} {peaks.bandwidth_tbs:g} TB/s" + ("" if args.gpu else " (detected GPU)"))
            else:
                print(f"no GPU detected: no ridge point (give --gpu, one of {', '.join(known_gpus())})")
        _print_block(model, tp, routing, fmt, ridge, problems)
    print("M of a grouped role = routed rows summed over experts; tok/expert = batch·top_k/E (mean); "
          "FLOP/B counts each operand once, block scales included, bf16 output")
    return 0


def _print_block(model, tp: int, routing: str, fmt: str, ridge: float | None, problems: dict) -> None:
    """One model, TP size and routing: a row per role and batch."""
    from fp4bench.workload.decode import mean_tokens_per_expert

    print(f"{model.name}: H={model.hidden} I={model.moe_intermediate} E={model.num_experts} top_k={model.top_k} "
          f"TP={tp} format={fmt} routing={routing}")
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
