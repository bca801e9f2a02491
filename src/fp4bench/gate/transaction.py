"""One approval as one transaction: ``approval_transaction(root, folder)`` holds the GPU folder's
lock while the approval decides, collects every file it will write (``Transaction.add``) and
replaces them all or none (``Transaction.commit``, ``fp4bench.outputs.replace_together``).

A file is added only when it resolves inside the GPU folder under the baselines root (a ``units``
symlink pointing elsewhere is refused) and is not a folder; two approvals of one GPU folder take
turns (``fp4bench.outputs.locked``), so one's restore never races the other's replace. A refused
approval of a GPU with no folder yet leaves none behind.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

from fp4bench.gate.baseline import BaselineError
from fp4bench.outputs import locked, replace_together


class Transaction:
    """The files one approval writes, replaced together by ``commit``."""

    def __init__(self, root: Path, folder: Path):
        self.root, self.folder = root, folder
        self.documents: list[tuple[Path, str]] = []

    def add(self, path: Path, text: str) -> None:
        """Stage ``text`` for ``path``; ``BaselineError`` for a path that resolves outside the GPU
        folder or is a folder or special file."""
        where = path.resolve()
        inside = self.folder.resolve()
        if inside not in where.parents:
            raise BaselineError(f"{path} resolves to {where}, outside the baseline folder {self.folder} "
                                "(a symlink?); refusing to write it, nothing was changed")
        if path.exists() and not path.is_file():
            raise BaselineError(f"{path}: is a folder or special file, not a baseline; nothing was changed")
        for parent in path.parents:
            if parent == self.folder:
                break
            if parent.exists() and not parent.is_dir():
                raise BaselineError(f"{parent}: is a file where a folder should be; nothing was changed")
        self.documents.append((path, text))

    def commit(self) -> None:
        """Replace every staged file or none (``WriteError`` naming the file that failed)."""
        replace_together(self.documents)


@contextlib.contextmanager
def approval_transaction(root: str | os.PathLike[str], folder: Path) -> Iterator[Transaction]:
    """A ``Transaction`` of ``folder`` (``<root>/<gpu slug>``), holding its lock."""
    if folder.exists() and not folder.is_dir():
        raise BaselineError(f"{folder}: is not a folder (the GPU's baseline folder should be there); nothing "
                            "was written")
    fresh = not folder.exists()
    try:
        with locked(folder):
            yield Transaction(Path(root), folder)
    finally:
        if fresh:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty: the approval wrote nothing
