"""SIGTERM stops a run the way Ctrl-C does (``install``): CI runners, ``timeout`` and job
schedulers send SIGTERM, and before it killed the process where it stood — no end line in the
line log, no verdict, a candidate never marked as interrupted.

The handler raises ``KeyboardInterrupt`` in the main thread, so pytest's own interrupt path runs:
the case being measured stops, the session ends as interrupted (pytest exit 2), the line log
keeps every finished case and gets its ``end`` line with ``interrupted: true``, and a candidate is
recorded as not clean (``approve`` refuses it). A second SIGTERM while that runs is the default
action (the process ends at once). The previous handler is restored when the session ends.
"""

from __future__ import annotations

import signal
import threading

import pytest


def install(config: pytest.Config) -> None:
    """SIGTERM -> ``KeyboardInterrupt`` for this session (main thread only; a no-op elsewhere)."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process
        raise KeyboardInterrupt("SIGTERM: the run was stopped")

    signal.signal(signal.SIGTERM, stop)
    config.add_cleanup(lambda: signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL))
