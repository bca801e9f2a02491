"""What may be compared with what: the GPU model, how the times were taken, and test-only runs.

Timings are comparable only on the same GPU model (``check_compatible``; what else changed in the
fingerprint is returned for the report and the unit policy, ``gate.unit``). Two runs that took
their times another way (``MEASUREMENT_KEYS`` of the ``sweep``: L2 mode, timer, copy rule)
measured different things and are never compared (``check_same_measurement``); a run that
measured test-only backends (``fp4bench.testing``) tests the gate and is never a reference.
A comparable baseline can still be less sensitive in how it was timed (``measurement_notes``).
"""

from __future__ import annotations

from typing import Any

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import BaselineError

#: ``sweep`` keys that say how the time was taken. Runs that differ in one measured different
#: things (a hot-L2 time is not a slower or faster cold-L2 time; a case averaged over 4
#: placements is not one placement), so they are never compared. ``case.measurement_of``
#: writes them.
MEASUREMENT_KEYS = ("l2", "timer", "min_copies", "copy_memory")
#: the note for a cold-L2 baseline that records no ``min_copies``: its cases of a footprint of 3 L2s
#: or more were timed on one copy, one placement each
ONE_PLACEMENT = "baseline recorded with one placement per large case: re-record for full sensitivity"
#: ``sweep`` key naming the test-only backends a run measured (``{name: description}``): faults
#: or slowdown wrappers from ``fp4bench.testing``. Such a run tests the gate; it is never a baseline.
TEST_ONLY = "test_only"


class IncompatibleBaseline(BaselineError):
    """Baseline and current run are from different GPU models: timings are not comparable."""


def test_only_backends(sweep: dict[str, Any]) -> dict[str, Any]:
    """The run's test-only backends (``{}`` for a real run)."""
    v = sweep.get(TEST_ONLY) or {}
    return dict(v) if isinstance(v, dict) else {str(v): ""}


def describe_test_only(found: dict[str, Any]) -> str:
    """``name: description`` of each test-only backend, for messages."""
    return ", ".join(f"{k}: {v}" if v else k for k, v in sorted(found.items()))


def check_same_measurement(base_sweep: dict[str, Any], cur_sweep: dict[str, Any]) -> None:
    """Raise ``IncompatibleBaseline`` when the baseline was timed another way than this run, or
    is itself a run of test-only backends (a test of the gate, never a reference).

    A side that did not record a key (files written before it was recorded) is not checked."""
    found = test_only_backends(base_sweep)
    if found:
        raise IncompatibleBaseline(f"the baseline ran test-only backends ({describe_test_only(found)}); "
                                   "it is not a reference")
    for key in MEASUREMENT_KEYS:
        old, new = base_sweep.get(key), cur_sweep.get(key)
        if old is not None and new is not None and old != new:
            raise IncompatibleBaseline(f"the baseline was timed with {key}={old!r}, this run with {key}={new!r}: "
                                       "not comparable (re-run with the baseline's setting, or make a new baseline)")


def measurement_notes(base_sweep: dict[str, Any], cur_sweep: dict[str, Any]) -> list[str]:
    """What makes a comparable baseline less sensitive in how it was timed (one line each): a
    cold-L2 baseline without ``min_copies`` timed its large cases on one placement while this run
    averages several, so its windows carry a placement offset more windows do not remove."""
    old_cold = base_sweep.get("l2", "cold") == "cold"
    if old_cold and "min_copies" not in base_sweep and int(cur_sweep.get("min_copies", 1)) > 1:
        return [ONE_PLACEMENT]
    return []


def check_compatible(baseline_fp: Fingerprint, current_fp: Fingerprint) -> list[tuple[str, Any, Any]]:
    """Raise ``IncompatibleBaseline`` on a different GPU model; else what changed (key, old, new)."""
    if not baseline_fp.same_model(current_fp):
        raise IncompatibleBaseline(
            f"baseline is for {baseline_fp.model} but this run is on {current_fp.model}; "
            "timings are only comparable on the same GPU model"
        )
    return baseline_fp.differences(current_fp)
