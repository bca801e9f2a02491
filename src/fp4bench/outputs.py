"""Output-path policy: every file a run writes is checked before the run starts and written atomically.

A run that measures for an hour must not lose its result to a path it could have refused at the
start, and must never write over a file it reads. So every front end (the pytest plugin, ``compare``,
``ab``, ``report``, ``baseline``) checks each output path with ``check_output`` before any work:

* the path is not empty, not a folder, and its parent folder exists and is writable;
* it is not one of the run's inputs (the baseline gated against, the file compared, ...), even
  with ``force``: writing the verdict over the baseline destroys the reference;
* it is not a baseline's ``approved.json``: only ``fp4bench baseline approve`` writes that;
* an existing file is refused unless ``force`` (``--force``; ``--fp4-force`` in pytest), except for
  an ``append`` output whose documented meaning is to add to the file (``$GITHUB_STEP_SUMMARY``).

``write_atomic`` writes through ``<name>.partial-<pid>`` in the same folder (visible, so a crash
leaves a file the user can see and remove) and moves it onto the name in one ``os.replace``.
A refusal is an ``OutputError`` whose message names the option and the path; the front ends turn
it into their usage error (exit 2, pytest exit 4).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: the file only ``fp4bench baseline approve`` writes (``gate.store.APPROVED``)
APPROVED = "approved.json"


class OutputError(ValueError):
    """An output path refused before the run: the message names the option and the path."""


def _same_file(a: Path, b: Path) -> bool:
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def check_output(path: str | os.PathLike[str], option: str, *, inputs: Iterable[str | os.PathLike[str]] = (),
                 force: bool = False, append: bool = False, approved_ok: bool = False) -> Path:
    """``path`` as a ``Path`` if the run may write it, else ``OutputError`` naming ``option``.
    ``inputs``: files the same run reads (never written); ``append``: the output adds to an
    existing file by design; ``approved_ok``: the caller is ``approve`` itself."""
    text = os.fspath(path)
    if not text or not text.strip():
        raise OutputError(f"{option}: an empty path; name a file")
    p = Path(text)
    if p.is_dir():
        raise OutputError(f"{option} {p}: is a folder; name a file")
    parent = p.parent
    if not parent.is_dir():
        raise OutputError(f"{option} {p}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {p}: the folder {parent} is not writable")
    for inp in inputs:
        if inp is not None and (_same_file(p, Path(inp)) or p.resolve() == Path(inp).resolve()):
            raise OutputError(f"{option} {p}: is an input of this run ({inp}); writing it would destroy it")
    if p.name == APPROVED and not approved_ok:
        raise OutputError(f"{option} {p}: only 'fp4bench baseline approve' writes an {APPROVED} "
                          "(it refuses unclean or regressed runs); write another name")
    if p.exists() and not append:
        if not p.is_file():
            raise OutputError(f"{option} {p}: exists and is not a regular file")
        if not force:
            raise OutputError(f"{option} {p}: already exists; choose a new name or pass {force_flag(option)} "
                              "to overwrite it")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputError(f"{option} {p}: the file is not writable")
    return p


def check_output_dir(path: str | os.PathLike[str], option: str) -> Path:
    """A folder the run writes into (created if missing): not empty, not a file, and writable, or
    its parent a writable folder."""
    text = os.fspath(path)
    if not text or not text.strip():
        raise OutputError(f"{option}: an empty path; name a folder")
    p = Path(text)
    if p.exists() and not p.is_dir():
        raise OutputError(f"{option} {p}: is a file, not a folder")
    where = p if p.is_dir() else p.parent
    if not where.is_dir():
        raise OutputError(f"{option} {p}: the folder {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {p}: the folder {where} is not writable")
    return p


def check_outputs(paths: Mapping[str, str | os.PathLike[str] | None], inputs: Iterable[Any] = (),
                  force: bool = False) -> list[Path]:
    """``check_output`` for each ``option -> path`` given (None: not asked for; ``-``: stdout),
    refusing two options that name one file (the second write would replace the first)."""
    inputs = [i for i in inputs if i is not None]
    seen: dict[Path, str] = {}
    for option, path in paths.items():
        if path is None or os.fspath(path) == "-":
            continue
        p = check_output(path, option, inputs=inputs, force=force)
        if p.resolve() in seen:
            raise OutputError(f"{option} {p}: also the file of {seen[p.resolve()]}; name another file")
        seen[p.resolve()] = option
    return list(seen)


def force_flag(option: str) -> str:
    """The overwrite flag of the front end ``option`` belongs to."""
    return "--fp4-force" if option.startswith("--fp4-") or option.startswith("--benchmark-") else "--force"


def temp_path(path: str | os.PathLike[str]) -> Path:
    """Where ``path`` is written before ``os.replace`` moves it into place (same folder, visible)."""
    p = Path(path)
    return p.with_name(f"{p.name}.partial-{os.getpid()}")


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through ``temp_path`` + ``os.replace``: readers see the old file or
    the whole new one, never a half-written one; a failed write leaves no temp file behind."""
    p = Path(path)
    tmp = temp_path(p)
    try:
        with open(tmp, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p
