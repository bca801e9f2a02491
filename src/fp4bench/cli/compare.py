"""``fp4bench compare BASE.json NEW.json``: the regression gate between two saved runs.

Unlike ``pytest-benchmark compare`` it has an exit code (pytest-benchmark issue #273):
0 = no regression, 1 = regression, 2 = usage error / incompatible GPU / unusable file,
3 = incomplete: nothing judged, or fewer baseline benchmarks than expected (``gate.coverage``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.gate.coverage import EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION
from fp4bench.options.registry import COMPARE, GATE, add_options, policy_kwargs

# EXIT_OK 0, EXIT_REGRESSION 1 and EXIT_INCOMPLETE 3 are the gate's decisions (gate.coverage)
EXIT_USAGE = 2
__all__ = ["EXIT_INCOMPLETE", "EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "compare_main"]
PROG = "fp4bench compare"


def _print_safely(text: str) -> None:
    """Print, degrading µ/→/± to '?' on a terminal that cannot encode them (never crash the gate)."""
    try:
        print(text)
    except UnicodeEncodeError:
        enc = getattr(sys.stdout, "encoding", None) or "ascii"
        print(text.encode(enc, "replace").decode(enc))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Compare two fp4bench result files (pytest-benchmark JSON with raw samples) "
        "with the gate's decision rule on their window medians (no further window can be taken: an "
        "undecided benchmark is AMBIGUOUS).",
        epilog="exit status: 0 no regression, 1 regression, 2 usage error / incompatible GPU / bad file, "
               "3 incomplete (nothing judged, or fewer benchmarks than the baseline expects)",
    )
    ap.add_argument("base", help="baseline file (e.g. baselines/<gpu>/approved.json)")
    ap.add_argument("new", help="current run's --benchmark-json file, or its line log (*.lines.jsonl; "
                                "a run killed part-way is judged on what it finished, marked partial)")
    add_options(ap.add_argument, GATE)
    add_options(ap.add_argument, COMPARE)
    ap.add_argument("--json", metavar="PATH", default=None,
                    help="also write the verdict as JSON ('-': print it instead of the table; default: not written)")
    ap.add_argument("--markdown", metavar="PATH", default=None,
                    help="also write a markdown verdict, FAIL/MISSING first ('-': print it instead of the table); "
                         "with $GITHUB_STEP_SUMMARY set it is appended there in any case; default: not written")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --json / --markdown file "
                    "(never one of the files compared)")
    return ap


def compare_main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status instead of exiting (``fp4bench compare``)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed usage / help
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    from fp4bench.gate.baseline import load_baseline
    from fp4bench.gate.compare import compare
    from fp4bench.gate.compatibility import IncompatibleBaseline
    from fp4bench.gate.coverage import Scope
    from fp4bench.gate.policy import Policy
    from fp4bench.run.linelog import is_line_log, read_line_log, unreached_report
    from fp4bench.outputs import OutputError, check_outputs
    from fp4bench.report.machine import step_summary_path

    try:
        policy = Policy(**policy_kwargs(lambda name: getattr(args, name.replace("-", "_"))),
                        noise_k=args.noise_k, min_samples=args.min_samples, dispatch=args.dispatch)
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:  # every output path before anything is read or judged (fp4bench.outputs)
        outs = check_outputs({"--json": args.json, "--markdown": args.markdown}, (args.base, args.new), args.force)
        step_summary_path(inputs=[args.base, args.new, *outs])
    except OutputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        base = load_baseline(args.base)
        logged = read_line_log(args.new) if is_line_log(args.new) else None
        new = logged.run if logged is not None else load_baseline(args.new)
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
        print(f"{PROG}: incompatible baseline: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as e:  # BaselineError, or bad values inside a file (e.g. noise_floor)
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    if logged is not None and logged.partial:
        _print_safely(unreached_report(logged, base).lstrip("\n"))
        if logged.not_reached and not args.allow_missing:
            _print_safely(f"a partial run cannot pass the gate (exit {EXIT_INCOMPLETE}); "
                          "--allow-missing judges only what it reached")
    emit_outputs(result, args.base, args.json, args.markdown)
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
        _print_safely(text.rstrip("\n")) if json_path == "-" else write_atomic(json_path, text)
    if md_path is not None:
        _print_safely(md) if md_path == "-" else write_atomic(md_path, md)
    if "-" not in (json_path, md_path):
        _print_safely(verdict_table(result))
    write_step_summary(md)


if __name__ == "__main__":
    raise SystemExit(compare_main(sys.argv[1:]))
