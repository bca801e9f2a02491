"""``fp4bench stack freeze [--runner NAME | --file F] [--python VENV] [--check]``: the deployed stack.

A runner serves with one venv; its stack file (``stack/<runner>.txt``, committed) pins every
distribution of that venv at its exact version, so the nightly gate and the upgrade gate's side A
install what the runner deploys, not the newest releases. The file is a pip requirements file:

* every line ``name==version`` (torch with its local version, e.g. ``2.9.1+cu128``, which is the
  CUDA variant; the nvidia-* CUDA wheels, flashinfer-python, sgl-kernel, apache-tvm-ffi, ...), so
  ``pip install --no-deps -r stack/<runner>.txt`` rebuilds the venv and ``pip check`` proves it
  complete; nothing newer can come in because nothing is resolved;
* torch's wheel index as an ``--extra-index-url`` line (a ``+cpu``/``+cuXYZ`` build is only on
  ``https://download.pytorch.org/whl/<variant>``);
* a header of ``#`` lines: what wrote it, the Python version, torch's CUDA variant and index, and
  fp4bench's own version (fp4bench is installed from the checkout, ``pip install --no-deps -e .``,
  so it is recorded in the header and not pinned).

A requirements file rather than TOML: pip reads it as it is (``-r`` to install, ``-c`` to
constrain), and a version change is a one-line diff. ``--check`` compares a venv with the file
(read strictly, ``cli.requirements``): exit 0 same, 1 different (each difference listed), 2 usage
error (no such file or venv, a line that is not an exact pin, a package pinned twice).

The file is written only here (``fp4bench.outputs``, owner ``stack freeze``): atomically, never
over a file that is not a stack file, never through a symlink into another folder. ``--runner``
is a name (letters, digits, ``.``, ``_``, ``-``), never a path; ``--file -`` prints the file.
A file that cannot be written exits 4.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from fp4bench.cli.command import argument_parser, fail, fill, plain, run
from fp4bench.cli.requirements import read_pins, same_version
from fp4bench.outputs import is_stdout, write_document

PROG = "fp4bench stack"
#: PyPI's Linux torch wheel without a local version is a CUDA build; the other variants live here
TORCH_INDEX = "https://download.pytorch.org/whl/"
#: not pinned: the installer itself, and fp4bench (installed from the checkout)
UNPINNED = ("pip", "fp4bench")
#: the header names these when present (the packages an upgrade is about)
KEY_PACKAGES = ("torch", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache", "sgl-kernel",
                "apache-tvm-ffi", "triton")

_LIST = ("import importlib.metadata as m, json, sys; "
         "print(json.dumps({'python': sys.version.split()[0], "
         "'dists': sorted({(d.metadata['Name'] or '', d.version) for d in m.distributions()})}))")


def canonical(name: str) -> str:
    """PEP 503 name: ``Flashinfer_Python`` -> ``flashinfer-python``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def torch_variant(version: str) -> str | None:
    """The local version of a torch build (``2.9.1+cu128`` -> ``cu128``), None for a plain one."""
    return version.partition("+")[2] or None


def installed(python: str) -> tuple[str, dict[str, str]]:
    """(python version, {canonical name: version}) of the interpreter's environment."""
    try:
        out = subprocess.run([python, "-I", "-c", _LIST], capture_output=True, text=True, check=True,
                             timeout=120).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise ValueError(f"--python {python}: cannot list its packages ({exc})") from None
    doc = json.loads(out)
    return doc["python"], {canonical(n): v for n, v in doc["dists"] if n}


def render(runner: str, python_version: str, dists: dict[str, str]) -> str:
    """The stack file's text for these distributions."""
    torch = dists.get("torch")
    variant = torch_variant(torch) if torch else None
    lines = [f"# fp4bench stack of runner {runner}: the exact venv it serves with.",
             "# Written by `fp4bench stack freeze`; check a venv with `fp4bench stack freeze --check`.",
             "# install: pip install --no-deps -r THIS_FILE && pip install --no-deps -e . && pip check",
             f"# python {python_version}"]
    if torch:
        where = f"{TORCH_INDEX}{variant}" if variant else "the default index (PyPI: a CUDA build on Linux)"
        lines.append(f"# torch {torch}: variant {variant or 'none (plain version)'}, from {where}")
    lines += [f"# {n} {dists[n]}" for n in KEY_PACKAGES[1:] if n in dists]
    lines.append(f"# fp4bench {dists.get('fp4bench', 'not installed')} (installed from the checkout, not pinned)")
    if variant:
        lines.append(f"--extra-index-url {TORCH_INDEX}{variant}")
    lines += [f"{n}=={v}" for n, v in sorted(dists.items()) if n not in UNPINNED]
    return "\n".join(lines) + "\n"


def differences(pins: dict[str, str], dists: dict[str, str]) -> list[str]:
    """One line per package that the venv has at another version, lacks, or has in addition."""
    have = {n: v for n, v in dists.items() if n not in UNPINNED}
    out = [f"{n}: stack file {v}, venv {have[n]}" for n, v in sorted(pins.items())
           if n in have and not same_version(v, have[n])]
    out += [f"{n}: stack file {v}, venv does not have it" for n, v in sorted(pins.items()) if n not in have]
    out += [f"{n}: venv {v}, not in the stack file" for n, v in sorted(have.items()) if n not in pins]
    return out


def build_parser() -> argparse.ArgumentParser:
    ap = argument_parser(prog=PROG, description=plain(__doc__.split("\n\n")[1]),
                         epilog="exit status: 0 written / same, 1 venv differs from the file (--check), 2 usage "
                                "error, 4 the file could not be written (the old one is unchanged)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    fill(sub.add_parser("freeze", help="write (or --check) the stack file of a runner's venv", allow_abbrev=False),
         "stack freeze")
    return ap


def stack_main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv, _freeze)


def _freeze(args: argparse.Namespace) -> int:
    from fp4bench.run.worker.interpreter import interpreter

    try:
        if not args.file and not args.runner:
            raise ValueError("give --runner NAME (writes <stack-dir>/NAME.txt) or --file PATH")
        if args.runner is not None:
            check_runner(args.runner)
        path = Path(args.file) if args.file else Path(args.stack_dir) / f"{args.runner}.txt"
        runner = args.runner or path.stem
        if not args.check:
            if not args.file:
                _make_stack_dir(Path(args.stack_dir))
            _check_target(path, "--file" if args.file else "--runner", args.stack_dir)
        python = interpreter(args.python) if args.python else sys.executable
        version, dists = installed(python)
        if args.check:
            if is_stdout(path) or not path.is_file():
                raise ValueError(f"{path}: no such stack file (write it with `fp4bench stack freeze`)")
            diff = differences(read_pins(path, version), dists)
    except ValueError as exc:
        return fail(f"{PROG} freeze", exc, None)
    if args.check:
        if diff:
            print(f"{python} differs from {path} ({len(diff)} packages):")
            print("\n".join(f"  {d}" for d in diff))
            return 1
        print(f"{python} matches {path} ({len(dists)} distributions)")
        return 0
    if write_document(path, render(runner, version, dists)) is not None:
        print(f"stack of {python} written: {path} (commit it; the nightly and the upgrade gate install it)")
    return 0


_RUNNER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_runner(name: str) -> str:
    """``--runner``: a name (letters, digits, ``.``, ``_``, ``-``; at most 100), never a path."""
    if not _RUNNER.fullmatch(name) or ".." in name:
        raise ValueError(f"--runner {name!r}: a runner name is letters, digits, '.', '_' and '-' (at most 100, "
                         "no '..'), not a path; use --file PATH to name a file")
    return name


def _make_stack_dir(folder: Path) -> None:
    """The stack folder (the command's own), created when missing."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--stack-dir {folder}: cannot create it: {exc.strerror or exc}") from None


def _check_target(path: Path, option: str, stack_dir: str) -> None:
    """The stack file may be written: checked by ``fp4bench.outputs`` as the stack files' owner; an
    existing file is replaced only when it is a stack file (its first line says so)."""
    from fp4bench.outputs import OutputError, check_output
    from fp4bench.protected import STACK, STACK_MARK

    try:
        checked = check_output(path, option, force=True, owner=STACK, stack_dirs=[stack_dir])
    except OutputError as exc:
        raise ValueError(str(exc)) from None
    if checked is not None and checked.is_file():
        with open(checked, "rb") as f:
            head = f.read(len(STACK_MARK))
        if head != STACK_MARK:
            raise ValueError(f"{option} {path}: exists and is not a stack file (it does not start with "
                             f"{STACK_MARK.decode()!r}); remove it or name another file")
