"""The one place a ``CaseRunner`` is built: in the pytest session and in a worker process.

``open_device`` loads the backend modules, picks the device and makes it current, and takes the
fingerprint; ``case_runner`` builds the runner the settings describe (with the GPU's roofline
peaks); ``isolated_runner`` is the same runner in a worker process (``run.worker``), which builds
it with this factory from the settings' ``init`` message.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from fp4bench.backends import registry
from fp4bench.env import Fingerprint, collect_fingerprint, parse_device
from fp4bench.measure import peaks
from fp4bench.run.case import CaseRunner
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.worker.pool import IsolatedRunner, WorkerSpec


def open_device(name: str | None, plugins: Sequence[str] = (), option: str | None = None
                ) -> tuple[torch.device, Fingerprint]:
    """Load ``plugins`` into the backend registry, then the device ``name`` (None: ``cuda:0``
    where CUDA is available, else ``cpu``), made the current CUDA device, and its fingerprint.
    With ``option`` a bad name is a ``ValueError`` naming that option (``env.parse_device``);
    without it, torch's own error."""
    for mod in plugins:
        registry.load_plugin(mod)
    name = name or ("cuda:0" if torch.cuda.is_available() else "cpu")
    device = parse_device(name, option) if option else torch.device(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device, collect_fingerprint(device)


def case_runner(settings: RunnerSettings, device: torch.device, fingerprint: Fingerprint) -> CaseRunner:
    """The runner ``settings`` describe on ``device`` (opened by ``open_device``)."""
    gpu_peaks = peaks.peak_for(fingerprint.gpu_name) if device.type == "cuda" else None
    return CaseRunner(device, settings.timing, cold_l2=settings.cold_l2, seed=settings.seed,
                      min_copies=settings.min_copies, peaks=gpu_peaks, replays=settings.replays)


def isolated_runner(settings: RunnerSettings, python: str, timeout_s: float) -> IsolatedRunner:
    """``case_runner(settings, ...)`` in a worker process run by ``python``; a case that takes
    longer than ``timeout_s`` is a hang (the worker's start may take up to 300 s: imports, CUDA)."""
    if not timeout_s > 0:
        raise ValueError(f"the case timeout must be > 0 seconds, got {timeout_s}")
    return IsolatedRunner(WorkerSpec(python=python, init=settings.to_init(), timeout_s=timeout_s,
                                     start_timeout_s=max(timeout_s, 300.0)))


def runner_of(init: dict[str, Any]) -> tuple[torch.device, Fingerprint, CaseRunner]:
    """A worker's device, fingerprint and runner from its ``init`` message."""
    settings = RunnerSettings.from_init(init)
    device, fingerprint = open_device(settings.device, settings.plugins)
    return device, fingerprint, case_runner(settings, device, fingerprint)
