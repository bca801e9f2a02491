"""A simulated GPU's device memory for in-process fake workers (``fakes.inproc_worker``).

``GpuMemory(total, peaks)`` is one card: each fake process that prepares a case of the
``sim-bf16-mem`` backend (this module is its ``plugins=`` module) holds its side's peak until it
releases (``drop`` with ``release``); a prepare that does not fit in what is free raises torch's
``OutOfMemoryError`` with CUDA's wording, as a real allocation would. ``behaviour(side)`` is the
``inproc_worker.Behaviour`` of that side's processes: their memory reports (``peak``, ``free``,
``total``) read the card as it is at that moment. ``most`` is the most processes that ever held
memory at once; ``leak_once(side)``: the first release of that side's first process keeps its
memory until its next release (a caching allocator that did not give it back).

    gpu = GpuMemory(80 * GB, {"A": 48 * GIB, "B": 48 * GIB})
    with inproc.workers({"A": gpu.behaviour("A"), "B": gpu.behaviour("B")}):
        run = AbRunner(a, b, AbConfig(..., plugins=(inproc.PLUGIN, "fakes.gpu_memory"))).run()
"""

from __future__ import annotations

from typing import Any

import torch

from fakes import inproc_worker as inproc

BACKEND = "sim-bf16-mem"
GIB = 1 << 30
GB = 10 ** 9

_card: GpuMemory | None = None  # the card of the ``behaviour`` last made


class GpuMemory:
    def __init__(self, total: int, peaks: dict[str, int], others: int = 0):
        self.total, self.peaks, self.others = total, dict(peaks), others
        self.holders: dict[int, int] = {}  # fake process serial -> bytes it holds
        self.most = 0
        self.out_of_memory: list[str] = []  # the error of every allocation that did not fit
        self._leak: str | None = None

    def free(self) -> int:
        return self.total - self.others - sum(self.holders.values())

    def allocate(self, process: inproc.FakeProcess) -> None:
        if process.serial in self.holders:
            return
        need, free = self.peaks[process.side], self.free()
        if need > free:
            held = ", ".join(f"Process {100_000 + s} has {b / GIB:.2f} GiB memory in use" for s, b in self.holders.items())
            msg = (f"CUDA out of memory. Tried to allocate {need / GIB:.2f} GiB. GPU 0 has a total capacity of "
                   f"{self.total / GIB:.2f} GiB of which {free / GIB:.2f} GiB is free. {held}")
            self.out_of_memory.append(msg)
            raise torch.OutOfMemoryError(msg)
        self.holders[process.serial] = need
        self.most = max(self.most, len(self.holders))

    def leak_once(self, side: str) -> None:
        self._leak = side

    def _release(self, process: inproc.FakeProcess, req: dict[str, Any]) -> None:
        """``Behaviour.fault``: a ``drop`` with ``release`` gives the process's memory back."""
        if req.get("op") == "drop" and req.get("release") and process.serial in self.holders:
            if self._leak is not None and process.side == self._leak:
                self._leak = None  # kept this once
                return None
            del self.holders[process.serial]
        return None

    def report(self, process: inproc.FakeProcess) -> dict[str, int]:
        return {"peak": self.peaks[process.side], "free": self.free(), "total": self.total}

    def use(self) -> None:
        """This card is the one ``sim-bf16-mem`` prepares on."""
        global _card
        _card = self

    def behaviour(self, side: str, **kw: Any) -> inproc.Behaviour:
        self.use()
        return inproc.Behaviour(memory=self.report, fault=self._release, **kw)


class SimBF16Memory(inproc.SimBF16):
    """``sim-bf16`` whose prepare holds the process's side's peak on the card (``GpuMemory``)."""

    name = BACKEND

    def prepare(self, problem, operands, device):
        p = inproc.current()
        if _card is not None and p is not None:
            _card.allocate(p)
        return super().prepare(problem, operands, device)


BACKENDS = [SimBF16Memory()]
