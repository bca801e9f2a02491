"""``fp4bench ab --a PY_OR_VENV --b PY_OR_VENV [sweep options]``: may this stack be upgraded?

Runs the sweep in both environments on this GPU, interleaved (``fp4bench.ab``), and judges B
against A with the regression gate. Exit 0 = no regression, 1 = regression, 2 = usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from fp4bench.cli_compare import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, _alpha, _percent, _print_safely

PROG = "fp4bench ab"


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[1],
                                 epilog="exit status: 0 no regression, 1 regression, 2 usage error")
    ap.add_argument("--a", required=True, help="current stack: python interpreter or venv directory")
    ap.add_argument("--b", required=True, help="candidate stack: python interpreter or venv directory")
    ap.add_argument("--a-env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE")
    ap.add_argument("--b-env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE")
    ap.add_argument("--b-inject-slowdown", type=float, default=0.0,
                    help="TEST-ONLY: add this fraction of GPU time to every timed call of side B")
    ap.add_argument("--models", default="glm-5")
    ap.add_argument("--batches", default=None, help="default 1,64,512 on a GPU, 1,16 on a CPU")
    ap.add_argument("--tp", default="1")
    ap.add_argument("--routing", default="uniform")
    ap.add_argument("--kinds", default="dense,grouped,moe")
    ap.add_argument("--backends", default=None)
    ap.add_argument("--tactics", choices=("default", "all"), default="default")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None)
    ap.add_argument("--plugin", action="append", default=[], help="backend module to load on both sides")
    ap.add_argument("--rounds", type=int, default=8, help="timing rounds per side and benchmark (default 8)")
    ap.add_argument("--round-samples", type=int, default=10, help="samples per round (default 10)")
    ap.add_argument("--case-timeout", type=float, default=900.0, help="seconds before a request is a hang")
    ap.add_argument("--timer", choices=("span", "cupti"), default="span",
                    help="span: graph-replay event span per call, profiler kept out of the rounds (default); "
                         "cupti: kernel busy time, every round profiled (slower)")
    ap.add_argument("--l2", choices=("cold", "hot"), default="cold")
    ap.add_argument("--floor", type=_percent, default=5.0)
    ap.add_argument("--drift", type=_percent, default=2.0)
    ap.add_argument("--alpha", type=_alpha, default=0.05)
    ap.add_argument("--json", default=None, help="write the verdicts as JSON here")
    return ap


def ab_main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    from fp4bench.ab.judge import judge, report, to_json
    from fp4bench.ab.run import AbConfig, AbRunner, Side
    from fp4bench.gate.verdict import Policy
    from fp4bench.sweep import SweepOptions
    from fp4bench.workloads import parse_ints, parse_models, parse_tps

    try:
        if args.rounds < 1 or args.round_samples < 3:
            raise ValueError(f"need --rounds >= 1 and --round-samples >= 3, got {args.rounds}, {args.round_samples}")
        if not 0 <= args.b_inject_slowdown < 10:
            raise ValueError(f"--b-inject-slowdown is a fraction (0.05 = 5 %), got {args.b_inject_slowdown}")
        models = parse_models(args.models)
        kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
        bad = [k for k in kinds if k not in ("dense", "grouped", "moe")]
        if bad:
            raise ValueError(f"--kinds: unknown kind(s) {bad}; use dense, grouped, moe")
        policy = Policy(floor=args.floor / 100, drift=args.drift / 100, alpha=args.alpha)

        def sweep_for(fp: dict) -> SweepOptions:
            batches = args.batches or ("1,16" if fp.get("gpu_name") == "cpu" else "1,64,512")
            return SweepOptions(models=tuple(m.name for m in models), batches=parse_ints(batches, "batch"),
                                tps=parse_tps(args.tp, models),
                                routings=tuple(r.strip() for r in args.routing.split(",") if r.strip()),
                                kinds=kinds, full=args.full, tactics="all" if args.full else args.tactics,
                                seed=args.seed,
                                backends=tuple(b.strip() for b in args.backends.split(",")) if args.backends else None)

        sides = (Side(args.a, dict(args.a_env)), Side(args.b, dict(args.b_env), args.b_inject_slowdown))
        runner = AbRunner(*sides, AbConfig(sweep=SweepOptions(), device=args.device, pairs=args.rounds,
                                           round_samples=args.round_samples, timeout_s=args.case_timeout, timer=args.timer,
                                           plugins=tuple(args.plugin), cold_l2=args.l2 == "cold", seed=args.seed))
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        run = runner.run(sweep_for)
        result = judge(run, policy)
    except (RuntimeError, ValueError) as exc:  # a side that cannot start or list: nothing to judge
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _print_safely(report(run, result))
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(run, result), indent=2, default=str) + "\n")
        print(f"verdicts written to {args.json}")
    return EXIT_REGRESSION if result.exit_code or run.not_reached else EXIT_OK
