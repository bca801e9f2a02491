"""A verdict: one benchmark's (or availability entry's) outcome, with what explains it.

The timing of one benchmark is decided by ``gate.rule`` on its **window medians**
(``gate.judge``)::

    FAIL       the change is shown, by >= 2 new windows, to reach the guard band
               log(1 + floor * (1 - margin)) (``rule.decide``)
    PASS       it is shown to stay below the guard band; "improved" when shown below minus it
    AMBIGUOUS  neither, and no further window can be taken (``judge(budget_left=False)``, every
               ``compare``); printed with its interval. In a pytest run an undecided benchmark
               takes another window first (``Verdict.wants_more``), up to a per-case and a
               session budget. Too few samples (``min_samples``) is AMBIGUOUS too, undecided.
               An undecided benchmark whose interval lies wholly beyond the guard band (on fewer
               new windows than a FAIL needs, or but for another unit's offset) is AMBIGUOUS
               with ``remeasure``: the run exits 3 (re-measure), never 0
    INVALID    either run flagged a clock anomaly / invalid sample set in ``extra_info``, or (with
               ``Policy(throttle="invalid")``) throttling: the timing is not judged. INVALID and
               too-few-samples AMBIGUOUS fail the gate unless ``allow_ambiguous``
               (``policy.is_failure``): a run where no verdict could be reached must not pass as
               if it had been checked
    NEW / MISSING  only in the current run / only in the baseline (MISSING fails by default:
               pytest-benchmark matches by ``fullname`` and silently skips renamed tests)

Besides the timing (kind ``TIMING``) a verdict can be about the tactics (``gate.tactics``): a
tactic lost or new in the availability map, an explicit tactic that now runs another kernel,
a baseline kernel no tactic runs any more; an autotuner pick slower than an explicit tactic of
the same run (``MISPICK``, ``gate.picks``); or, with ``Policy(dispatch="fail")``, a kernel-set
change (``DISPATCH``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    AMBIGUOUS = "AMBIGUOUS"
    NEW = "NEW"
    MISSING = "MISSING"
    INVALID = "INVALID"

    def __str__(self) -> str:
        return self.value


# Verdict kinds: what was judged.
TIMING = "timing"
LOST_TACTIC = "lost tactic"
NEW_TACTIC = "new tactic"
DISPATCH = "dispatch"
KERNEL_CHANGE = "kernel change"
#: a tuned library choice slower than an explicit tactic of the same run (``gate.picks``)
MISPICK = "autotuner mis-pick"


@dataclass(frozen=True)
class Verdict:
    """One benchmark's (or availability entry's) outcome, with everything needed to explain it."""

    name: str
    status: Status
    kind: str = TIMING
    ratio: float | None = None
    #: each side's headline median, seconds (``gate.record.headline_median``)
    base_median: float | None = None
    new_median: float | None = None
    noise: float | None = None  # relative noise threshold used
    floor: float | None = None
    reason: str = ""
    improved: bool = False
    dispatch_changed: bool = False
    kernels_added: tuple[str, ...] = ()
    kernels_removed: tuple[str, ...] = ()
    base_clock: str | None = None
    new_clock: str | None = None
    base_throttle: str | None = None
    new_throttle: str | None = None
    n_base: int = 0
    n_new: int = 0
    #: no timing judgement was possible (INVALID, too few samples): the gate cannot say PASS
    undecided: bool = False
    #: the rule's interval of the change, percent (lower, upper one-sided bounds)
    interval: tuple[float, float] | None = None
    #: windows judged on each side
    windows_base: int = 0
    windows_new: int = 0
    #: undecided, and the caller may take another window (``judge(budget_left=True)``)
    wants_more: bool = False
    #: undecided with its whole interval beyond the guard band: on fewer independent new windows
    #: than a FAIL needs, or against another unit's baseline whose offset alone keeps it from a
    #: FAIL; not a pass: the run exits 3, and the reason names the evidence a FAIL needs
    remeasure: bool = False

    @property
    def pct(self) -> float | None:
        """Change of the median in percent (+ = slower)."""
        return None if self.ratio is None else (self.ratio - 1.0) * 100.0
