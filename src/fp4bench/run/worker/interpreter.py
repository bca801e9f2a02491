"""Which Python a worker (or ``fp4bench stack``, ``bisect``) runs: a name, a path or a venv.

Imports nothing of the package, so a command that only needs an interpreter's path (``fp4bench
stack freeze``) does not load ``pool``'s imports (torch, numpy and scipy, through ``run.case``).
"""

from __future__ import annotations

import shutil
from pathlib import Path


def interpreter(path_or_venv: str) -> str:
    """A Python interpreter from ``python3``, ``/path/to/python`` or a venv directory."""
    p = Path(path_or_venv)
    if p.is_dir():
        for cand in (p / "bin" / "python", p / "bin" / "python3", p / "Scripts" / "python.exe"):
            if cand.is_file():
                return str(cand)
        raise ValueError(f"{path_or_venv}: a directory without bin/python (not a virtual environment)")
    if p.is_file():
        return str(p.absolute())  # never looked up on PATH by Popen
    found = shutil.which(path_or_venv)
    if found is None:
        raise ValueError(f"{path_or_venv}: neither a Python interpreter nor a virtual environment")
    return found
