"""``torch-bf16``: the BF16 rows users read FP4 results against (``torch.mm``, ``torch._grouped_mm``)."""

from __future__ import annotations

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GroupedProblem, Problem


class TorchBF16(Backend):
    name = "torch-bf16"
    kinds = frozenset({"dense", "grouped"})
    act_format = "bf16"
    weight_format = "bf16"
    api = "torch.mm / torch._grouped_mm"

    def availability(self, device: torch.device) -> Availability:
        if not hasattr(torch, "_grouped_mm"):
            return Availability.no(f"torch {torch.__version__} has no torch._grouped_mm")
        if device.type == "cuda" and torch.cuda.get_device_capability(device) < (8, 0):
            return Availability.no("bf16 tensor cores need SM80+")
        return Availability.yes(torch.__version__)

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is None and isinstance(problem, GroupedProblem) and problem.k % 8:
            return f"torch._grouped_mm needs K % 8 == 0 (16-byte rows), K = {problem.k}"
        return why

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        a, w = operands.a.to(device), operands.w.to(device)
        out = torch.empty((a.shape[0], problem.n), dtype=torch.bfloat16, device=device)
        args = {"a": a, "wt": w.transpose(-2, -1)}
        if isinstance(problem, GroupedProblem):
            args["offs"] = operands.offsets[1:].to(device=device, dtype=torch.int32)
        return Prepared(problem, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        if "offs" in a:
            # no out= variant: the op allocates (a real cost of this API, so it stays timed)
            return torch._grouped_mm(a["a"], a["wt"], offs=a["offs"], out_dtype=torch.bfloat16)
        else:
            torch.mm(a["a"], a["wt"], out=prepared.out)
        return prepared.out


BACKENDS = [TorchBF16()]
