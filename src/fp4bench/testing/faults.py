"""Fault-injection backends that imitate known upstream failure patterns, to prove the checks.

``fault-zero-band`` returns an all-zero output for 32 <= M <= 1536 and correct results
elsewhere: the M-dependent zeros of FlashInfer #3398 (SM120, cutlass/b12x). The verify layer
must name exactly those cases ``all-zero output``.
``fault-unwritten`` leaves the last 128-row tile of the output unwritten (the PDL race of
FlashInfer #2708/#2780); ``fault-nan`` writes one NaN; ``fault-bitflip`` perturbs one output
element by 3 % (a plain mismatch). ``fault-oom`` raises torch's ``OutOfMemoryError`` in prepare,
with CUDA's wording: a case that does not fit in device memory, which every front end reports as
out of memory (a resource failure), never as a wrong output.

Faults of later launches, each modelled on an upstream report and named by the checks of
``measure.replays``:
``fault-late`` is right for the first two launches of its prepared operands and writes zeros from
the third on (an autotuned tactic that passes warm-up and then corrupts output under CUDA-graph
replay: FlashInfer #4841, sglang #34629): ``replay mismatch``. ``fault-drift`` is exact for two
launches and then drifts by 0.5 % a launch: ``replay mismatch``. ``fault-copy`` is right on the
first operand set it sees for a problem and wrong (x1.5) on every rotating copy, the same bytes at
another address: ``copy mismatch`` (with ``--fp4-min-copies 2`` or more on a CPU). ``fault-padding``
builds the 128x4 swizzled activation scales as a GEMM would and adds the value of the first
padding entry to every output (uninitialized or stale scale padding read by the GEMM: vLLM #45741,
FlashInfer #2861): ``reads scale padding`` wherever the scales have padding (M not a multiple
of 128, or K/16 not of 4).

Process-level faults, for ``--fp4-isolate`` (cases in worker processes); in-process they take
the whole run down, which is what they imitate:
``fault-abort`` calls ``os.abort()`` (a library assert / fatal error); ``fault-hang`` never
returns (a deadlocked kernel or a spin on a flag); ``fault-sticky`` poisons the CUDA context
with a device-side assert (an out-of-range gather index trips the assert inside torch's index
kernel: a trap, sticky like an illegal address, until the process exits). On a CPU-only
machine ``fault-sticky`` raises the error text of that assert instead, so the harness path
(detect, report, fresh worker) is testable without a GPU.

Use: ``pytest bench --fp4-plugin fp4bench.testing.faults --fp4-backends fault-zero-band``.
"""

from __future__ import annotations

import os
import weakref

import torch

from fp4bench import clock, formats
from fp4bench.backends.base import Prepared, Tactic
from fp4bench.backends.builtin.torch_reference import TorchReference
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem

ZERO_BAND = (32, 1536)


class _Fault(TorchReference):
    kinds = frozenset({"dense"})
    api = "test-only fault injection over fp4bench.reference.dense"
    test_only = True

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        super().run(prepared, tactic)
        self.corrupt(prepared.out, prepared.problem.m)
        return prepared.out

    def corrupt(self, out: torch.Tensor, m: int) -> None:
        raise NotImplementedError


class ZeroBand(_Fault):
    name = "fault-zero-band"

    def corrupt(self, out: torch.Tensor, m: int) -> None:
        if ZERO_BAND[0] <= m <= ZERO_BAND[1]:
            out.zero_()


class Unwritten(_Fault):
    name = "fault-unwritten"

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        out = prepared.out
        full = prepared.args["ops"]
        from fp4bench.reference.dense import reference_gemm

        keep = max(0, (out.shape[0] - 1) // 128 * 128)  # the last row tile is never written
        out[:keep].copy_(reference_gemm(full)[:keep])
        return out


class NaNOutput(_Fault):
    name = "fault-nan"

    def corrupt(self, out: torch.Tensor, m: int) -> None:
        out.view(-1)[out.numel() // 2] = float("nan")


class BitFlip(_Fault):
    name = "fault-bitflip"

    def corrupt(self, out: torch.Tensor, m: int) -> None:
        i = out.numel() // 3
        v = out.view(-1)[i]
        out.view(-1)[i] = v * 1.03 if float(v) != 0 else 1.0


class _Counted(_Fault):
    """A fault that counts the launches on each prepared operand set (a fresh prepare, such as
    a rotating copy, starts at 0)."""

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        prep = super().prepare(problem, operands, device)
        prep.args["launches"] = [0]
        return prep

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        count = prepared.args["launches"]
        count[0] += 1
        TorchReference.run(self, prepared, tactic)
        self.later(prepared.out, count[0])
        return prepared.out

    def later(self, out: torch.Tensor, launch: int) -> None:
        raise NotImplementedError


class Late(_Counted):
    name = "fault-late"

    def later(self, out: torch.Tensor, launch: int) -> None:
        if launch > 2:
            out.zero_()


#: the drift of ``fault-drift`` per launch after its second
DRIFT = 0.005


class Drift(_Counted):
    name = "fault-drift"

    def later(self, out: torch.Tensor, launch: int) -> None:
        if launch > 2:
            out.mul_(1 + DRIFT * (launch - 2))


class CopyFault(_Fault):
    """Right on the activation tensor it first ran on for a problem (while that tensor lives),
    wrong on any other: a rotating copy holds the same bytes elsewhere."""

    name = "fault-copy"

    def __init__(self) -> None:
        self._first: dict[str, weakref.ref] = {}

    def corrupt_for(self, prepared: Prepared) -> bool:
        data = prepared.args["ops"].qa.data
        first = self._first.get(prepared.problem.id)
        if first is None or first() is None:
            self._first[prepared.problem.id] = weakref.ref(data)
            return False
        return first() is not data

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        TorchReference.run(self, prepared, tactic)
        if self.corrupt_for(prepared):
            prepared.out.mul_(1.5)
        return prepared.out


class ReadsPadding(_Fault):
    """Adds the value (E4M3) of the first padding entry of its 128x4 activation scales."""

    name = "fault-padding"

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        prep = super().prepare(problem, operands, device)
        scales = operands.qa.scales
        rows, cols = scales.shape[-2:]
        sf = formats.swizzle_128x4(scales)
        data = torch.zeros(sf.numel(), dtype=torch.bool)
        r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
        data[formats.sf_offset_128x4(r.flatten(), c.flatten(), cols)] = True
        padding = (~data).nonzero().flatten()
        prep.args["sf"] = sf
        prep.args["padding_at"] = int(padding[0]) if padding.numel() else None
        return prep

    def corrupt(self, out: torch.Tensor, m: int) -> None:
        raise AssertionError("run reads the padding itself")

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        TorchReference.run(self, prepared, tactic)
        at = prepared.args["padding_at"]
        if at is not None:
            flat = prepared.args["sf"].reshape(-1).view(torch.uint8)
            prepared.out.add_(flat[at:at + 1].view(torch.float8_e4m3fn).float().to(prepared.out.dtype))
        return prepared.out


class Abort(_Fault):
    name = "fault-abort"

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        os.abort()


class Hang(_Fault):
    name = "fault-hang"

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        while True:
            clock.sleep(3600)


SIMULATED_STICKY = "CUDA error: device-side assert triggered (simulated by fault-sticky on a CPU-only machine)"
#: the lines torch appends to a CUDA error's message, so the simulated error reads like the real one
TORCH_CUDA_ERROR_HINT = ("CUDA kernel errors might be asynchronously reported at some other API call, so the "
                         "stacktrace below might be incorrect.\nFor debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
                         "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")


class Sticky(_Fault):
    name = "fault-sticky"

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        out = prepared.out
        if out.is_cuda:
            src = torch.zeros(4, device=out.device)
            bad = torch.full((1,), 1 << 20, dtype=torch.long, device=out.device)
            src[bad] += 1  # index out of range: device-side assert, the context is poisoned
            torch.cuda.synchronize(out.device)
            return out
        raise RuntimeError(f"{SIMULATED_STICKY}\n{TORCH_CUDA_ERROR_HINT}")


class OutOfMemory(_Fault):
    name = "fault-oom"
    #: what torch's caching allocator raises (the figures of the H100 80GB case that motivated it)
    MESSAGE = ("CUDA out of memory. Tried to allocate 24.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
               "3.88 GiB is free. Process 1042 has 51.91 GiB memory in use. (simulated by fault-oom)")

    def prepare(self, problem, operands, device) -> Prepared:
        raise torch.OutOfMemoryError(self.MESSAGE)


BACKENDS = [ZeroBand(), Unwritten(), NaNOutput(), BitFlip(), Late(), Drift(), CopyFault(), ReadsPadding(), Abort(),
            Hang(), Sticky(), OutOfMemory()]
