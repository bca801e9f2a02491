"""The one write path: every file fp4bench writes is checked here before the run and written here.

A run that measures for an hour must not lose its result to a path it could have refused at the
start, must never write over a file it reads, and must never change a baseline or a stack file
unless it is the command that owns it. Every front end (the pytest plugin, ``compare``, ``ab``,
``units``, ``report``, ``baseline``, ``stack``, ``fidelity``) checks each output with
``check_output`` before any work, then writes it with one of the writers below. Nothing else in
the package opens a file for writing (tests/test_write_path.py walks the source and checks).

What is checked (``check_output``):

* the path is not empty, not a folder, its parent folder exists and is writable, and an existing
  file is a regular file (a FIFO, a device or a socket is refused: it would hang or swallow the
  output);
* it is not one of the run's inputs (the baseline gated against, the files compared), even with
  ``force``: compared by resolved path and by inode, so a symlink or a hard link is the same file;
* it is not a *protected* file (``protected``), judged by what the file is, not by its name:
  anything under a baselines root (``approved.json``, ``units/``, ``candidates/``), any
  ``approved.json`` or ``units/GPU-….json``, a stack file (``stack/*.txt``), and any existing
  file whose content is a slim baseline or a stack file (a copy, a symlink or a hard link of
  one). Only the owner writes those: ``baseline approve`` the baselines (``owner=APPROVE``),
  ``stack freeze`` the stack files (``owner=STACK``), a run its own new candidate (``owner=RUN``);
  ``fp4bench.protected`` tells what a file is;
* an existing file is replaced only with ``force`` (``--force``; ``--fp4-force`` in pytest);
  streams appended by design (``$GITHUB_STEP_SUMMARY``) need no ``force``.

``-`` is standard output for every option that writes one document (``STDOUT``;
``write_document`` prints it); an option that names a folder, a stream or a record on disk
refuses ``-`` (``stdout=False``), never writes a file named ``-``.

How it is written:

* **documents** (results, verdicts, reports, plots, baselines, stack files): ``write_atomic``:
  a visible temporary ``<name>.partial-<pid>`` in the same folder, fsync, ``os.replace`` — a
  reader sees the old file or the whole new one; ``replace_together`` replaces several documents
  all or nothing (``baseline approve``), ``locked`` serializes writers of one folder;
* **streams**: ``open_stream``: the line log (one fsynced line at a time, so a killed run keeps
  its finished cases) and ``$GITHUB_STEP_SUMMARY`` (appended); opened before the run, FIFOs and
  devices refused at open too;
* **names reserved** with ``O_EXCL`` (``reserve``): a candidate's name, so two runs never share one.

A refused path is an ``OutputError`` naming the option and the path (usage error: commands exit
2, pytest 4). A write that fails anyway (full disk, file-size limit, the folder gone) is a
``WriteError`` naming the file, with nothing half-written left behind (commands exit
``EXIT_WRITE``, 4; a pytest run exits 3, incomplete). docs/outputs.md states the contract.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fp4bench.protected import RUN, _resolve, protected

#: ``-``: standard output
STDOUT = "-"
#: a command's exit status when an output could not be written (distinct from 1, a regression)
EXIT_WRITE = 4
class OutputError(ValueError):
    """An output path refused before the run: the message names the option and the path."""


class WriteError(OSError):
    """A write that failed (full disk, file-size limit, ...): the message names the file; nothing
    half-written is left."""

    def __init__(self, path: str | os.PathLike[str], exc: BaseException | str):
        why = exc if isinstance(exc, str) else (getattr(exc, "strerror", None) or str(exc))
        super().__init__(getattr(exc, "errno", None) or errno.EIO, f"cannot write {path}: {why}")
        self.path = Path(path)

    def __str__(self) -> str:
        return self.strerror


def is_stdout(path: Any) -> bool:
    return path is not None and os.fspath(path) == STDOUT


def _stat(p: Path, option: str, follow: bool = True) -> os.stat_result | None:
    """``os.stat`` of ``p``; None when there is no such file; an ``OutputError`` for a path the
    system refuses (a name too long, a loop of symlinks)."""
    try:
        return os.stat(p) if follow else os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise OutputError(f"{option} {p}: cannot use it: {exc.strerror or exc}") from None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return _resolve(a) == _resolve(b)


# --- checks before the run -----------------------------------------------------------------------

def check_output(path: str | os.PathLike[str], option: str, *, inputs: Iterable[Any] = (),
                 force: bool = False, append: bool = False, owner: str | None = None,
                 roots: Iterable[Any] = (), stack_dirs: Iterable[Any] = (), stdout: bool = True) -> Path | None:
    """``path`` as a ``Path`` if the run may write it (None: ``-``, standard output), else
    ``OutputError`` naming ``option``. ``inputs``: files the same run reads (never written);
    ``append``: a stream that adds to an existing file by design; ``owner``: the command asking
    (``APPROVE``, ``STACK``, ``RUN``: it may write its own protected kind); ``stdout``: ``-`` is
    standard output (else refused)."""
    if path is None:
        raise OutputError(f"{option}: no path; name a file")
    text = os.fspath(path)
    if not text or not text.strip():
        raise OutputError(f"{option}: an empty path; name a file")
    if text == STDOUT:
        if stdout:
            return None
        raise OutputError(f"{option} -: this option writes a file, not standard output; name a file")
    if "\n" in text or "\0" in text:
        raise OutputError(f"{option} {text!r}: a path with a newline or NUL character")
    p = Path(text)
    st = _stat(p, option)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{option} {p}: is a folder; name a file")
    parent = p.parent
    pst = _stat(parent, option)
    if pst is None or not stat.S_ISDIR(pst.st_mode):
        raise OutputError(f"{option} {p}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {p}: the folder {parent} is not writable")
    for inp in inputs:
        if inp is not None and not is_stdout(inp) and (_same_file(p, Path(inp)) or _resolve(p) == _resolve(Path(inp))):
            raise OutputError(f"{option} {p}: is an input of this run ({inp}); writing it would destroy it")
    guard = protected(p, roots, stack_dirs)
    if guard is not None and guard[1] != owner:
        kind, who = guard
        hint = "" if who == RUN else f"; only 'fp4bench {who}' writes one"
        raise OutputError(f"{option} {p}: is {kind}{hint}; write another name")
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise OutputError(f"{option} {p}: exists and is not a regular file (a FIFO, device or socket); "
                              "name a file")
        if not append and not force:
            raise OutputError(f"{option} {p}: already exists; choose a new name or pass {force_flag(option)} "
                              "to overwrite it")
        if not os.access(p, os.W_OK):
            raise OutputError(f"{option} {p}: the file is not writable")
    return p


def check_output_dir(path: str | os.PathLike[str], option: str, roots: Iterable[Any] = (),
                     owner: str | None = None) -> Path:
    """A folder the run writes into (created if missing): not empty, not ``-``, not a file, not
    under a baselines root (unless ``owner`` is ``APPROVE``: the root is its own), and writable,
    or its parent a writable folder."""
    text = os.fspath(path) if path is not None else ""
    if not text or not text.strip():
        raise OutputError(f"{option}: an empty path; name a folder")
    if text == STDOUT:
        raise OutputError(f"{option} -: this option names a folder, not standard output")
    p = Path(text)
    st = _stat(p, option)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise OutputError(f"{option} {p}: is a file, not a folder")
    where = p if st is not None else p.parent
    if _stat(where, option) is None:
        raise OutputError(f"{option} {p}: the folder {where} does not exist")
    if not os.access(where, os.W_OK | os.X_OK):
        raise OutputError(f"{option} {p}: the folder {where} is not writable")
    guard = protected(p / "x", roots)
    if guard is not None and guard[1] != owner:
        raise OutputError(f"{option} {p}: is {guard[0]}; write another folder")
    return p


def check_outputs(paths: Mapping[str, str | os.PathLike[str] | None], inputs: Iterable[Any] = (),
                  force: bool = False, roots: Iterable[Any] = ()) -> list[Path]:
    """``check_output`` for each ``option -> path`` given (None: not asked for; ``-``: standard
    output), refusing two options that name one file (the second write would replace the first)
    and ``-`` for more than one of them."""
    inputs = [i for i in inputs if i is not None]
    seen: dict[Path, str] = {}
    to_stdout = [o for o, p in paths.items() if is_stdout(p)]
    if len(to_stdout) > 1:
        raise OutputError(f"{' and '.join(to_stdout)}: only one output can be standard output ('-')")
    for option, path in paths.items():
        if path is None or is_stdout(path):
            continue
        p = check_output(path, option, inputs=inputs, force=force, roots=roots)
        key = _resolve(p)
        if key in seen:
            raise OutputError(f"{option} {p}: also the file of {seen[key]}; name another file")
        seen[key] = option
    return [Path(k) for k in seen]


def force_flag(option: str) -> str:
    """The overwrite flag of the front end ``option`` belongs to."""
    return "--fp4-force" if option.startswith("--fp4-") or option.startswith("--benchmark-") else "--force"


# --- documents -----------------------------------------------------------------------------------

def temp_path(path: str | os.PathLike[str], tag: str = "partial") -> Path:
    """Where ``path`` is written before ``os.replace`` moves it into place (same folder, visible)."""
    p = Path(path)
    return p.with_name(f"{p.name}.{tag}-{os.getpid()}")


def _write_file(target: Path, data: bytes, mode: int) -> None:
    """``data`` into a new file ``target`` (never through a symlink), fsynced."""
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _bytes(data: str | bytes) -> bytes:
    return data.encode("utf-8") if isinstance(data, str) else data


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` through ``temp_path`` + fsync + ``os.replace``: readers see the old
    file or the whole new one, never a half-written one. A failed write leaves no temp file behind
    and raises ``WriteError`` naming ``path``."""
    p = Path(path)
    tmp = temp_path(p)
    try:
        _write_file(tmp, _bytes(data), mode)
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise WriteError(p, exc) from None
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(p.parent)
    return p


def write_document(path: str | os.PathLike[str] | None, data: str | bytes) -> Path | None:
    """One document: ``-`` prints it on standard output, a path is written with ``write_atomic``."""
    if path is None:
        return None
    if is_stdout(path):
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        try:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        except UnicodeEncodeError:
            enc = getattr(sys.stdout, "encoding", None) or "ascii"
            sys.stdout.write(text.encode(enc, "replace").decode(enc))
        return None
    return write_atomic(path, data)


def replace_together(documents: Sequence[tuple[Path, str | bytes]]) -> None:
    """Replace every ``(path, data)`` or none: each is first written to its temporary, then each
    existing file is kept as ``<name>.backup-<pid>`` while the temporaries are moved into place;
    any failure moves the backups back and removes what was new (``WriteError`` naming the file).
    Folders the documents need are created and, on failure, removed again when still empty."""
    made: list[Path] = []
    temps: dict[Path, Path] = {}
    backups: dict[Path, Path] = {}
    done: list[Path] = []
    current = None
    try:
        for path, data in documents:
            current = path
            for folder in reversed([path.parent, *path.parent.parents]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
            if path.is_dir() or (path.exists() and not path.is_file()):
                raise IsADirectoryError(errno.EISDIR, "a folder or special file is in its place")
            temps[path] = temp_path(path)
            _write_file(temps[path], _bytes(data), 0o644)
        for path, _ in documents:
            current = path
            if path.is_file():
                backups[path] = temp_path(path, "backup")
                with contextlib.suppress(FileNotFoundError):
                    backups[path].unlink()
                os.link(path, backups[path])
        for path, _ in documents:
            current = path
            os.replace(temps[path], path)
            del temps[path]
            done.append(path)
    except BaseException as exc:
        for path in reversed(done):
            with contextlib.suppress(OSError):
                if path in backups:
                    os.replace(backups.pop(path), path)
                else:
                    path.unlink()
        for f in (*temps.values(), *backups.values()):
            with contextlib.suppress(OSError):
                f.unlink()
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                folder.rmdir()
        if isinstance(exc, OSError) and not isinstance(exc, WriteError):
            raise WriteError(current, exc) from None
        raise
    for f in backups.values():
        with contextlib.suppress(OSError):
            f.unlink()
    for folder in {p.parent for p, _ in documents}:
        _fsync_dir(folder)


@contextlib.contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``folder`` (created if missing) while the block runs: two
    writers of one folder take turns, so one's restore never races the other's replace."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# --- streams and reserved names ------------------------------------------------------------------

class Stream:
    """An output written a piece at a time (the line log, ``$GITHUB_STEP_SUMMARY``): each ``write``
    is on disk (fsynced) before it returns; a failure is a ``WriteError`` naming the file."""

    def __init__(self, path: Path, fd: int):
        self.path, self._fd = path, fd

    def write(self, text: str) -> None:
        if self._fd < 0:
            raise WriteError(self.path, "the stream is closed")
        try:
            view = memoryview(text.encode("utf-8"))
            while view:
                view = view[os.write(self._fd, view):]
            os.fsync(self._fd)
        except OSError as exc:
            raise WriteError(self.path, exc) from None

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_stream(path: str | os.PathLike[str], option: str, *, append: bool = False, force: bool = False) -> Stream:
    """Open a stream: ``append`` adds to the file (created if missing); else a new file (an existing
    one is truncated only with ``force``). Opened without blocking and refused unless it is a
    regular file, so a FIFO or a device can never hang or swallow the run's record."""
    p = Path(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    flags |= os.O_APPEND if append else (os.O_TRUNC if force else os.O_EXCL)
    try:
        fd = os.open(p, flags, 0o644)
    except FileExistsError:
        raise OutputError(f"{option} {p}: already exists; choose a new name or pass {force_flag(option)}") from None
    except OSError as exc:
        raise OutputError(f"{option} {p}: cannot open it: {exc.strerror or exc}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OutputError(f"{option} {p}: is not a regular file (a FIFO, device or socket); name a file")
    fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    return Stream(p, fd)


def append_once(path: str | os.PathLike[str], option: str, text: str) -> None:
    """Append ``text`` to the stream ``path`` in one write (``$GITHUB_STEP_SUMMARY``); a path that
    became unusable since it was checked is a ``WriteError`` naming it."""
    try:
        s = open_stream(path, option, append=True)
    except OutputError as exc:
        raise WriteError(path, str(exc)) from None
    try:
        s.write(text)
    finally:
        s.close()


def open_for_library(path: str | os.PathLike[str]):
    """A new binary file for a library that writes it itself (pytest-benchmark before 5.3 takes an
    open file as ``--benchmark-json``): the temporary of a document, never through a symlink."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    return os.fdopen(fd, "wb")


def reserve(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty if no file has that name (``O_EXCL``: two runs never get one name);
    False when it exists."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def remove_quietly(*paths: Any) -> None:
    """Remove what a failed write left (a reserved name, a partial file); missing ones are fine."""
    for p in paths:
        if p is not None:
            with contextlib.suppress(OSError):
                Path(p).unlink()
