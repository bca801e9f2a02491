"""``fp4bench fidelity``: fp4bench's timer against a profiler's kernel time, on this GPU.

Exit status: 0 every row within the tolerance with the same kernels, 1 otherwise, 2 usage error
or no CUDA device.
"""

from __future__ import annotations

import argparse
import json
from typing import Sequence

from fp4bench.cli.command import EXIT_OK, EXIT_REGRESSION, fail, parser, print_safely, run

PROG = "fp4bench fidelity"


def build_parser() -> argparse.ArgumentParser:
    return parser(
        "fidelity",
        description="Compare fp4bench's per-call time (CUDA graph, CUPTI busy time / N) with the kernel time "
        "of eager calls, interleaved in one profiled window so both see the same clock and power state.",
        epilog="exit status: 0 all rows within tolerance, 1 a row out of tolerance or with other kernels, 2 usage")


def fidelity_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _fidelity)


def _fidelity(args: argparse.Namespace) -> int:
    from fp4bench.outputs import OutputError, check_outputs, write_document

    try:
        check_outputs({"--rows-json": args.rows_json}, (), args.force)
    except OutputError as e:
        return fail(PROG, e)
    import torch

    from fp4bench.measure.fidelity import HEADER, format_row
    from fp4bench.measure.fidelity import run as measure

    tol = args.tolerance / 100
    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        return fail(PROG, f"bad --device {args.device!r}: {e}")
    if dev.type != "cuda" or not torch.cuda.is_available():
        return fail(PROG, f"needs a CUDA device (got --device {args.device}, "
                          f"torch.cuda.is_available() = {torch.cuda.is_available()})")
    print_safely(f"{torch.cuda.get_device_name(dev)}, N={args.n} K={args.k}, tolerance ±{args.tolerance:g}%\n{HEADER}")
    rows = measure(args.ms, args.n, args.k, args.budget, dev, on_row=lambda r: print_safely(format_row(r, tol)))
    if args.rows_json is not None:
        write_document(args.rows_json, json.dumps({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                                         "tolerance": tol, "rows": [r.to_dict() for r in rows]}, indent=1))
    bad = [r for r in rows if not r.ok(tol)]
    print_safely(f"{len(rows) - len(bad)} of {len(rows)} within ±{args.tolerance:g}% with the same kernels")
    return EXIT_REGRESSION if bad else EXIT_OK
