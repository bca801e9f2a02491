"""A simulated GPU's device memory for in-process fake workers (``fakes.inproc_worker``).

``GpuMemory(total, peaks)`` is one card: each fake process that prepares a case of the
``sim-bf16-mem`` backend (this module is its ``plugins=`` module) holds its side's peak until it
releases (``drop`` with ``release``) or runs out of memory (the worker then releases everything it
cached); a prepare that does not fit in what is free raises torch's ``OutOfMemoryError`` with
CUDA's wording, as a real allocation would. ``check_extra`` (tactic label -> bytes) is what a
check of that tactic needs at once beyond the held peak while it prepares (a reference, an
autotuner's profiling workspaces), given back when the prepare ends. ``behaviour(side)`` is the
``inproc_worker.Behaviour`` of that side's processes: their memory reports read the card as it
is at that moment, ``peak`` being the most the process held, or asked for and did not get, since
its last check or timing request began (the worker resets torch's peak when a check or a capture
begins; a fake round allocates nothing, so resetting at every timing request reads the same).
``most`` is the most processes that ever held memory at once; ``leak_once(side)``: the first
release of that side's first process keeps its memory until its next release (a caching
allocator that did not give it back).

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
    def __init__(self, total: int, peaks: dict[str, int], others: int = 0, check_extra: dict[str, int] | None = None):
        self.total, self.peaks, self.others = total, dict(peaks), others
        self.check_extra = dict(check_extra or {})
        self.holders: dict[int, int] = {}  # fake process serial -> bytes it holds
        self.peak_of: dict[int, int] = {}  # fake process serial -> its peak since its step began
        self.step_of: dict[int, dict[str, Any]] = {}  # fake process serial -> the request it answers
        self.most = 0
        self.out_of_memory: list[str] = []  # the error of every allocation that did not fit
        self._leak: str | None = None

    def free(self) -> int:
        return self.total - self.others - sum(self.holders.values())

    def allocate(self, process: inproc.FakeProcess) -> None:
        """A prepare: the side's peak held from now on, plus, in a check, the tactic's
        ``check_extra`` for the moment."""
        req = self.step_of.get(process.serial, {})
        extra = self.check_extra.get(req.get("case", {}).get("tactic"), 0) if req.get("op") == "check" else 0
        held, peak = self.holders.get(process.serial, 0), self.peaks[process.side]
        at_once, free = peak + extra, self.free()
        self.peak_of[process.serial] = max(self.peak_of.get(process.serial, 0), at_once)
        if at_once - held > free:
            others = ", ".join(f"Process {100_000 + s} has {b / GIB:.2f} GiB memory in use"
                               for s, b in self.holders.items() if s != process.serial)
            msg = (f"CUDA out of memory. Tried to allocate {(at_once - held) / GIB:.2f} GiB. GPU 0 has a total "
                   f"capacity of {self.total / GIB:.2f} GiB of which {free / GIB:.2f} GiB is free. {others}")
            self.out_of_memory.append(msg)
            self.holders.pop(process.serial, None)  # out of memory, the worker releases what it cached
            raise torch.OutOfMemoryError(msg)
        self.holders[process.serial] = peak
        self.most = max(self.most, len(self.holders))

    def leak_once(self, side: str) -> None:
        self._leak = side

    def on_request(self, process: inproc.FakeProcess, req: dict[str, Any]) -> None:
        """``Behaviour.fault``: a check or timing request starts the process's peak from what it
        holds; a ``drop`` with ``release`` gives its memory back."""
        self.step_of[process.serial] = req
        if req.get("op") in ("check", "time"):
            self.peak_of[process.serial] = self.holders.get(process.serial, 0)
        if req.get("op") == "drop" and req.get("release") and process.serial in self.holders:
            if self._leak is not None and process.side == self._leak:
                self._leak = None  # kept this once
                return None
            del self.holders[process.serial]
        return None

    def report(self, process: inproc.FakeProcess) -> dict[str, int]:
        peak = self.peak_of.get(process.serial, self.peaks[process.side])
        return {"peak": peak, "free": self.free(), "total": self.total}

    def use(self) -> None:
        """This card is the one ``sim-bf16-mem`` prepares on."""
        global _card
        _card = self

    def behaviour(self, side: str, **kw: Any) -> inproc.Behaviour:
        self.use()
        return inproc.Behaviour(memory=self.report, fault=self.on_request, **kw)


class SimBF16Memory(inproc.SimBF16):
    """``sim-bf16`` whose prepare holds the process's side's peak on the card (``GpuMemory``)."""

    name = BACKEND

    def prepare(self, problem, operands, device):
        p = inproc.current()
        if _card is not None and p is not None:
            _card.allocate(p)
        return super().prepare(problem, operands, device)


BACKENDS = [SimBF16Memory()]
