"""Same-unit baselines: the driver-upgrade sequence compares one physical GPU with itself.

A driver cannot be installed next to another one, so a driver upgrade cannot be judged side
by side (``fp4bench ab``). The sequence is: record a baseline on this runner just before the
upgrade, upgrade, compare. Another unit of the same model shifted one unchanged kernel by
+4.2 % on the H200, more than the run-to-run allowance, so for this purpose a baseline must
come from the very unit being upgraded: ``require_same_unit`` refuses anything else.
"""

from __future__ import annotations

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import BaselineError


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
                            f"{baseline.gpu_uuid} and this run is on {current.gpu_uuid}: record the "
                            "baseline on this unit just before the upgrade")
