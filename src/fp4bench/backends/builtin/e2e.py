"""End-to-end rows: bf16 activations -> the library's quantizer -> the library's GEMM, one call.

What an engine pays per FP4 linear layer of a decode step is the activation quantization plus
the GEMM; the GEMM rows alone are fed our bytes. ``e2e-<gemm>`` runs the quantizer the serving
stack pairs with that GEMM and hands its bytes (payload and 128x4 scales, as views in the
dtypes and shapes the GEMM row prepares) to the GEMM, timed as one call with the GEMM's default
tactic. ``CaseRunner`` checks the quantizer's bytes bit-exact against ``fp4bench.formats`` first
(``quantized_activations``: a quantizer bug is named as such, e.g. "all-zero scales"), then the
output against the reference on those bytes (equal to ours once the first check passed).

Pairs (``PAIRS``): ``flashinfer-cutlass`` with ``flashinfer.fp4_quantize`` (vLLM's and sglang's
FlashInfer CUTLASS FP4 path), ``sgl-kernel`` with ``sgl_kernel.scaled_fp4_quant`` (sglang's
cutlass path). The cuBLASLt rows have none: torch has no NVFP4 quantize op (torch 2.13). The
fused MoE quantizes its bf16 input itself, so its row is end-to-end already; the grouped
``sgl-kernel-group`` is fed by ``scaled_fp4_experts_quant`` (per-expert layout), not covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from fp4bench.backends.builtin._quant import QuantizerBackend, QuantOutput
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic, availability_of
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, Problem, QuantProblem

#: where a GEMM row keeps its activation payload and scales in ``Prepared.args`` (paths of keys)
ActivationSlots = tuple[tuple[Any, ...], tuple[Any, ...]]


@dataclass(frozen=True)
class Pair:
    gemm: str
    quantizer: str
    slots: ActivationSlots


PAIRS = (
    Pair("flashinfer-cutlass", "flashinfer-fp4-quantize", (("inputs", 0), ("inputs", 2))),
    Pair("sgl-kernel", "sgl-kernel-fp4-quant", (("a",), ("scale_a",))),
)


def _put(args: dict, path: tuple[Any, ...], new: torch.Tensor) -> None:
    """Replace the tensor at ``path`` by ``new`` viewed in its dtype and shape (no copy)."""
    holder = args
    for key in path[:-1]:
        holder = holder[key]
    old = holder[path[-1]]
    holder[path[-1]] = new.view(old.dtype).reshape(old.shape)


class EndToEnd(Backend):
    """``e2e-<gemm>``: the library's quantizer, then the library's GEMM (default tactic)."""

    kinds = frozenset({"dense"})
    act_format = "nvfp4"
    weight_format = "nvfp4"

    def __init__(self, pair: Pair, gemm: Backend | None = None, quantizer: QuantizerBackend | None = None) -> None:
        self.pair = pair
        self.name = f"e2e-{pair.gemm}"
        self._gemm, self._quant = gemm, quantizer

    def _parts(self) -> tuple[Backend, QuantizerBackend]:
        from fp4bench.backends.registry import get_backend

        if self._gemm is None:
            self._gemm = get_backend(self.pair.gemm)
        if self._quant is None:
            q = get_backend(self.pair.quantizer)
            assert isinstance(q, QuantizerBackend)
            self._quant = q
        return self._gemm, self._quant

    @property
    def api(self) -> str:  # type: ignore[override]
        return f"{self.pair.quantizer} then {self.pair.gemm}, one call"

    @property
    def alignment(self):  # type: ignore[override]
        return self._parts()[0].alignment

    @property
    def scale_layout(self) -> str:
        return self._parts()[1].scale_layout

    def availability(self, device: torch.device) -> Availability:
        gemm, quant = self._parts()
        for part in (gemm, quant):
            a = availability_of(part, device)
            if not a.ok:
                return Availability.no(f"{part.name}: {a.reason}", a.version)
        return Availability.yes(availability_of(gemm, device).version)

    def unsupported_reason(self, problem: Problem) -> str | None:
        return self._parts()[0].unsupported_reason(problem)

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        """The GEMM's default: an engine calls it without a tactic."""
        listed = [t for t in self._parts()[0].tactics(problem, device) if t.default]
        return listed[:1] or [DEFAULT_TACTIC]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        assert isinstance(problem, GemmProblem)
        gemm, quant = self._parts()
        gprep = gemm.prepare(problem, operands, device)
        qops = Operands(QuantProblem(problem.m, problem.k, problem.origin), operands.act_format,
                        operands.weight_format, operands.a, operands.a.new_empty((0, problem.k)),
                        qa=operands.qa, seed=operands.seed)
        qprep = quant.prepare(qops.problem, qops, device)
        return Prepared(problem, gprep.out, {"gemm": gprep, "quant": qprep})

    def quantized_activations(self, prepared: Prepared) -> QuantOutput:
        """One quantizer call on the case's activations (what ``CaseRunner`` checks bit-exact)."""
        return self._parts()[1].run(prepared.args["quant"], DEFAULT_TACTIC)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        gemm, quant = self._parts()
        q = quant.run(prepared.args["quant"], DEFAULT_TACTIC)
        gprep = prepared.args["gemm"]
        (data_at, scales_at) = self.pair.slots
        _put(gprep.args, data_at, q.data)
        _put(gprep.args, scales_at, q.scales)
        return gemm.run(gprep, tactic)


BACKENDS = [EndToEnd(p) for p in PAIRS]
