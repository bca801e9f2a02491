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
import importlib
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, print_safely, run
from fp4bench.options.registry import policy_kwargs
from fp4bench.options.values import split_list
from fp4bench.outputs import check_outputs, is_stdout, write_document

PROG = "fp4bench ab"


def build_parser() -> argparse.ArgumentParser:
    return parser("ab", description=plain(__doc__.split("\n\n")[1]),
                  epilog="exit status: 0 no regression, 1 regression, 2 usage error, 3 incomplete")


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
    return run(build_parser(), argv, _ab)


def _ab(args: argparse.Namespace) -> int:
    from fp4bench.ab.judge import judge, outcome
    from fp4bench.ab.report import report, to_json
    from fp4bench.ab.config import AbConfig, Side
    from fp4bench.ab.run import AbRunner
    from fp4bench.gate.rule import RuleSettings
    from fp4bench.gate.policy import Policy
    from fp4bench.gate.verdict_json import dumps
    from fp4bench.run.sweep import SweepOptions, sweep_options

    try:
        check_outputs({"--verdict-json": args.verdict_json}, (args.a, args.b), args.force)  # OutputError: before any worker

        def given(name: str):
            return getattr(args, name.replace("-", "_"), None)

        sweep_options(given, {}, on_gpu=False)  # a bad value is a usage error before any worker starts
        check_backends(args.backends, [*args.plugin, *args.a_plugin, *args.b_plugin])
        policy = Policy(**policy_kwargs(given))  # the floor and the missing/ambiguous policy flags

        def sweep_for(fp: dict) -> SweepOptions:
            return sweep_options(given, {}, on_gpu=fp.get("gpu_name") != "cpu")

        sides = (Side(args.a, dict(args.a_env), tuple(args.a_plugin)), Side(args.b, dict(args.b_env), tuple(args.b_plugin)))
        cfg = AbConfig(sweep=SweepOptions(), device=args.device, replicates=args.replicates, rounds=args.rounds,
                       max_rounds=max(args.max_rounds, args.rounds), round_samples=args.round_samples,
                       time_budget_s=args.run_budget, benchmark_budget_s=args.benchmark_budget,
                       settings=RuleSettings(floor=policy.floor), timeout_s=args.case_timeout,
                       timer=args.round_timing,
                       plugins=tuple(args.plugin), cold_l2=args.l2 == "cold", seed=args.seed,
                       max_resident=args.max_resident, placement=args.placement, min_copies=args.min_copies)
        gpus = chosen_gpus(args)
        only = set(split_list(args.only, "--only")) if args.only else None
        runner = AbRunner(*sides, cfg)
    except ValueError as exc:
        return fail(PROG, exc)
    try:
        if gpus is None:
            measured = runner.run(sweep_for, only=only)
        else:
            from fp4bench.ab.merge import merge
            from fp4bench.ab.multi import run_on_gpus

            measured = merge(run_on_gpus(gpus, *sides, cfg, sweep_for, only=only), cfg.settings)
        listed = (set(runner.listed or []) if gpus is None else {p.name for p in measured.pairs}) if only else set()
        if only and not only <= listed | set(measured.not_reached):
            raise ValueError(f"--only: the sweep has no benchmark {', '.join(sorted(only - listed))} (give the "
                             f"sweep options of the run that named it); it has {', '.join(sorted(listed)) or 'none'}")
        if args.backends:
            unknown_backends(split_list(args.backends, "--backends"), {n for v in measured.known_backends.values() for n in v})
        result = judge(measured, policy)
    except (RuntimeError, ValueError) as exc:  # a side that cannot start or list: nothing to judge
        return fail(PROG, exc)
    print_safely(report(measured, result))
    if args.verdict_json:
        write_document(args.verdict_json, dumps(to_json(measured, result)))
        if not is_stdout(args.verdict_json):
            print(f"verdicts written to {args.verdict_json}")
    return outcome(measured, result)[0]
