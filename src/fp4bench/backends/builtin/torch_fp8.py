"""``torch-fp8``: FP8 e4m3 rowwise rows (``torch._scaled_mm``, ``torch._scaled_grouped_mm``).

Operands are quantized once in ``fp4bench.workload.operands`` (rowwise decode scales), so the kernel
and the reference decode the same bytes.
"""

from __future__ import annotations

import torch

from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GroupedProblem, Problem


class TorchFP8(Backend):
    name = "torch-fp8"
    kinds = frozenset({"dense", "grouped"})
    act_format = "fp8"
    weight_format = "fp8"
    api = "torch._scaled_mm / torch._scaled_grouped_mm (rowwise)"

    def availability(self, device: torch.device) -> Availability:
        if device.type != "cuda":
            return Availability.no("no CUDA device (torch FP8 scaled matmul has no CPU rowwise kernel)")
        cc = torch.cuda.get_device_capability(device)
        if cc < (8, 9):
            return Availability.no(f"FP8 needs SM89+; this GPU is SM{cc[0]}{cc[1]}")
        return Availability.yes(torch.__version__)

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is None and (problem.k % 16 or problem.n % 16):
            return f"FP8 _scaled_mm needs K % 16 == 0 and N % 16 == 0 (K={problem.k}, N={problem.n})"
        return why

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        qa, qw = operands.qa, operands.qw
        out = torch.empty((qa.data.shape[0], problem.n), dtype=torch.bfloat16, device=device)
        args = {"a": qa.data.to(device), "wt": qw.data.to(device).transpose(-2, -1)}
        if isinstance(problem, GroupedProblem):
            args["sa"] = qa.scale.to(device).reshape(-1).contiguous()  # [M]
            args["sb"] = qw.scale.to(device).reshape(problem.num_experts, problem.n).contiguous()  # [E, N]
            args["offs"] = operands.offsets[1:].to(device=device, dtype=torch.int32)
        else:
            args["sa"] = qa.scale.to(device).reshape(-1, 1).contiguous()  # [M, 1]
            args["sb"] = qw.scale.to(device).reshape(1, -1).contiguous()  # [1, N]
        return Prepared(problem, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        if "offs" in a:
            # no out= variant: the op allocates (a real cost of this API, so it stays timed)
            return torch._scaled_grouped_mm(a["a"], a["wt"], a["sa"], a["sb"], offs=a["offs"],
                                            out_dtype=torch.bfloat16)
        else:
            torch._scaled_mm(a["a"], a["wt"], a["sa"], a["sb"], out_dtype=torch.bfloat16, out=prepared.out)
        return prepared.out


BACKENDS = [TorchFP8()]
