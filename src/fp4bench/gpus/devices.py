"""The GPUs this process may use, named by UUID, found without initializing CUDA.

A controller that starts one worker per GPU must not create a CUDA context itself (the context
would sit on GPU 0 and every worker's ``CUDA_VISIBLE_DEVICES`` must be set before its own CUDA
initializes), so the GPUs are read from NVML (nvidia-ml-py), which talks to the driver only.
``CUDA_VISIBLE_DEVICES`` is honoured as CUDA reads it: a comma list of indices or UUIDs (a UUID
may be given by a unique prefix, as CUDA accepts); indices are NVML's (PCI bus order, which is
CUDA's order under ``CUDA_DEVICE_ORDER=PCI_BUS_ID``; a host of identical GPUs has the same
order either way). A worker is pinned by UUID (``pin_env``), never by index: inside the worker
the GPU is then ``cuda:0``, and no index renumbering can point two workers at one GPU.
``device_uuid`` names torch's CUDA device the same way, for every NVML query about it
(``gpus.nvml`` opens GPUs by UUID only).

``FP4BENCH_FAKE_GPUS`` (test-only) replaces NVML: ``N`` gives N fake GPUs ``GPU-fake-0`` ...,
or a comma list names their UUIDs; ``CUDA_VISIBLE_DEVICES`` then selects among them as above.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from fp4bench.gpus import nvml

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
    twice = sorted({u for u in uuids if uuids.count(u) > 1})
    if twice:  # two workers pinned to one GPU would each run half of the other's share
        raise GpuListError(f"{FAKE_ENV}={spec!r}: names {', '.join(twice)} twice; a GPU is listed once")
    return [(u, "Fake GPU") for u in uuids]


def _nvml() -> list[tuple[str, str]]:
    """(uuid, name) of every GPU the driver sees, in NVML index order; [] without NVML/driver."""
    with nvml.session() as lib:
        return [] if lib is None else nvml.all_gpus(lib)


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


def uuid_of(props: Any) -> str | None:
    """The UUID in torch's device properties as NVML writes it (``GPU-…`` / ``MIG-…``), or None."""
    uuid = getattr(props, "uuid", None)
    if uuid is None:
        return None
    text = str(uuid)
    return text if text.startswith(("GPU-", "MIG-")) else "GPU-" + text


def device_uuid(device: Any) -> str | None:
    """The UUID of torch's CUDA ``device``: from torch's device properties, else the visible GPU
    at torch's index (``CUDA_VISIBLE_DEVICES`` read as CUDA reads it); None for a CPU or a GPU
    neither names. Creates no CUDA context beyond the one torch already has."""
    import torch

    dev = torch.device(device)
    if dev.type != "cuda":
        return None
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    uuid = uuid_of(torch.cuda.get_device_properties(index))
    if uuid is not None:
        return uuid
    try:
        seen = visible_gpus()
    except GpuListError:
        return None
    return seen[index].uuid if index < len(seen) else None


def pin_env(gpu: Gpu) -> dict[str, str]:
    """The environment that pins a new process to ``gpu`` (set before its CUDA initializes)."""
    return {"CUDA_VISIBLE_DEVICES": gpu.uuid}
