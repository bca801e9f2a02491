"""``torch-reference``: the pure-torch NVFP4 emulation path (decode to fp32, fp32 matmul).

This is what serving stacks fall back to on GPUs without FP4 tensor cores, and the only FP4
row that runs on a CPU-only machine. It shares its arithmetic with ``fp4bench.reference.dense``,
so its correctness check is a consistency check, not an independent one.
"""

from __future__ import annotations

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem
from fp4bench.reference.dense import reference_gemm


class TorchReference(Backend):
    name = "torch-reference"
    kinds = frozenset({"dense", "grouped"})
    act_format = "nvfp4"
    weight_format = "nvfp4"
    api = "fp4bench.reference.dense (decode + fp32 matmul)"
    # the E2M1 decode builds its lookup table from a host list and the grouped path reads the
    # expert offsets on the host: both are illegal inside a CUDA-graph capture
    no_graph_reason = "host-side decode table and offsets (not graph-capturable)"
    # On a GPU its time is that of fp4bench's own decode code launched eagerly, thousands of
    # small kernels a call: launch-bound, 5-15 % apart between processes on an H200 and up to
    # 70 s per benchmark in an A/B run (docs/results-h200.md, run 28), and no kernel of the
    # stack under test. Its arithmetic is still the reference every other row is checked against.
    named_only_on = frozenset({"cuda"})
    named_only_reason = ("on a GPU timed only when named (--fp4-backends / --backends torch-reference): the eager "
                         "emulation is fp4bench's own launch-bound decode code, not a kernel of the stack under test")

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
