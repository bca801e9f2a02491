"""The GPU-unit policy: how a baseline recorded on another physical GPU of the model is judged,
and when only the very same unit will do.

Another physical GPU of the same model shifts single benchmarks by more than a unit's own
window-to-window spread (two ~9 µs bf16 kernels +3.5 % and +4.2 % across units, none beyond
2.4 % on one unit: docs/results-h200.md); more windows do not average that offset away. So a
baseline from another (or an unrecorded) unit is judged with the unit-to-unit offset
``CROSS_UNIT_SIGMA`` in the error term (``for_changes``): it is less sensitive, and the report
says so. The threshold itself does not move.

A driver cannot be installed next to another one, so a driver upgrade cannot be judged side by
side (``fp4bench ab``). The sequence is: record a baseline on this runner just before the
upgrade, upgrade, compare. For that, a baseline must come from the very unit being upgraded:
``require_same_unit`` refuses anything else.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import BaselineError
from fp4bench.gate.policy import Policy

#: the spread (log time) of one benchmark's offset between two H200 units: docs/measurement.md,
#: "Another GPU unit" derives it from the cross-unit A/A numbers of docs/results-h200.md
CROSS_UNIT_SIGMA = 0.006


def other_unit(base: Fingerprint | None, current: Fingerprint | None) -> bool:
    """A GPU run whose baseline is from another physical GPU, or where either side did not
    record its unit (``gpu_uuid``): unknown counts as another unit."""
    if base is None or current is None or current.compute_capability is None:
        return False  # CPU runs have no unit
    return base.gpu_uuid is None or current.gpu_uuid is None or base.gpu_uuid != current.gpu_uuid


def for_changes(policy: Policy, changes: Sequence[tuple[str, Any, Any]],
                base: Fingerprint | None = None, current: Fingerprint | None = None) -> Policy:
    """The policy to use given what changed between the baseline's machine and this one: when
    the fingerprint shows another (or an unrecorded) unit, ``unit_sigma`` = ``CROSS_UNIT_SIGMA``
    enters the error term (a change needs a larger Δ to be shown)."""
    if policy.unit_sigma == 0 and (any(key == "gpu_uuid" for key, _, _ in changes) or other_unit(base, current)):
        return replace(policy, unit_sigma=CROSS_UNIT_SIGMA,
                       drift_note=f"another or unknown GPU unit: ±{CROSS_UNIT_SIGMA * 100:g}% unit offset "
                                  "in the error term")
    return policy


def require_same_unit(baseline: Fingerprint, current: Fingerprint) -> None:
    """Raise ``BaselineError`` unless both fingerprints name the same GPU UUID."""
    if current.gpu_uuid is None:
        raise BaselineError("same-unit comparison requested, but this run's GPU UUID is unknown "
                            f"({current.model}: no CUDA device UUID)")
    if baseline.gpu_uuid is None:
        raise BaselineError("same-unit comparison requested, but the baseline records no GPU UUID: "
                            "record a fresh baseline on this runner before the upgrade")
    if baseline.gpu_uuid != current.gpu_uuid:
        raise BaselineError(f"same-unit comparison requested, but the baseline was recorded on GPU "
                            f"{baseline.gpu_uuid}, this run is on {current.gpu_uuid}: record it on this unit before the upgrade")
