"""``torch-reference``: the pure-torch NVFP4 emulation path (decode to fp32, fp32 matmul).

This is what serving stacks fall back to on GPUs without FP4 tensor cores, and the only FP4
row that runs on a CPU-only machine. It shares its arithmetic with ``fp4bench.reference``,
so its correctness check is a consistency check, not an independent one.
"""

from __future__ import annotations

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.operands import Operands
from fp4bench.problems import Problem
from fp4bench.reference import reference_gemm


class TorchReference(Backend):
    name = "torch-reference"
    kinds = frozenset({"dense", "grouped"})
    act_format = "nvfp4"
    weight_format = "nvfp4"
    api = "fp4bench.reference (decode + fp32 matmul)"
    # the E2M1 decode builds its lookup table from a host list and the grouped path reads the
    # expert offsets on the host: both are illegal inside a CUDA-graph capture
    no_graph_reason = "host-side decode table and offsets (not graph-capturable)"

    def availability(self, device: torch.device) -> Availability:
        return Availability.yes(torch.__version__, f"pure torch on {device.type}")

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        rows = operands.a.shape[0]
        out = torch.empty((rows, problem.n), dtype=torch.bfloat16, device=device)
        return Prepared(problem, out, {"ops": operands})

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        prepared.out.copy_(reference_gemm(prepared.args["ops"]))
        return prepared.out


BACKENDS = [TorchReference()]
