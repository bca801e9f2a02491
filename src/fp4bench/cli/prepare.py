"""``fp4bench prepare [--backends a,b] [--device cuda:0] [--check]``: build FlashInfer's JIT modules
the sweep needs before a timed run (see ``fp4bench.backends.jit_cache``)."""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from fp4bench.options.registry import plain

PROG = "fp4bench prepare"


def prepare_main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=PROG, description=plain(__doc__))
    ap.add_argument("--device", default="cuda:0",
                    help="CUDA device to build for (default %(default)s)")
    ap.add_argument("--backends", default=None,
                    help="only the modules of these backends (comma-separated; default: every FlashInfer backend)")
    ap.add_argument("--check", action="store_true", help="only report; exit 1 when a module is missing")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 0 if e.code in (0, None) else 2
    import torch

    if not torch.cuda.is_available():
        print(f"{PROG}: no CUDA device: FlashInfer modules are built for the GPU they run on", file=sys.stderr)
        return 2
    try:
        import flashinfer  # noqa: F401
    except ImportError as exc:
        print(f"{PROG}: flashinfer is not installed ({exc}); pip install -e '.[flashinfer]'", file=sys.stderr)
        return 2
    from fp4bench.backends.jit_cache import cache_dir, modules_for, prepare

    cap = torch.cuda.get_device_capability(torch.device(args.device))
    backends = {b.strip() for b in args.backends.split(",")} if args.backends else None
    if args.check:
        mods = modules_for(cap, backends)
        for m in mods:
            print(f"{m.label}: {'built: ' + m.where if m.ready else 'NOT BUILT'}")
        print(f"cache: {cache_dir()}")
        return 1 if any(not m.ready for m in mods) else 0
    return prepare(cap, backends)
