"""``fp4bench power A.json B.json --slowdowns 0,3,5``: how often the gate catches a slowdown.

Exit status: 0 table printed, 2 usage error / unusable file / different GPU models.
"""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import EXIT_OK, fail, parser, print_safely, run
from fp4bench.options.registry import policy_kwargs

PROG = "fp4bench power"


def build_parser() -> argparse.ArgumentParser:
    return parser(
        "power",
        description="Detection power of the gate on recorded samples: every sample of B (an A/A partner "
        "of A, measured on the GPU) is multiplied by 1 + s for each slowdown s, and B is gated against A. "
        "The FAIL rate at 0 is the false-alarm rate; at the floor, the chance such a slowdown is caught.",
        positionals=[("a", "first run of an unchanged stack (--benchmark-json file with raw samples)", None),
                     ("b", "second run of the same stack", None)])


def power_main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit status."""
    return run(build_parser(), argv, _power)


def _power(args: argparse.Namespace) -> int:
    from fp4bench.gate.baseline import BaselineError, load_baseline
    from fp4bench.gate.power import detection_power
    from fp4bench.gate.policy import Policy
    from fp4bench.report.tables import power_table

    try:
        policy = Policy(**policy_kwargs(lambda name: getattr(args, name.replace("-", "_"), None)))
        rows = detection_power(load_baseline(args.a), load_baseline(args.b), args.slowdowns, policy,
                               same_unit=args.assume_same_unit)
    except (BaselineError, ValueError) as e:  # IncompatibleBaseline is a BaselineError
        return fail(PROG, e)
    print_safely(power_table(rows, policy))
    return EXIT_OK
