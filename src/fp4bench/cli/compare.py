"""``fp4bench compare BASE.json NEW.json``: the regression gate between two saved runs.

Unlike ``pytest-benchmark compare`` it has an exit code (pytest-benchmark issue #273):
0 = no regression, 1 = regression, 2 = usage error / incompatible GPU / unusable file,
3 = incomplete: nothing judged, or fewer baseline benchmarks than expected (``gate.coverage``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.cli.command import EXIT_INCOMPLETE, fail, parser, print_safely, run
from fp4bench.options.registry import policy_kwargs

PROG = "fp4bench compare"


def build_parser() -> argparse.ArgumentParser:
    return parser(
        "compare",
        description="Compare two fp4bench result files (pytest-benchmark JSON with raw samples) "
        "with the gate's decision rule on their window medians (no further window can be taken: an "
        "undecided benchmark is AMBIGUOUS).",
        epilog="exit status: 0 no regression, 1 regression, 2 usage error / incompatible GPU / bad file, "
               "3 incomplete (nothing judged, or fewer benchmarks than the baseline expects)",
        positionals=[("base", "baseline file (e.g. baselines/<gpu>/approved.json)", None),
                     ("new", "current run's --benchmark-json file, or its line log (*.lines.jsonl; "
                             "a run killed part-way is judged on what it finished, marked partial)", None)])


def compare_main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status instead of exiting (``fp4bench compare``)."""
    return run(build_parser(), argv, _compare)


def _compare(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from fp4bench.gate.baseline import load_baseline
    from fp4bench.gate.calibration import gpu_dir_of, noise_for
    from fp4bench.gate.compare import compare
    from fp4bench.gate.compatibility import IncompatibleBaseline
    from fp4bench.gate.coverage import Scope
    from fp4bench.gate.policy import Policy
    from fp4bench.run.linelog import is_line_log, read_line_log, unreached_report
    from fp4bench.outputs import OutputError, check_outputs
    from fp4bench.report.machine import step_summary_path

    try:
        policy = Policy(**policy_kwargs(lambda name: getattr(args, name.replace("-", "_"))),
                        min_samples=args.verdict_min_samples, dispatch=args.dispatch)
    except ValueError as e:
        return fail(PROG, e)
    try:  # every output path before anything is read or judged (fp4bench.outputs)
        outs = check_outputs({"--verdict-json": args.verdict_json, "--markdown": args.markdown},
                             (args.base, args.new), args.force)
        step_summary_path(inputs=[args.base, args.new, *outs])
    except OutputError as e:
        return fail(PROG, e)
    try:
        base = load_baseline(args.base)
        logged = read_line_log(args.new) if is_line_log(args.new) else None
        new = logged.run if logged is not None else load_baseline(args.new)
        policy = replace(policy, noise=noise_for(gpu_dir_of(args.base), getattr(new.fingerprint, "gpu_uuid", None)))
        result = compare(
            base,
            new.as_current(),
            availability_now=new.availability,
            policy=policy,
            current_fingerprint=new.fingerprint,
            current_sweep=new.sweep,
            scope=Scope(not_reached=tuple(logged.not_reached) if logged is not None else ()),
        )
    except IncompatibleBaseline as e:
        return fail(PROG, e, "incompatible baseline")
    except ValueError as e:  # BaselineError, or bad values inside a file (e.g. noise_floor)
        return fail(PROG, e)
    if logged is not None and (logged.partial or logged.failed):
        print_safely(unreached_report(logged, base).lstrip("\n"))
        if logged.not_reached and not args.allow_missing:
            print_safely(f"a partial run cannot pass the gate (exit {EXIT_INCOMPLETE}); "
                         "--allow-missing judges only what it reached")
    emit_outputs(result, args.base, args.verdict_json, args.markdown)
    return result.exit_code


def emit_outputs(result, base: str, json_path: str | None, md_path: str | None) -> None:
    """The table on stdout (unless JSON or markdown goes there), the optional files, the job summary."""
    from fp4bench.gate.verdict_json import dumps
    from fp4bench.outputs import write_atomic
    from fp4bench.report.tables import verdict_table
    from fp4bench.report.machine import verdict_json, verdict_markdown, write_step_summary

    md = verdict_markdown(result, baseline=base)
    if json_path is not None:
        text = dumps(verdict_json(result, baseline=base))
        print_safely(text.rstrip("\n")) if json_path == "-" else write_atomic(json_path, text)
    if md_path is not None:
        print_safely(md) if md_path == "-" else write_atomic(md_path, md)
    if "-" not in (json_path, md_path):
        print_safely(verdict_table(result))
    write_step_summary(md)


if __name__ == "__main__":
    raise SystemExit(compare_main(sys.argv[1:]))
