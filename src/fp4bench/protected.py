"""What a file is, for the one write path (``fp4bench.outputs``): ``protected(path)`` says whether
a path is a file only one command may write, judged by what the file is rather than by its name.

A baseline lost to a writer that went around the check is what this guards against: anything
under a baselines root (``approved.json``, ``units/<GPU UUID>.json``, ``candidates/``), any
``approved.json`` or ``units/GPU-….json`` elsewhere, a stack file (``stack/<runner>.txt``), and an
existing file whose content is a slim baseline or a stack file — a copy, a symlink (judged by its
resolved target) or a hard link (judged by its inode) of one. Each kind has one owner
(``APPROVE``, ``STACK``, ``RUN``); ``outputs.check_output`` refuses every other writer.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: the file only ``fp4bench baseline approve`` writes (``gate.store.APPROVED``)
APPROVED = "approved.json"
UNITS = "units"
CANDIDATES = "candidates"
#: the default baselines root and stack folder, relative to where fp4bench runs
BASELINES_ROOT = "baselines"
STACK_DIR = "stack"
#: owners: the one writer of each protected kind
APPROVE, STACK, RUN = "baseline approve", "stack freeze", "candidate"
#: how a slim baseline and a stack file begin (``gate.slim.slim_text``, ``cli.stack.render``)
BASELINE_MARK = b'"format": "fp4bench-baseline"'
STACK_MARK = b"# fp4bench stack of runner"
GPU_UUID = re.compile(r"(?:GPU|MIG)-[0-9A-Fa-f-]{8,64}")


def _resolve(p: Path) -> Path:
    try:
        return p.resolve()
    except (OSError, RuntimeError):
        return Path(os.path.abspath(p))


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _head(p: Path) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(256)
    except OSError:
        return b""


def _guarded_inodes(roots: Iterable[Path]) -> set[tuple[int, int]]:
    """(device, inode) of every file under the baselines roots and stack folders."""
    out = set()
    for root in roots:
        if root.is_dir():
            for f in root.rglob("*"):
                with contextlib.suppress(OSError):
                    if f.is_file():
                        s = f.stat()
                        out.add((s.st_dev, s.st_ino))
    return out


def protected(path: str | os.PathLike[str], roots: Iterable[Any] = (), stack_dirs: Iterable[Any] = ()
              ) -> tuple[str, str] | None:
    """``(kind, owner)`` when ``path`` is a file only ``owner`` may write, else None. Judged on the
    resolved path (a symlink is its target), the inode (a hard link is its other names) and the
    content of an existing file. ``roots``: baselines roots besides ``baselines``; ``stack_dirs``:
    stack folders besides ``stack``."""
    p = Path(path)
    res = _resolve(p)
    root_list = [_resolve(Path(r)) for r in (*[r for r in roots if r is not None], BASELINES_ROOT)]
    stack_list = [_resolve(Path(s)) for s in (*[s for s in stack_dirs if s is not None], STACK_DIR)]
    for root in root_list:
        if _inside(res, root):
            rel = res.relative_to(root).parts
            if len(rel) == 3 and rel[1] == CANDIDATES:
                return "a candidate baseline", RUN
            return f"under the baselines root {root}", APPROVE
    if res.name == APPROVED:
        return "an approved baseline", APPROVE
    if res.parent.name == UNITS and GPU_UUID.fullmatch(res.stem):
        return "a unit's baseline", APPROVE
    for folder in stack_list:
        if res.parent == folder and res.suffix == ".txt":
            return "a stack file", STACK
    if res.is_file():
        head = _head(res)
        if BASELINE_MARK in head:
            return "a baseline (its content is one)", APPROVE
        if head.startswith(STACK_MARK):
            return "a stack file (its content is one)", STACK
        with contextlib.suppress(OSError):
            s = res.stat()
            if s.st_nlink > 1 and (s.st_dev, s.st_ino) in _guarded_inodes([*root_list, *stack_list]):
                return "a hard link to a baseline or stack file", APPROVE
    return None
