"""``fp4bench ab --a PY_OR_VENV --b PY_OR_VENV [sweep options]``: may this stack be upgraded?

Runs the sweep in both environments on this GPU, several worker processes per side with their
rounds interleaved (``fp4bench.ab``), and judges B against A with the replicate rule. With
``--gpus`` the benchmarks are spread over several GPUs of the host, each benchmark's A and B on
the same GPU (``ab.multi``), and judged as one run. Exit 0 = no regression, 1 = regression,
2 = usage error, 3 = incomplete (nothing judged, a benchmark left unjudged by a lost worker or a
GPU whose run crashed, an interrupted run).
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from typing import Sequence

from fp4bench.cli.compare import EXIT_USAGE, _print_safely
from fp4bench.options.registry import (AB_GPUS, GATE, SWEEP, add_options, at_least, env_pair, plain, positive_seconds,
                              split_list)
from fp4bench.outputs import check_outputs, write_atomic

PROG = "fp4bench ab"


#: the gate options ab takes: the floor (its own default: two stacks side by side on one GPU
#: resolve smaller changes than runs minutes apart) and the missing/ambiguous policy flags
AB_FLOOR = dataclasses.replace(GATE[0], default=3.0)
POLICY_FLAGS = tuple(o for o in GATE if o.name in ("allow-missing", "allow-ambiguous", "fail-on-ambiguous"))


def build_parser() -> argparse.ArgumentParser:
    from fp4bench.ab.defaults import DEFAULTS as d

    ap = argparse.ArgumentParser(prog=PROG, description=plain(__doc__.split("\n\n")[1]),
                                 epilog="exit status: 0 no regression, 1 regression, 2 usage error, 3 incomplete")
    ap.add_argument("--a", required=True, help="current stack: python interpreter or venv directory")
    ap.add_argument("--b", required=True, help="candidate stack: python interpreter or venv directory")
    ap.add_argument("--a-env", action="append", type=env_pair, default=[], metavar="KEY=VALUE",
                    help="environment variable only side A gets (repeatable)")
    ap.add_argument("--b-env", action="append", type=env_pair, default=[], metavar="KEY=VALUE",
                    help="environment variable only side B gets (repeatable)")
    ap.add_argument("--a-plugin", action="append", default=[], metavar="MODULE",
                    help="backend module only side A loads (repeatable; --plugin loads one on both sides)")
    ap.add_argument("--b-plugin", action="append", default=[], metavar="MODULE",
                    help="backend module only side B loads, e.g. fp4bench.testing.slowdown with "
                         "--b-env FP4BENCH_SLOWDOWN=torch-bf16=0.05 to test the gate")
    add_options(ap.add_argument, SWEEP)
    ap.add_argument("--replicates", type=at_least(2), default=d.replicates,
                    help="worker processes per side, each an independent replicate (default %(default)d)")
    ap.add_argument("--rounds", type=at_least(2), default=d.rounds,
                    help="timing rounds every benchmark gets, each visiting every process (default %(default)d)")
    ap.add_argument("--max-rounds", type=at_least(2), default=d.max_rounds,
                    help="rounds an undecided benchmark may grow to (default %(default)d)")
    ap.add_argument("--max-resident", type=at_least(2), default=None,
                    help="at most this many processes hold one benchmark at once; beyond it the process pairs "
                         "take turns (default: as many as the GPU's free memory holds, read at the first capture)")
    ap.add_argument("--placement", choices=("round", "process"), default=d.placement,
                    help="process: one placement set per process and benchmark (each capture already rotates over "
                         "--min-copies operand copies, each its own allocation); round: also every round after a "
                         "process's first in fresh device memory, ~0.3-0.7 s more a round and process "
                         "(default %(default)s)")
    ap.add_argument("--round-samples", type=at_least(3), default=d.round_samples,
                    help="samples per process and round, at most: a benchmark whose replay is longer than "
                         f"{d.round_s:g} s / this takes fewer, at least 3, the same on both sides "
                         "(default %(default)d)")
    ap.add_argument("--time-budget", type=positive_seconds, default=d.time_budget_s,
                    help="seconds for the whole run: rounds/processes are added to undecided benchmarks only "
                         "while the run fits in it (default %(default)g)")
    ap.add_argument("--benchmark-budget", type=positive_seconds, default=d.benchmark_budget_s,
                    help="seconds of added measurement one benchmark may take (default %(default)g)")
    ap.add_argument("--case-timeout", type=positive_seconds, default=d.timeout_s,
                    help="seconds before a request is a hang (default %(default)g)")
    ap.add_argument("--timer", choices=("span", "cupti"), default="span",
                    help="span: graph-replay event span per call, profiler kept out of the rounds (default); "
                         "cupti: kernel busy time, every round profiled (slower)")
    add_options(ap.add_argument, (AB_FLOOR, *POLICY_FLAGS, AB_GPUS))
    ap.add_argument("--json", default=None, help="write the verdicts as JSON here (checked before the run; default: not written)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    return ap


def check_backends(requested: str | None, plugins: Sequence[str]) -> None:
    """A ``--backends`` name no backend has is a usage error naming it and the known ones. The
    known ones: this process's registry plus the backends of every ``--plugin`` module it can
    import (a module only a worker's environment has leaves its names to the workers' listing)."""
    if not requested:
        return
    from fp4bench.backends.registry import all_backends

    known = {b.name for b in all_backends()}
    for mod in plugins:
        try:
            known |= {b.name for b in getattr(importlib.import_module(mod), "BACKENDS", [])}
        except Exception:
            return  # cannot know every name here: the workers' listing decides (``unknown_backends``)
    unknown_backends(split_list(requested, "--backends"), known)


#: ``--device`` values a worker pinned to one GPU can take: inside it that GPU is ``cuda:0``
PINNED_DEVICES = (None, "cpu", "cuda", "cuda:0")


def chosen_gpus(args: argparse.Namespace):
    """The GPUs ``--gpus`` names (None without it); ``ValueError`` for a GPU that is not visible,
    more GPUs than exist, GPUs of two models, or a ``--device`` / ``CUDA_VISIBLE_DEVICES`` that
    would move a pinned worker off its GPU."""
    if args.gpus is None:
        return None
    from fp4bench.gpus.devices import GpuListError, visible_gpus
    from fp4bench.gpus.select import one_model, select_gpus

    try:
        gpus = select_gpus(args.gpus, visible_gpus())
    except GpuListError as exc:
        raise ValueError(f"--gpus: {exc}") from None
    one_model(gpus)
    if args.device not in PINNED_DEVICES:
        raise ValueError(f"--device {args.device} with --gpus: each worker sees only its own GPU, as cuda:0 "
                         "(leave --device out)")
    for flag, env in (("--a-env", args.a_env), ("--b-env", args.b_env)):
        if any(k == "CUDA_VISIBLE_DEVICES" for k, _ in env):
            raise ValueError(f"{flag} CUDA_VISIBLE_DEVICES with --gpus: --gpus pins each worker to its GPU")
    return gpus


def unknown_backends(names: Sequence[str], known: set[str]) -> None:
    bad = [n for n in names if n not in known]
    if bad:
        raise ValueError(f"--backends: unknown backend{'s' if len(bad) > 1 else ''} {', '.join(bad)}; "
                         f"known: {', '.join(sorted(known))}")


def ab_main(argv: Sequence[str] | None = None) -> int:
    ap = build_parser()
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code in (0, None) else EXIT_USAGE
    from fp4bench.ab.judge import judge, outcome, report, to_json
    from fp4bench.ab.config import AbConfig, Side
    from fp4bench.ab.run import AbRunner
    from fp4bench.gate.rule import RuleSettings
    from fp4bench.gate.policy import Policy
    from fp4bench.gate.verdict_json import dumps
    from fp4bench.run.sweep import SweepOptions, sweep_options

    try:
        check_outputs({"--json": args.json}, (args.a, args.b), args.force)  # OutputError: before any worker

        def given(name: str):
            return getattr(args, name.replace("-", "_"), None)

        sweep_options(given, {}, on_gpu=False)  # a bad value is a usage error before any worker starts
        check_backends(args.backends, [*args.plugin, *args.a_plugin, *args.b_plugin])
        floor = args.floor / 100.0
        policy = Policy(floor=floor, allow_missing=args.allow_missing, allow_ambiguous=args.allow_ambiguous,
                        fail_on_ambiguous=args.fail_on_ambiguous)

        def sweep_for(fp: dict) -> SweepOptions:
            return sweep_options(given, {}, on_gpu=fp.get("gpu_name") != "cpu")

        sides = (Side(args.a, dict(args.a_env), tuple(args.a_plugin)), Side(args.b, dict(args.b_env), tuple(args.b_plugin)))
        cfg = AbConfig(sweep=SweepOptions(), device=args.device, replicates=args.replicates, rounds=args.rounds,
                       max_rounds=max(args.max_rounds, args.rounds), round_samples=args.round_samples,
                       time_budget_s=args.time_budget, benchmark_budget_s=args.benchmark_budget,
                       settings=RuleSettings(floor=floor), timeout_s=args.case_timeout, timer=args.timer,
                       plugins=tuple(args.plugin), cold_l2=args.l2 == "cold", seed=args.seed,
                       max_resident=args.max_resident, placement=args.placement, min_copies=args.min_copies)
        gpus = chosen_gpus(args)
        runner = AbRunner(*sides, cfg)
    except ValueError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        if gpus is None:
            run = runner.run(sweep_for)
        else:
            from fp4bench.ab.merge import merge
            from fp4bench.ab.multi import run_on_gpus

            run = merge(run_on_gpus(gpus, *sides, cfg, sweep_for), cfg.settings)
        if args.backends:
            unknown_backends(split_list(args.backends, "--backends"), {n for v in run.known_backends.values() for n in v})
        result = judge(run, policy)
    except (RuntimeError, ValueError) as exc:  # a side that cannot start or list: nothing to judge
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _print_safely(report(run, result))
    if args.json:
        write_atomic(args.json, dumps(to_json(run, result)))
        print(f"verdicts written to {args.json}")
    return outcome(run, result)[0]
