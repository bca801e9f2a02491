"""``fp4bench power A.json B.json --slowdowns 0,3,5``: how often the gate catches a slowdown.

Exit status: 0 table printed, 2 usage error / unusable file / different GPU models.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.cli.compare import EXIT_OK, EXIT_USAGE, _print_safely
from fp4bench.options.registry import FLOOR_DRIFT_ALPHA, add_options, policy_kwargs

PROG = "fp4bench power"


def _slowdowns(text: str) -> list[float]:
    """``"0,3,5"`` or ``"0%,3%,5%"`` -> [0.0, 0.03, 0.05]."""
    out = []
    for part in text.split(","):
        part = part.strip().removesuffix("%")
        try:
            v = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected comma-separated percentages like 0,3,5, got {text!r}") from None
        if not -100 < v < 1000:
            raise argparse.ArgumentTypeError(f"slowdown must be in (-100, 1000) %, got {v:g}")
        out.append(v / 100)
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Detection power of the gate on recorded samples: every sample of B (an A/A partner "
        "of A, measured on the GPU) is multiplied by 1 + s for each slowdown s, and B is gated against A. "
        "The FAIL rate at 0 is the false-alarm rate; at the floor, the chance such a slowdown is caught.",
    )
    ap.add_argument("a", help="first run of an unchanged stack (--benchmark-json file with raw samples)")
    ap.add_argument("b", help="second run of the same stack")
    ap.add_argument("--slowdowns", type=_slowdowns, default=_slowdowns("0,3,4,5,6"),
                    help="slowdowns to apply to B, in %%, comma-separated (default 0,3,4,5,6)")
    add_options(ap.add_argument, FLOOR_DRIFT_ALPHA)
    ap.add_argument("--same-unit", action="store_true",
                    help="A and B come from one GPU though their fingerprints lack a UUID: keep the drift allowance")
    return ap


def power_main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse already printed usage / help
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    from fp4bench.gate.baseline import BaselineError, load_baseline
    from fp4bench.gate.power import detection_power
    from fp4bench.gate.policy import Policy
    from fp4bench.report.tables import power_table

    try:
        policy = Policy(**policy_kwargs(lambda name: getattr(args, name.replace("-", "_"), None)))
        rows = detection_power(load_baseline(args.a), load_baseline(args.b), args.slowdowns, policy,
                               same_unit=args.same_unit)
    except (BaselineError, ValueError) as e:  # IncompatibleBaseline is a BaselineError
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    _print_safely(power_table(rows, policy))
    return EXIT_OK
