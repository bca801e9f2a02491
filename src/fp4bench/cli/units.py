"""``fp4bench units [--gpus all] [sweep options]``: is any GPU of this host slower than its siblings?

Measures the same small set of benchmarks on every chosen GPU at once, each GPU by its own worker
process pinned to it by UUID, in independent windows, and judges each unit against its siblings
with the project's rule (``fp4bench.units``); the unit table shows each GPU's power limit, SM
clock, power, temperature and throttle reasons during its windows. Exit 0 = no unit flagged,
1 = a unit flagged (slower than its siblings beyond the floor, or wrong output), 2 = usage error,
3 = incomplete (one GPU: nothing to compare; a benchmark left unjudged; an interrupted check).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from fp4bench.cli.command import EXIT_INCOMPLETE, fail, parser, plain, print_safely, run
from fp4bench.outputs import check_outputs, is_stdout, write_document

PROG = "fp4bench units"
#: ``--device`` values a worker pinned to one GPU can take: inside it that GPU is ``cuda:0``
PINNED_DEVICES = (None, "cpu", "cuda", "cuda:0")


def build_parser() -> argparse.ArgumentParser:
    return parser("units", description=plain(__doc__.split("\n\n")[1]),
                  epilog="exit status: 0 no unit flagged, 1 a unit flagged, 2 usage error, 3 incomplete (one GPU: "
                         "nothing to compare)")


def _nothing_to_compare(gpus, args) -> int:
    only = f"GPU {gpus[0].index} ({gpus[0].uuid})"
    summary = f"1 GPU: {only}; nothing to compare a unit with → incomplete (exit 3)"
    print(f"{PROG}: {summary}")
    if args.verdict_json:
        write_document(args.verdict_json, json.dumps({"units": [{"index": gpus[0].index, "uuid": gpus[0].uuid,
                                                        "name": gpus[0].name}], "benchmarks": [],
                                            "exit_code": EXIT_INCOMPLETE, "summary": summary}, indent=2) + "\n")
    return EXIT_INCOMPLETE


def units_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _units)


def _units(args: argparse.Namespace) -> int:
    from fp4bench.gate.rule import RuleSettings
    from fp4bench.gpus.devices import GpuListError, visible_gpus
    from fp4bench.gpus.select import one_model, select_gpus
    from fp4bench.run.sweep import SweepOptions, sweep_options
    from fp4bench.units.judge import judge, outcome, report, to_json
    from fp4bench.units.run import UnitRunner, UnitsConfig

    def given(name: str):
        return getattr(args, name.replace("-", "_"), None)

    try:
        check_outputs({"--verdict-json": args.verdict_json}, (), args.force)
        sweep_options(given, {}, on_gpu=False)  # a bad value is a usage error before any worker starts
        if args.device not in PINNED_DEVICES:
            raise ValueError(f"--device {args.device}: each worker sees only its own GPU, as cuda:0 "
                             "(leave --device out)")
        if any(k == "CUDA_VISIBLE_DEVICES" for k, _ in args.env):
            raise ValueError("--env CUDA_VISIBLE_DEVICES: each worker is pinned to its GPU; choose GPUs with --gpus")
        try:
            gpus = select_gpus(args.gpus, visible_gpus())
        except GpuListError as exc:
            raise ValueError(f"--gpus: {exc}") from None
        one_model(gpus)
        if args.max_windows < args.windows:
            raise ValueError(f"--max-windows {args.max_windows} is below --windows {args.windows}")
        cfg = UnitsConfig(sweep=SweepOptions(), python=args.python or sys.executable, env=dict(args.env),
                          plugins=tuple(args.plugin), device=args.device, windows=args.windows,
                          max_windows=args.max_windows, window_samples=args.window_samples,
                          time_budget_s=args.run_budget, timeout_s=args.case_timeout,
                          settings=RuleSettings(floor=args.floor / 100.0), cold_l2=args.l2 == "cold", seed=args.seed)
        if len(gpus) < 2:
            return _nothing_to_compare(gpus, args)
        runner = UnitRunner(gpus, cfg)
    except ValueError as exc:
        return fail(PROG, exc)
    try:
        measured = runner.run(lambda fp: sweep_options(given, {}, on_gpu=fp.get("gpu_name") != "cpu"))
    except (RuntimeError, ValueError) as exc:  # no worker could start or list: nothing to judge
        return fail(PROG, exc)
    result = judge(measured, fail_on_ambiguous=args.fail_on_ambiguous)
    print_safely(report(measured, result))
    if args.verdict_json:
        write_document(args.verdict_json, json.dumps(to_json(measured, result), indent=2, default=str) + "\n")
        if not is_stdout(args.verdict_json):
            print(f"verdicts written to {args.verdict_json}")
    return outcome(measured, result)[0]
