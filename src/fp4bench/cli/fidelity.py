"""``fp4bench fidelity``: fp4bench's timer against a profiler's kernel time, on this GPU.

Exit status: 0 every row within the tolerance with the same kernels, 1 otherwise, 2 usage error
or no CUDA device.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from fp4bench.cli.compare import EXIT_OK, EXIT_REGRESSION, EXIT_USAGE, _print_safely
from fp4bench.options.registry import int_list, percent, positive_seconds

PROG = "fp4bench fidelity"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog=PROG,
        description="Compare fp4bench's per-call time (CUDA graph, CUPTI busy time / N) with the kernel time "
        "of eager calls, interleaved in one profiled window so both see the same clock and power state.",
        epilog="exit status: 0 all rows within tolerance, 1 a row out of tolerance or with other kernels, 2 usage",
    )
    ap.add_argument("--ms", type=int_list, default=int_list("1,16,64,256,1024,4096,16384"),
                    help="GEMM M values (default 1,16,64,256,1024,4096,16384)")
    ap.add_argument("--n", type=int, default=4096, help="GEMM N (default: GLM-5 gate_up, 2 x 2048)")
    ap.add_argument("--k", type=int, default=6144, help="GEMM K (default: GLM-5 hidden size)")
    ap.add_argument("--budget", type=positive_seconds, default=1.0, help="seconds per timed / interleaved window (default %(default)g)")
    ap.add_argument("--tolerance", type=percent, default=2.0, help="allowed |graph/eager - 1|, in %% (default 2)")
    ap.add_argument("--device", default="cuda:0", help="CUDA device (default %(default)s)")
    ap.add_argument("--json", type=Path, default=None, help="write the rows to this file (checked before the run; default: not written)")
    ap.add_argument("--force", action="store_true", help="overwrite an existing --json file")
    return ap


def fidelity_main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    from fp4bench.outputs import OutputError, check_outputs, write_atomic

    try:
        check_outputs({"--json": args.json}, (), args.force)
    except OutputError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    import torch

    from fp4bench.measure.fidelity import HEADER, format_row, run

    tol = args.tolerance / 100
    try:
        dev = torch.device(args.device)
    except RuntimeError as e:
        print(f"{PROG}: error: bad --device {args.device!r}: {e}", file=sys.stderr)
        return EXIT_USAGE
    if dev.type != "cuda" or not torch.cuda.is_available():
        print(f"{PROG}: error: needs a CUDA device (got --device {args.device}, "
              f"torch.cuda.is_available() = {torch.cuda.is_available()})", file=sys.stderr)
        return EXIT_USAGE
    _print_safely(f"{torch.cuda.get_device_name(dev)}, N={args.n} K={args.k}, tolerance ±{args.tolerance:g}%\n{HEADER}")
    rows = run(args.ms, args.n, args.k, args.budget, dev, on_row=lambda r: _print_safely(format_row(r, tol)))
    if args.json is not None:
        write_atomic(args.json, json.dumps({"device": torch.cuda.get_device_name(dev), "torch": torch.__version__,
                                         "tolerance": tol, "rows": [r.to_dict() for r in rows]}, indent=1))
    bad = [r for r in rows if not r.ok(tol)]
    _print_safely(f"{len(rows) - len(bad)} of {len(rows)} within ±{args.tolerance:g}% with the same kernels")
    return EXIT_REGRESSION if bad else EXIT_OK
