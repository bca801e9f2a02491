"""``fp4bench report RESULTS… --out DIR [--baseline BASE]``: markdown + PNG plots of saved runs."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

PROG = "fp4bench report"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG, description="Write DIR/report.md and PNG plots (throughput vs M, "
                                 "roofline, tactic heatmaps, power/clock, Δ vs a baseline) for fp4bench result "
                                 "files (pytest-benchmark JSON with the fp4bench section).")
    ap.add_argument("results", nargs="+", help="result files of one GPU model (later files win on a clash)")
    ap.add_argument("--out", required=True, help="output folder (created; its parent must exist)")
    ap.add_argument("--force", action="store_true", help="overwrite a report.md already in --out")
    ap.add_argument("--baseline", default=None, help="baseline file: adds the verdict and the Δ%% plot (default: none)")
    ap.add_argument("--title", default=None, help="report title (default: fp4bench report)")
    return ap


def report_main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return 0 if e.code in (0, None) else 2
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"{PROG}: needs matplotlib: pip install 'fp4bench[report]'", file=sys.stderr)
        return 2
    from fp4bench.gate.baseline import BaselineError, load_baseline
    from fp4bench.gate.compare import compare
    from fp4bench.report.document import build_report

    from fp4bench.outputs import OutputError, check_output, check_output_dir

    try:  # before anything is read (fp4bench.outputs): the folder, and its report.md
        out = check_output_dir(args.out, "--out")
        if out.is_dir():
            check_output(out / "report.md", "--out", inputs=[*args.results, args.baseline], force=args.force)
    except OutputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    try:
        runs = [load_baseline(p) for p in args.results]
        result = None
        if args.baseline:
            base = load_baseline(args.baseline)
            current: dict = {}
            availability: dict = {}
            for r in runs:
                current.update(r.as_current())
                availability.update(r.availability)
            result = compare(base, current, availability, current_fingerprint=runs[-1].fingerprint)
        rep = build_report(runs, args.out, result, title=args.title)
    except (BaselineError, ValueError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {rep.markdown} and {len(rep.images)} plot(s): " + ", ".join(p.name for p in rep.images))
    return 0
