"""The one clock of the package: monotonic time, sleeping and waiting.

Everything in fp4bench that times a CPU call, keeps a budget, schedules rounds, prints an ETA or
waits for a worker reads time here and nowhere else (a test in ``tests/test_clock.py`` refuses
``time.perf_counter``, ``time.monotonic`` and ``time.sleep`` in any other module). The clock in use
is process-wide and replaceable:

* ``RealClock`` (the default): ``time.perf_counter`` (monotonic, the highest resolution the
  platform has), ``time.sleep`` and ``threading.Event.wait``;
* ``SimClock``: simulated seconds that move only when someone advances them. A fake kernel "takes"
  1 ms by ``clock.spin(1e-3)`` (on the real clock a busy-wait), a sleep advances by its length, and a wait that nothing ends
  advances to its deadline, so timing, budgets and schedules are tested exactly and instantly,
  whatever else the machine is doing.

``using(SimClock())`` swaps the clock for a block (tests, in-process fake workers); the module
functions ``now``, ``sleep``, ``wait``, ``advance`` and ``spin`` ask whichever clock is in use.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator


class RealClock:
    """The machine's monotonic clock."""

    simulated = False

    def now(self) -> float:
        return time.perf_counter()

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Wait until ``event`` is set or ``timeout`` seconds passed; whether it was set."""
        return event.wait(timeout)

    def advance(self, seconds: float) -> None:
        """Spend ``seconds`` of this clock's time: on the real clock, by sleeping."""
        self.sleep(seconds)

    def spin(self, seconds: float) -> None:
        """Keep the CPU busy for ``seconds`` (a CPU "kernel" of known length)."""
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass


class SimClock:
    """Simulated monotonic seconds, moved only by ``advance``, ``sleep`` and unended ``wait``."""

    simulated = True

    def __init__(self, start: float = 0.0) -> None:
        self._t = float(start)
        self._lock = threading.Lock()

    def now(self) -> float:
        return self._t

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"a clock cannot go back: advance({seconds!r})")
        with self._lock:
            self._t += float(seconds)

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def spin(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def wait(self, event: threading.Event, timeout: float | None) -> bool:
        """Set already: True at once. Otherwise the time runs out: the clock moves to the deadline
        (a wait without a timeout on an unset event would never end, and is refused)."""
        if event.is_set():
            return True
        if timeout is None:
            raise RuntimeError("waiting without a timeout on a simulated clock never ends")
        self.advance(max(0.0, timeout))
        return event.is_set()


_current: RealClock | SimClock = RealClock()


def current() -> RealClock | SimClock:
    """The clock in use."""
    return _current


@contextlib.contextmanager
def using(clock: RealClock | SimClock) -> Iterator[RealClock | SimClock]:
    """Use ``clock`` for everything in the block, then the one before again."""
    global _current
    before, _current = _current, clock
    try:
        yield clock
    finally:
        _current = before


def now() -> float:
    """Monotonic seconds of the clock in use (differences only: the origin means nothing)."""
    return _current.now()


def sleep(seconds: float) -> None:
    _current.sleep(seconds)


def wait(event: threading.Event, timeout: float | None) -> bool:
    return _current.wait(event, timeout)


def advance(seconds: float) -> None:
    """Spend ``seconds``: a simulated clock moves, the real one sleeps."""
    _current.advance(seconds)


def spin(seconds: float) -> None:
    """Busy ``seconds`` (a fake kernel, a CPU slowdown): the real clock spins the CPU, a simulated
    one moves."""
    _current.spin(seconds)
