"""``fp4bench workload [--models M] [--batches B] [--tp T]``: the decode arithmetic of a model's MoE
layer: tokens per expert, active experts and the FLOP per byte of its two grouped GEMMs."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, run

PROG = "fp4bench workload"


def build_parser() -> argparse.ArgumentParser:
    return parser("workload", description=plain(__doc__))


def workload_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _workload)


def _workload(args: argparse.Namespace) -> int:
    from fp4bench.options.values import parse_ints, parse_models, parse_tps
    from fp4bench.workload.decode import arithmetic_intensity, expected_active_experts, mean_tokens_per_expert

    try:
        models = parse_models(args.models, "models")
        batches = parse_ints(args.batches, "batch")
        tps = parse_tps(args.tp, models, "tp")
    except ValueError as exc:
        return fail(PROG, exc, None)
    for m in models:
        for tp in tps:
            (gn, gk), (dn, dk) = m.gate_up_nk(tp), m.down_nk(tp)
            print(f"{m.name}: H={m.hidden} I={m.moe_intermediate} E={m.num_experts} top_k={m.top_k} TP={tp}")
            print(f"{'batch':>6} {'tokens/expert':>14} {'active experts':>15} {'gate_up FLOP/B':>15} {'down FLOP/B':>12}")
            for b in batches:
                t = mean_tokens_per_expert(m, b)
                act = expected_active_experts(m.num_experts, m.top_k, b)
                print(f"{b:>6} {t:>14.2f} {act:>15.1f} {arithmetic_intensity(t, gn, gk):>15.2f} "
                      f"{arithmetic_intensity(t, dn, dk):>12.2f}")
    return 0
