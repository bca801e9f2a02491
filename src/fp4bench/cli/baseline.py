"""``fp4bench baseline approve CANDIDATE.json`` / ``baseline migrate FILE``: make a candidate run
the approved baseline of its GPU model (and of its unit), or rewrite a baseline in the slim format."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, fill, run

PROG = "fp4bench baseline"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog=PROG)
    sub = ap.add_subparsers(dest="cmd", required=True)
    fill(sub.add_parser("approve", help="write a candidate run as baselines/<gpu>/approved.json (slim format)"),
         "baseline approve", [("candidate", "the candidate run (a --fp4-save-baseline JSON file)", None)])
    fill(sub.add_parser("migrate", help="rewrite a baseline file in the slim format (nothing is judged)"),
         "baseline migrate", [("file", "the baseline file to rewrite", None)])
    return ap


def baseline_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _baseline)


def _baseline(args: argparse.Namespace) -> int:
    from fp4bench.gate.baseline import BaselineError
    from fp4bench.gate.approve import approve, migrate
    from fp4bench.outputs import OutputError, check_output, check_output_dir

    prog = f"{PROG} {args.cmd}"
    try:  # output paths before anything is read (fp4bench.outputs)
        if args.cmd == "migrate" and args.out is not None:
            check_output(args.out, "--out", inputs=[args.file], force=args.force)
        if args.cmd == "approve":
            check_output_dir(args.baselines, "--baselines")
    except OutputError as exc:
        return fail(prog, exc, None)
    try:
        if args.cmd == "migrate":
            out = migrate(args.file, args.out)
            print(f"slim baseline written: {out} ({out.stat().st_size} bytes)")
            return 0
        from fp4bench.gate.drift import DriftSettings

        drift = DriftSettings(floor=args.floor / 100, anchor=args.anchor, accept=args.accept_drift)
        res = approve(args.candidate, args.baselines, force=args.force, drift=drift)
    except BaselineError as exc:
        return fail(prog, exc, None)
    print(f"approved: {res.approved} (slim format; "
          + ("the file it replaced is in git's history)" if res.replaced else "the first approved baseline of this GPU)"))
    if args.accept_drift:
        from fp4bench.gate.baseline import load_baseline
        from fp4bench.gate.drift import DRIFT

        rec = load_baseline(res.approved).approval.get(DRIFT)
        print(f"drift accepted and recorded in its approval record: {rec['worst']} {rec['cumulative_pct']:+.1f}% since "
              f"the anchor {rec['anchor']}; this approval is the anchor from now on" if rec else
              "--accept-drift: no benchmark drifted beyond the floor; nothing recorded")
    if res.unit is not None:
        print(f"this unit's own baseline: {res.unit} (preferred by runs on that GPU)")
    elif res.units:
        print(f"each unit's own baseline ({len(res.units)} GPUs measured this run; each file holds the "
              "benchmarks that GPU measured):")
        print("\n".join(f"  {path} ({n} benchmarks)" for path, n in res.units))
    if res.dropped:
        print(f"no longer gated ({len(res.dropped)} benchmarks of the previous baseline):")
        print("\n".join(f"  {n}" for n in res.dropped))
    if res.added:
        print(f"newly gated: {len(res.added)} benchmarks")
    return 0
