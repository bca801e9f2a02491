"""Pretend to be a given GPU on this CPU machine (for gating and contract tests)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fp4bench.backends.builtin import _gating

if TYPE_CHECKING:  # not imported at run time: the simulated ab workers (fakes/sim/fp4sim_ab.py) run without pytest
    import pytest

GPUS = {
    "H200": _gating.DeviceInfo(9, 0, "NVIDIA H200"),
    "B200": _gating.DeviceInfo(10, 0, "NVIDIA B200"),
    "B300": _gating.DeviceInfo(10, 3, "NVIDIA B300"),
    "GB10": _gating.DeviceInfo(12, 1, "NVIDIA GB10"),
    "RTX PRO 6000": _gating.DeviceInfo(12, 0, "NVIDIA RTX PRO 6000 Blackwell"),
    "Thor": _gating.DeviceInfo(11, 0, "NVIDIA Thor"),
}


def pretend(monkeypatch: pytest.MonkeyPatch, gpu: str) -> _gating.DeviceInfo:
    """Make ``_gating.device_info`` report ``gpu`` for every device (the adapters' only CC source)."""
    info = GPUS[gpu]
    monkeypatch.setattr(_gating, "device_info", lambda device: info)
    return info
