"""The GPU-unit policy: how a baseline recorded on another physical GPU of the model is judged,
and when only the very same unit will do.

Another physical GPU of the same model shifts single benchmarks by more than a unit's own
window-to-window spread (two ~9 µs bf16 kernels +3.5 % and +4.2 % across units, none beyond
2.4 % on one unit: docs/results-h200.md); more windows do not average that offset away. So a
baseline from another (or an unrecorded) unit is judged with the unit-to-unit offset
offset of its benchmark class in the error term (``for_changes``; ``gate.calibration``: measured
between units where two or more have files, else the documented constants): it is less
sensitive, the report says so, and an undecided benchmark says the smallest change such a
comparison can show. The threshold itself does not move.

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

def other_unit(base: Fingerprint | None, current: Fingerprint | None) -> bool:
    """A GPU run whose baseline is from another physical GPU, or where either side did not
    record its unit (``gpu_uuid``): unknown counts as another unit."""
    if base is None or current is None or current.compute_capability is None:
        return False  # CPU runs have no unit
    return base.gpu_uuid is None or current.gpu_uuid is None or base.gpu_uuid != current.gpu_uuid


def for_changes(policy: Policy, changes: Sequence[tuple[str, Any, Any]],
                base: Fingerprint | None = None, current: Fingerprint | None = None) -> Policy:
    """The policy to use given what changed between the baseline's machine and this one: when
    the fingerprint shows another (or an unrecorded) unit, the unit offset of each benchmark's
    class (``policy.noise``) enters the error term (a change needs a larger Δ to be shown)."""
    if not policy.other_unit and (any(key == "gpu_uuid" for key, _, _ in changes) or other_unit(base, current)):
        offsets = ", ".join(f"{c} ±{t.unit_sigma * 100:.2g}%" for c, t in policy.noise.classes)
        return replace(policy, other_unit=True,
                       drift_note=f"another or unknown GPU unit: unit offset in the error term ({offsets})")
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
