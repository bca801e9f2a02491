"""The bisection: ``fp4bench ab`` of the good release against a midpoint, narrowing the range
until two neighbours remain, then ``ab`` of that pair.

1. The ends: ``ab`` good -> bad. Not slower: the range does not reproduce the regression, nothing
   to bisect.
2. While releases lie between ``lo`` (not slower than good) and ``hi`` (slower): ``ab`` good ->
   the release nearest the middle that builds; slower: it is the new ``hi``, else the new ``lo``.
   A release that fails to install, import or prepare is recorded and the next nearest is taken.
3. ``ab`` lo -> hi. Slower: ``hi`` is the culprit. Not slower: each step is small although the ends
   differ: the change is cumulative, and every neighbouring pair of the range is measured for the
   per-step table.

``build(version)`` returns the release's venv or raises ``ReleaseBroken``; ``measure`` is the
step (``step.ab_measure``, or a fake in tests). Every step and every broken release goes into the
``State`` as it happens (an INCOMPLETE step is not kept): a rerun takes them from there instead of
measuring again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fp4bench.bisect.state import State
from fp4bench.bisect.step import Measure, Step

CULPRIT = "culprit"
CUMULATIVE = "cumulative"
NOT_REPRODUCED = "not reproduced"
UNDECIDED = "undecided"


class ReleaseBroken(Exception):
    """A release that cannot be tested here: it did not install, import or prepare (the message says which)."""


@dataclass
class Outcome:
    """What the bisect found: ``kind`` (``CULPRIT``, ``CUMULATIVE``, ``NOT_REPRODUCED``, ``UNDECIDED``),
    the culprit and the release before it (``CULPRIT``), or the interval it stopped on, the steps in
    the order tried, the per-step table (``CUMULATIVE``), and the releases that could not be built."""

    kind: str
    versions: list[str]
    tried: list[Step] = field(default_factory=list)
    per_step: list[Step] = field(default_factory=list)
    culprit: str | None = None
    previous: str | None = None
    interval: tuple[str, str] | None = None
    broken: dict[str, str] = field(default_factory=dict)
    reason: str = ""


class Bisect:
    def __init__(self, versions: list[str], build: Callable[[str], Path], measure: Measure, state: State):
        if len(versions) < 2:
            raise ValueError(f"a bisect needs a good and a bad release, got {versions}")
        self.versions, self.build, self.measure, self.state = list(versions), build, measure, state
        self.tried: list[Step] = []
        self._venvs: dict[str, Path] = {}

    def venv(self, v: str) -> Path | None:
        """The venv of ``v``; None when it cannot be built (recorded in the state)."""
        if v in self.state.broken:
            return None
        if v not in self._venvs:
            try:
                self._venvs[v] = self.build(v)
            except ReleaseBroken as exc:
                self.state.mark_broken(v, str(exc))
                return None
        return self._venvs[v]

    def ab(self, a: str, b: str, tried: bool = True) -> Step:
        """``b`` against ``a``, from the state when measured before; ``tried``: a step of the
        bisection (the per-step table of a cumulative range is not). An INCOMPLETE step (ab judged
        less than asked, e.g. interrupted) is not kept: a rerun measures it again."""
        step = self.state.steps.get((a, b))
        if step is None:
            step = self.measure(a, self.venv(a), b, self.venv(b))
            if step.status != "INCOMPLETE":
                self.state.record(step)
        if tried:
            self.tried.append(step)
        return step

    def _outcome(self, kind: str, **kw) -> Outcome:
        return Outcome(kind, self.versions, list(self.tried), broken=dict(self.state.broken), **kw)

    def run(self) -> Outcome:
        vs = self.versions
        good, bad = vs[0], vs[-1]
        for end in (good, bad):
            if self.venv(end) is None:
                return self._outcome(UNDECIDED, interval=(good, bad),
                                     reason=f"the {'good' if end == good else 'bad'} release {end} cannot be built: "
                                            f"{self.state.broken[end]}")
        ends = self.ab(good, bad)
        if ends.status == "INCOMPLETE":
            return self._outcome(UNDECIDED, interval=(good, bad), reason=f"ab {good} -> {bad} was incomplete")
        if not ends.slower:
            return self._outcome(NOT_REPRODUCED, interval=(good, bad),
                                 reason=f"ab finds {bad} not slower than {good} ({ends.status}): nothing to bisect")
        lo, hi = 0, len(vs) - 1
        while hi - lo > 1:
            mid = self._midpoint(lo, hi)
            if mid is None:
                break  # every release between lo and hi is broken
            step = self.ab(good, vs[mid])
            if step.status == "INCOMPLETE":
                return self._outcome(UNDECIDED, interval=(vs[lo], vs[hi]),
                                     reason=f"ab {good} -> {vs[mid]} was incomplete")
            lo, hi = (lo, mid) if step.slower else (mid, hi)
        pair = self.ab(vs[lo], vs[hi])
        between = [v for v in vs[lo + 1:hi]]
        if pair.slower and not between:
            return self._outcome(CULPRIT, culprit=vs[hi], previous=vs[lo], interval=(vs[lo], vs[hi]))
        if pair.slower:
            return self._outcome(UNDECIDED, interval=(vs[lo], vs[hi]),
                                 reason=f"{vs[hi]} or {' or '.join(between)} made it slower (not built: "
                                        f"{', '.join(between)})")
        if pair.status == "INCOMPLETE":
            return self._outcome(UNDECIDED, interval=(vs[lo], vs[hi]), reason=f"ab {vs[lo]} -> {vs[hi]} was incomplete")
        usable = [v for v in vs if self.venv(v) is not None]
        per_step = [self.ab(a, b, tried=False) for a, b in zip(usable, usable[1:])]
        return self._outcome(CUMULATIVE, per_step=per_step, interval=(good, bad),
                             reason=f"no step is slower beyond the floor, yet {bad} is slower than {good}")

    def _midpoint(self, lo: int, hi: int) -> int | None:
        """The release between ``lo`` and ``hi`` nearest the middle that builds."""
        mid = (lo + hi) // 2
        for i in sorted(range(lo + 1, hi), key=lambda i: (abs(i - mid), i)):
            if self.venv(self.versions[i]) is not None:
                return i
        return None
