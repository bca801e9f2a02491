"""What every ``fp4bench`` command shares: its parser, built from the option registry; parsing
that returns an exit status instead of exiting; the exit statuses; printing that never crashes.

A command is ``run(build_parser(), argv, body)``: argparse's own exit (``--help``: 0, a usage
error it printed: 2) becomes the command's return value, and ``body(args)`` runs only on
arguments that parsed. ``fail`` prints a usage error as ``<prog>: error: <what was wrong>``.
An output refused by ``fp4bench.outputs`` is a usage error (2); an output that could not be
written (``WriteError``: full disk, file-size limit) is ``<prog>: cannot write FILE: why`` and
exit ``EXIT_WRITE`` (4), never a traceback and never 1, the regression status.

Every parser is built with ``allow_abbrev=False``: ``--model`` is not taken as ``--models``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Sequence

from fp4bench.gate.coverage import EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION
from fp4bench.options.adapters import add_options
from fp4bench.outputs import EXIT_WRITE, OutputError, WriteError

# EXIT_OK 0, EXIT_REGRESSION 1 and EXIT_INCOMPLETE 3 are the gate's decisions (gate.coverage)
EXIT_USAGE = 2
__all__ = ["EXIT_INCOMPLETE", "EXIT_OK", "EXIT_REGRESSION", "EXIT_USAGE", "EXIT_WRITE", "argument_parser", "fail",
           "parser", "plain", "print_safely", "run"]


def argument_parser(**kwargs) -> argparse.ArgumentParser:
    """An ``argparse.ArgumentParser`` that never takes an abbreviation of an option."""
    return argparse.ArgumentParser(allow_abbrev=False, **kwargs)


def plain(doc: str) -> str:
    """A docstring as terminal help text: RST ``literal`` markup becomes the bare literal."""
    return doc.replace("``", "")


def parser(front: str, description: str | None = None, epilog: str | None = None,
           positionals: Sequence[tuple[str, str, str | None]] = ()) -> argparse.ArgumentParser:
    """The parser of ``fp4bench <front>``: its positional arguments (name, help, nargs), then
    every option the registry gives ``front``."""
    ap = argument_parser(prog=f"fp4bench {front}", description=description, epilog=epilog)
    fill(ap, front, positionals)
    return ap


def fill(ap: argparse.ArgumentParser, front: str, positionals: Sequence[tuple[str, str, str | None]] = ()) -> None:
    """``ap`` (a command's parser or a subcommand's) gets ``front``'s arguments."""
    for name, help, nargs in positionals:
        ap.add_argument(name, help=help, **({"nargs": nargs} if nargs else {}))
    add_options(ap, front)


def run(ap: argparse.ArgumentParser, argv: Sequence[str] | None,
        body: Callable[[argparse.Namespace], int]) -> int:
    """``body(args)``'s exit status, or argparse's: 0 after ``--help``, 2 after a usage error
    (argparse printed it)."""
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return EXIT_OK if e.code in (0, None) else EXIT_USAGE
    try:
        return body(args)
    except OutputError as exc:
        return fail(ap.prog, exc)
    except WriteError as exc:
        print(f"{ap.prog}: {exc}", file=sys.stderr)
        return EXIT_WRITE


def fail(prog: str, what: object, label: str | None = "error") -> int:
    """Print ``<prog>: <label>: <what>`` (``<prog>: <what>`` without a label) on stderr; the
    usage-error exit status."""
    print(f"{prog}: {label}: {what}" if label else f"{prog}: {what}", file=sys.stderr)
    return EXIT_USAGE


def print_safely(text: str) -> None:
    """Print, degrading µ/→/± to '?' on a terminal that cannot encode them (never crash the gate)."""
    try:
        print(text)
    except UnicodeEncodeError:
        enc = getattr(sys.stdout, "encoding", None) or "ascii"
        print(text.encode(enc, "replace").decode(enc))
