"""How a worker process ends: its exit handlers run and its output is flushed, then it exits at
once, without the interpreter's teardown.

Tearing down the modules of a process that imported torch takes about 0.7 s of CPU (measured on
an idle CPU worker: 0.77 s from its stdin closed to its exit, 0.03 s without the teardown), and
frees nothing that the end of the process does not (the driver releases a CUDA context either
way). The exit handlers (``atexit``: logging's flush, ``weakref.finalize`` clean-ups such as
temporary directories, coverage's data) still run, and the worker's threads are all daemons.
"""

from __future__ import annotations

import atexit
import os
import sys
from typing import NoReturn


def quick_exit(status: int) -> NoReturn:
    """Run the exit handlers, flush stdout and stderr, and end the process with ``status``."""
    atexit._run_exitfuncs()  # CPython's own call at shutdown; os._exit alone would skip them
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # the parent closed its end, or the stream is closed: nothing left to deliver
    os._exit(status)
