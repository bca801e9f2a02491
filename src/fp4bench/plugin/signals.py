"""SIGTERM stops a run the way Ctrl-C does (``install``): CI runners, ``timeout`` and job
schedulers send SIGTERM, and before it killed the process where it stood — no end line in the
line log, no verdict, a candidate never marked as interrupted.

The handler raises ``KeyboardInterrupt`` in the main thread, so pytest's own interrupt path runs:
the case being measured stops, the session ends as interrupted (pytest exit 2), the line log
keeps every finished case and gets its ``end`` line with ``interrupted: true``, and a candidate is
recorded as not clean (``approve`` refuses it). A second SIGTERM while that runs is the default
action (the process ends at once). The previous handler is restored when the session ends.
Before raising, the handler calls what ``on_stop`` registered (the ``-n`` controller passes the
SIGTERM on to its workers, which only the controller received).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable

import pytest


_ON_STOP = pytest.StashKey[list]()


def on_stop(config: pytest.Config, fn: Callable[[int], None]) -> None:
    """Call ``fn(signum)`` when SIGTERM stops this session, before the ``KeyboardInterrupt``."""
    config.stash.setdefault(_ON_STOP, []).append(fn)


def install(config: pytest.Config) -> None:
    """SIGTERM -> ``KeyboardInterrupt`` for this session (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process
        for fn in config.stash.get(_ON_STOP, []):
            fn(signum)
        raise KeyboardInterrupt("SIGTERM: the run was stopped")

    signal.signal(signal.SIGTERM, stop)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL))
