"""The GPUs this process may use, named by UUID, found without initializing CUDA.

A controller that starts one worker per GPU must not create a CUDA context itself (the context
would sit on GPU 0 and every worker's ``CUDA_VISIBLE_DEVICES`` must be set before its own CUDA
initializes), so the GPUs are read from NVML (nvidia-ml-py), which talks to the driver only.
``CUDA_VISIBLE_DEVICES`` is honoured as CUDA reads it: a comma list of indices or UUIDs (a UUID
may be given by a unique prefix, as CUDA accepts); indices are NVML's (PCI bus order, which is
CUDA's order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a host of identical GPUs has the same
order either way). A worker is pinned by UUID (``pin_env``), never by index: inside the worker
the GPU is then ``cuda:0``, and no index renumbering can point two workers at one GPU.

``FP4BENCH_FAKE_GPUS`` (test-only) replaces NVML: ``N`` gives N fake GPUs ``GPU-fake-0`` ...,
or a comma list names their UUIDs; ``CUDA_VISIBLE_DEVICES`` then selects among them as above.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

FAKE_ENV = "FP4BENCH_FAKE_GPUS"


@dataclass(frozen=True)
class Gpu:
    """One visible GPU: its position among the visible ones, NVML UUID and name."""

    index: int
    uuid: str
    name: str


class GpuListError(RuntimeError):
    """The visible GPUs cannot be determined (a ``CUDA_VISIBLE_DEVICES`` entry matches none)."""


def _fake() -> list[tuple[str, str]] | None:
    spec = os.environ.get(FAKE_ENV)
    if spec is None:
        return None
    spec = spec.strip()
    if spec.isdigit():
        return [(f"GPU-fake-{i}", "Fake GPU") for i in range(int(spec))]
    uuids = [u.strip() for u in spec.split(",") if u.strip()]
    if not all(u.startswith(("GPU-", "MIG-")) for u in uuids):
        raise GpuListError(f"{FAKE_ENV}={spec!r}: expected a count or comma-separated GPU-... UUIDs")
    return [(u, "Fake GPU") for u in uuids]


def _nvml() -> list[tuple[str, str]]:
    """(uuid, name) of every GPU the driver sees, in NVML index order; [] without NVML/driver."""
    try:
        import pynvml
    except ImportError:
        return []
    try:
        pynvml.nvmlInit()
    except Exception:
        return []
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid, name = pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h)
            out.append((uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                        name.decode() if isinstance(name, bytes) else str(name)))
        return out
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _select(all_gpus: list[tuple[str, str]], visible: str | None) -> list[tuple[str, str]]:
    if visible is None:
        return list(all_gpus)
    chosen: list[tuple[str, str]] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            break  # CUDA stops at an empty entry
        if entry.lstrip("-").isdigit():
            i = int(entry)
            if i < 0 or i >= len(all_gpus):
                break  # CUDA ignores this entry and every one after it
            hit = [all_gpus[i]]
        else:
            hit = [g for g in all_gpus if g[0] == entry or g[0].startswith(entry)]
            if len(hit) != 1:
                raise GpuListError(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(hit)} GPUs "
                                   f"(known: {', '.join(g[0] for g in all_gpus) or 'none'})")
        if hit[0] in chosen:
            raise GpuListError(f"CUDA_VISIBLE_DEVICES names GPU {hit[0][0]} twice")
        chosen.append(hit[0])
    return chosen


def visible_gpus() -> list[Gpu]:
    """The GPUs this process may use, in CUDA's order, without creating a CUDA context."""
    fake = _fake()
    found = fake if fake is not None else _nvml()
    return [Gpu(i, u, n) for i, (u, n) in enumerate(_select(found, os.environ.get("CUDA_VISIBLE_DEVICES")))]


def pin_env(gpu: Gpu) -> dict[str, str]:
    """The environment that pins a new process to ``gpu`` (set before its CUDA initializes)."""
    return {"CUDA_VISIBLE_DEVICES": gpu.uuid}
