"""``fp4bench prepare [--backends a,b] [--device cuda:0] [--check]``: build FlashInfer's JIT modules
the sweep needs before a timed run (see ``fp4bench.backends.jit_cache``)."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, run

PROG = "fp4bench prepare"


def build_parser() -> argparse.ArgumentParser:
    return parser("prepare", description=plain(__doc__))


def prepare_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _prepare)


def _prepare(args: argparse.Namespace) -> int:
    import torch

    if not torch.cuda.is_available():
        return fail(PROG, "no CUDA device: FlashInfer modules are built for the GPU they run on", None)
    try:
        import flashinfer  # noqa: F401
    except ImportError as exc:
        return fail(PROG, f"flashinfer is not installed ({exc}); pip install -e '.[flashinfer]'", None)
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
