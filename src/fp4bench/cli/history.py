"""``fp4bench history BASELINE [--plot PNG]``: every approval of an approved baseline, from git.

Reads each committed version of BASELINE (``baselines/<gpu>/approved.json``) that carries its own
``approval`` record (a re-serialization or format change is not an approval) and prints the
approvals with what changed in the stack at each, then each benchmark's median at every approval
and its change from the first to the last. ``--plot``: the same as a PNG.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, print_safely, run

PROG = "fp4bench history"


def build_parser() -> argparse.ArgumentParser:
    return parser("history", description=plain(__doc__.split("\n\n")[1]),
                  positionals=[("baseline", "an approved baseline file in a git repository", None)])


def history_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _history)


def _history(args: argparse.Namespace) -> int:
    from fp4bench.gate.history import HistoryError, medians, read_history, stack_changes
    from fp4bench.outputs import OutputError, check_output
    from fp4bench.report.history import approvals_lines, medians_table

    try:
        if args.plot:
            check_output(args.plot, "--plot", inputs=[args.baseline], force=args.force)
        history, unreadable = read_history(args.baseline)
    except (HistoryError, OutputError) as exc:
        return fail(PROG, exc)
    for line in unreadable:
        print(f"{PROG}: not read (no approval counted): {line}", file=sys.stderr)
    if not history:
        return fail(PROG, f"{args.baseline}: no committed version carries an approval record "
                          "(fp4bench baseline approve writes one)")
    changes = stack_changes(history)
    meds = medians(history)
    print_safely("\n".join([f"{args.baseline}: {len(history)} approvals", *approvals_lines(history, changes), "",
                            *medians_table(history, meds)]))
    if args.plot:
        from fp4bench.report.history import history_plot

        out = history_plot(history, meds, changes, Path(args.plot), f"{args.baseline}: median per approval")
        print(f"plot written: {out}")
    return 0
