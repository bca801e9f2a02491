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

from fp4bench.cli_compare import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, _print_safely
from fp4bench.options import FLOOR_DRIFT_ALPHA, SWEEP, add_options, plain, policy_kwargs

PROG = "fp4bench ab"


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description=plain(__doc__.split("\n\n")[1]),
                                 epilog="exit status: 0 no regression, 1 regression, 2 usage error")
    ap.add_argument("--a", required=True, help="current stack: python interpreter or venv directory")
    ap.add_argument("--b", required=True, help="candidate stack: python interpreter or venv directory")
    ap.add_argument("--a-env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE",
                    help="environment variable only side A gets (repeatable)")
    ap.add_argument("--b-env", action="append", type=_env_pair, default=[], metavar="KEY=VALUE",
                    help="environment variable only side B gets (repeatable)")
    ap.add_argument("--a-plugin", action="append", default=[], metavar="MODULE",
                    help="backend module only side A loads (repeatable; --plugin loads one on both sides)")
    ap.add_argument("--b-plugin", action="append", default=[], metavar="MODULE",
                    help="backend module only side B loads, e.g. fp4bench.testing.slowdown with "
                         "--b-env FP4BENCH_SLOWDOWN=torch-bf16=0.05 to test the gate")
    add_options(ap.add_argument, SWEEP)
    ap.add_argument("--rounds", type=int, default=8, help="timing rounds per side and benchmark (default 8)")
    ap.add_argument("--round-samples", type=int, default=10, help="samples per round (default 10)")
    ap.add_argument("--case-timeout", type=float, default=900.0, help="seconds before a request is a hang (default %(default)g)")
    ap.add_argument("--timer", choices=("span", "cupti"), default="span",
                    help="span: graph-replay event span per call, profiler kept out of the rounds (default); "
                         "cupti: kernel busy time, every round profiled (slower)")
    add_options(ap.add_argument, FLOOR_DRIFT_ALPHA)
    ap.add_argument("--json", default=None, help="write the verdicts as JSON here (default: not written)")
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
    from fp4bench.sweep import SweepOptions, sweep_options

    try:
        if args.rounds < 1 or args.round_samples < 3:
            raise ValueError(f"need --rounds >= 1 and --round-samples >= 3, got {args.rounds}, {args.round_samples}")

        def given(name: str):
            return getattr(args, name.replace("-", "_"), None)

        sweep_options(given, {}, on_gpu=False)  # a bad value is a usage error before any worker starts
        policy = Policy(**policy_kwargs(given))

        def sweep_for(fp: dict) -> SweepOptions:
            return sweep_options(given, {}, on_gpu=fp.get("gpu_name") != "cpu")

        sides = (Side(args.a, dict(args.a_env), tuple(args.a_plugin)), Side(args.b, dict(args.b_env), tuple(args.b_plugin)))
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
