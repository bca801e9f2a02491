"""``fp4bench env [--device D] [--plugin MODULE]``: the GPU/stack fingerprint a result would carry,
and every backend with whether it can run here and why not."""

from __future__ import annotations

import argparse
from typing import Sequence

from fp4bench.cli.command import fail, parser, plain, run

PROG = "fp4bench env"


def build_parser() -> argparse.ArgumentParser:
    return parser("env", description=plain(__doc__))


def env_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _env)


def _env(args: argparse.Namespace) -> int:
    import torch

    from fp4bench.backends.base import availability_of
    from fp4bench.backends.registry import all_backends, load_plugin
    from fp4bench.env import collect_fingerprint, parse_device

    try:
        for mod in args.plugin:
            load_plugin(mod)
        dev = parse_device(args.device or ("cuda:0" if torch.cuda.is_available() else "cpu"), "--device")
    except ValueError as exc:
        return fail(PROG, exc, None)
    fp = collect_fingerprint(dev)
    print("fingerprint:")
    for k, v in fp.to_dict().items():
        print(f"  {k:<20} {v}")
    print("\nbackends:")
    for b in all_backends():
        a = availability_of(b, dev)  # one broken backend is listed with its error, not a crash
        state, reason, ver = ("available" if a.ok else "skipped"), a.reason, a.version
        kinds = ",".join(sorted(b.kinds))
        print(f"  {b.name:<24} {state:<9} [{kinds}] {ver or '-'}: {reason}")
    return 0
