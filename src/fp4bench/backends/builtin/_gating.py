"""Shared gating helpers for the Blackwell FP4 backends: device, compute capability, versions,
and a crash-safe import probe.

Why a module of its own: several FP4 entry points poison the CUDA context or trap instead of
raising on the wrong GPU, so every adapter must answer "can this run
here?" from facts that need no library call: the device's compute capability, installed
distribution versions (``importlib.metadata``, no import), and, for libraries whose import
itself can crash the process (sgl_kernel built against another torch ABI), an import attempted
in a child process first.

Tests replace ``device_info`` (``monkeypatch.setattr(_gating, "device_info", ...)``) to pretend
to be a given GPU; the adapters therefore always call it through this module.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import subprocess
import sys
from collections.abc import Callable, Collection
from dataclasses import dataclass

import torch

NO_CUDA = "no CUDA device"


@dataclass(frozen=True)
class DeviceInfo:
    """Compute capability and marketing name of one CUDA device."""

    major: int
    minor: int
    name: str

    @property
    def sm(self) -> int:
        """Capability as one number, as the libraries spell it: (10, 0) -> 100, (12, 1) -> 121."""
        return self.major * 10 + self.minor

    def describe(self) -> str:
        return f"SM{self.sm} ({self.name})"


def device_info(device: torch.device | str) -> DeviceInfo | None:
    """The device's capability, or None when ``device`` is not a usable CUDA device.

    Only reads device properties: never launches a kernel, never touches an FP4 op.
    """
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability(device)
    return DeviceInfo(int(major), int(minor), torch.cuda.get_device_name(device))


def format_sms(sms: Collection[int]) -> str:
    """``[100, 103, 120]`` -> ``"SM100/103/120"`` (the reason strings' spelling)."""
    return "SM" + "/".join(str(s) for s in sorted(sms))


def arch_reason(info: DeviceInfo | None, supported: Collection[int], family: str = "Blackwell") -> str | None:
    """None when ``info`` is a CUDA device whose SM is in ``supported``; else a one-line reason.

    ``"no CUDA device"`` for CPU; ``"needs SM100/103/120 (Blackwell); this GPU is SM90 (NVIDIA H200)"``
    for a GPU of another architecture.
    """
    if info is None:
        return NO_CUDA
    if info.sm not in supported:
        return f"needs {format_sms(supported)} ({family}); this GPU is {info.describe()}"
    return None


def dist_version(*names: str) -> str | None:
    """Installed version of the first distribution found among ``names`` (no import), or None."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def load_failure(dist: str, load: Callable[[], object], module: str = "flashinfer") -> tuple[str, str | None] | None:
    """None when ``load()`` (importing ``module`` of distribution ``dist``) works; else (why, installed
    version): the distribution is not installed, or its import raised (a skip reason, never a crash)."""
    if dist_version(dist) is None:
        return f"{dist} is not installed", None
    try:
        load()
    except Exception as exc:  # any import-time failure is a skip reason, not a crash
        return f"import {module} failed: {type(exc).__name__}: {exc}".splitlines()[0], dist_version(dist)
    return None


def module_installed(module: str) -> bool:
    """Whether ``module`` can be found, without importing it (a parent package is imported)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class ImportProbe:
    """Outcome of importing a module in a child process: ``ok``, else a one-line ``error``."""

    ok: bool
    error: str = ""


def _last_line(text: str, limit: int = 240) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


@functools.lru_cache(maxsize=None)
def probe_import(module: str, timeout_s: float = 180.0) -> ImportProbe:
    """Import ``module`` in a fresh interpreter first: a bad native extension may abort the
    process (missing symbols, a missing ``libcuda.so.1``, a device trap) instead of raising.

    Cached per process: the answer does not change while we run, and the child costs seconds.
    """
    # Drop the working directory from sys.path: a same-named local file must not be probed instead.
    code = f"import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; import {module}"
    cmd = [sys.executable, "-c", code]
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ImportProbe(False, f"import {module} timed out after {timeout_s:.0f} s")
    except OSError as exc:
        return ImportProbe(False, f"could not start a child interpreter to probe import {module}: {exc}")
    if res.returncode == 0:
        return ImportProbe(True)
    if res.returncode < 0:
        return ImportProbe(False, f"import {module} crashed the interpreter (signal {-res.returncode})")
    return ImportProbe(False, _last_line(res.stderr) or f"import {module} exited with status {res.returncode}")
