"""``fp4bench bisect PACKAGE GOOD BAD (--failed VERDICT.json | --only IDS)``: which release made it slower?

GOOD and BAD are versions of PACKAGE, or two stack files (``fp4bench stack freeze``) that pin it:
the releases between them are listed (``--wheels DIR`` or the index's JSON API, ``--index``), each
tested release gets a cached venv (the base environment shared, the rest of the stack as pinned,
``fp4bench prepare`` run), and ``fp4bench ab`` of the good release against the midpoint narrows the
range to two neighbours, whose own ``ab`` names the culprit. Steps that are each small while the
ends differ are reported as cumulative, with the per-step table. Every step is kept in the state
file: an interrupted bisect resumes where it stopped.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from fp4bench.cli.command import EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION, fail, parser, plain, print_safely, run

PROG = "fp4bench bisect"


def build_parser() -> argparse.ArgumentParser:
    return parser("bisect", description=plain(__doc__.split("\n\n")[1]),
                  epilog="exit status: 0 the range does not reproduce a regression, 1 a culprit or a cumulative "
                         "change found, 2 usage error, 3 undecided or interrupted (rerun to resume)",
                  positionals=[("package", "the package whose releases are bisected, e.g. flashinfer-python", None),
                               ("good", "the good version, or a stack file pinning it", None),
                               ("bad", "the bad version, or a stack file pinning it", None)])


def bisect_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _bisect)


def _end(text: str, package: str, what: str) -> tuple[str, dict[str, str] | None]:
    """(version, the stack file's pins or None) of GOOD/BAD: a version, or a stack file pinning it."""
    from packaging.utils import canonicalize_name

    from fp4bench.cli.stack import read_pins

    p = Path(text)
    if not p.is_file():
        return text, None
    pins = read_pins(p)
    name = canonicalize_name(package)
    if name not in pins:
        raise ValueError(f"{what} {p}: the stack file pins no {package}")
    return pins[name], pins


def benchmarks(args: argparse.Namespace) -> list[str]:
    from fp4bench.gate.verdict_json import VerdictJsonError, failing
    from fp4bench.options.values import split_list

    if bool(args.failed) == bool(args.only):
        raise ValueError("name the failing benchmarks: --failed VERDICT.json or --only IDS (one of them)")
    if args.only:
        return split_list(args.only, "--only")
    from fp4bench.bisect.step import case_id

    try:
        return [case_id(n) for n in failing(json.loads(Path(args.failed).read_text()), f"--failed {args.failed}")]
    except OSError as exc:
        raise ValueError(f"--failed {args.failed}: cannot read it ({exc.strerror})") from None
    except (VerdictJsonError, ValueError) as exc:
        raise ValueError(f"--failed {args.failed}: {exc}") from None


def _bisect(args: argparse.Namespace) -> int:
    from fp4bench.bisect.releases import ReleaseListError, Source, between, version
    from fp4bench.bisect.search import Bisect
    from fp4bench.bisect.state import State, StateError
    from fp4bench.bisect.step import ab_measure
    from fp4bench.bisect.table import render, step_rows
    from fp4bench.bisect.venvs import VenvBuilder
    from fp4bench.cli.stack import read_pins
    from fp4bench.outputs import OutputError, check_output, check_output_dir
    from fp4bench.run.worker.interpreter import interpreter

    try:
        names = benchmarks(args)
        good_text, good_pins = _end(args.good, args.package, "GOOD")
        bad_text, bad_pins = _end(args.bad, args.package, "BAD")
        pins = good_pins or (read_pins(Path(args.stack)) if args.stack else {})
        source = Source(index=args.index, wheels=args.wheels)
        good, bad = version(good_text, "GOOD"), version(bad_text, "BAD")
        versions = [str(v) for v in between(source.versions(args.package), good, bad)]
        cache = check_output_dir(args.cache, "--cache")
        cache.mkdir(exist_ok=True)
        state_path = Path(args.state) if args.state else cache / f"{args.package}-{good}-{bad}.json"
        check_output(state_path, "--state", force=True)  # an existing state is resumed, by design
        key = {"package": args.package, "good": str(good), "bad": str(bad), "benchmarks": names,
               "floor_pct": args.floor, "ab_args": args.ab_args}
        state = State.open(state_path, key)
        base = interpreter(args.python) if args.python else sys.executable
        build = VenvBuilder(cache / "venvs", args.package, base, pins, args.wheels, args.pip_args,
                            prepare=not args.no_prepare, module=args.module)
        build.base()  # a base that cannot run is a usage error, before any venv
    except (ReleaseListError, StateError, OutputError, ValueError) as exc:
        return fail(PROG, exc)
    if bad_pins and good_pins:
        held = sorted(n for n in set(good_pins) | set(bad_pins)
                      if n != args.package and good_pins.get(n) != bad_pins.get(n))
        if held:
            print(f"held at GOOD's pins (the bad stack changes them too; bisect them separately): {', '.join(held)}")
    print(f"bisecting {args.package}: {len(versions)} releases {', '.join(versions)}; benchmarks: {', '.join(names)}")
    print(f"state: {state_path} (a rerun resumes from it)")
    from fp4bench.cli.ab import ab_main

    search = Bisect(versions, build, ab_measure(names, args.floor, args.ab_args, ab_main), state)
    try:
        outcome = search.run()
    except KeyboardInterrupt:
        print_safely("\n".join(["interrupted; measured so far:", *step_rows(search.tried),
                                f"rerun the same command to resume ({state_path})"]))
        return EXIT_INCOMPLETE
    except RuntimeError as exc:
        print_safely("\n".join(step_rows(search.tried)))
        print(f"{PROG}: {exc}", file=sys.stderr)
        return EXIT_INCOMPLETE
    page = source.page(args.package, outcome.culprit) if outcome.culprit else None
    print_safely(render(args.package, outcome, args.floor, page))
    if outcome.kind == "undecided":
        print(f"the same command again resumes from {state_path} (an incomplete step is measured again)")
    return {"culprit": EXIT_REGRESSION, "cumulative": EXIT_REGRESSION, "not reproduced": EXIT_OK}.get(
        outcome.kind, EXIT_INCOMPLETE)
