"""What an activation-quantizer backend returns and declares (the ``quant`` problem kind).

A quantizer backend takes the bf16 activations of a ``QuantProblem`` and returns a
``QuantOutput``: the bytes the engine hands to its FP4 GEMM. ``CaseRunner`` compares them
bit-exact with ``fp4bench.formats`` (``measure.verify_quant``), so a library quantizer bug (e.g.
FlashInfer #3398: zero block scales for some M) fails its row even though every GEMM row, fed
our own bytes, passes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from fp4bench.backends.base import Backend, Prepared
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem, QuantProblem


@dataclass
class QuantOutput:
    """The library's result as the GEMM receives it.

    data:         uint8 (or float4_e2m1fn_x2) ``[M, K/2]``, two E2M1 codes per byte, low nibble first.
    scales:       the block-scale buffer in ``layout`` (any shape; its bytes are compared).
    global_scale: the fp32 encode scale the GEMM's alpha is built from (``gs``, ``deq = e2m1·sf/gs``).
    """

    data: torch.Tensor
    scales: torch.Tensor
    global_scale: torch.Tensor


class QuantizerBackend(Backend):
    """Base of the activation quantizers: kind ``quant``; expected bytes are the NVFP4
    ``Operands.qa``. ``scale_layout`` is the layout the GEMM fed by this quantizer takes."""

    kinds = frozenset({"quant"})  # one row each: the default tactic of ``Backend.tactics``
    act_format = "nvfp4"
    weight_format = "nvfp4"
    #: "128x4" (swizzled, what every FP4 GEMM backend here takes) or "linear"
    scale_layout: ClassVar[str] = "128x4"

    @staticmethod
    def global_scale(operands: Operands) -> torch.Tensor:
        """The fp32 encode scale ``[1]`` an engine passes (its calibrated ``1 / input_scale``)."""
        return operands.qa.global_scale.to(torch.float32).reshape(1)

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        if not isinstance(problem, QuantProblem):
            raise ValueError(f"{self.name} runs quant problems only, got {problem.kind}")
        x = operands.a.to(device).contiguous()
        return Prepared(problem, x, {"x": x, "gs": self.global_scale(operands).to(device)})
