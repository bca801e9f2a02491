"""``fp4bench report RESULTS… --out DIR [--baseline-file BASE]``: markdown + PNG plots of saved runs."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, parser, run

PROG = "fp4bench report"


def build_parser() -> argparse.ArgumentParser:
    return parser("report", description="Write DIR/report.md and PNG plots (throughput vs M, roofline, tactic "
                  "heatmaps, power/clock, Δ vs a baseline) for fp4bench result files (pytest-benchmark JSON with "
                  "the fp4bench section).",
                  positionals=[("results", "result files of one GPU model (later files win on a clash)", "+")])


def report_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _report)


def _report(args: argparse.Namespace) -> int:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return fail(PROG, "needs matplotlib: pip install 'fp4bench[report]'", None)
    from fp4bench.gate.baseline import BaselineError, load_baseline
    from fp4bench.gate.compare import compare
    from fp4bench.report.document import build_report

    from fp4bench.outputs import OutputError, check_output, check_output_dir

    try:  # before anything is read (fp4bench.outputs): the folder, and its report.md
        out = check_output_dir(args.out, "--out")
        if out.is_dir():
            check_output(out / "report.md", "--out", inputs=[*args.results, args.baseline_file], force=args.force)
    except OutputError as exc:
        return fail(PROG, exc, None)
    try:
        runs = [load_baseline(p) for p in args.results]
        result = None
        if args.baseline_file:
            base = load_baseline(args.baseline_file)
            current: dict = {}
            availability: dict = {}
            for r in runs:
                current.update(r.as_current())
                availability.update(r.availability)
            result = compare(base, current, availability, current_fingerprint=runs[-1].fingerprint)
        rep = build_report(runs, args.out, result, title=args.title)
    except (BaselineError, ValueError) as exc:
        return fail(PROG, exc, None)
    print(f"wrote {rep.markdown} and {len(rep.images)} plot(s): " + ", ".join(p.name for p in rep.images))
    return 0
