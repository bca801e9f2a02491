"""The NVFP4 x NVFP4 operands of a FlashInfer fused-MoE row, with the global scales its call derives
from: one place for the checks and the fc2-input calibration the TRT-LLM-gen and b12x rows share."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fp4bench import formats
from fp4bench.backends.builtin._marshal import fp4_pair
from fp4bench.reference.moe import routed_intermediate_amax
from fp4bench.workload.operands import Operands


@dataclass(frozen=True)
class NvFp4MoE:
    """The quantized operands and their encode-convention global scales, fp32 on the device:
    ``gs_a`` and ``gs_2`` (the fc2 input's, calibrated on this batch's routed intermediate) 0-d,
    ``gs_w1`` / ``gs_w2`` one per expert ``[E]``."""

    qa: formats.NVFP4
    qw: formats.NVFP4
    qw2: formats.NVFP4
    gs_a: torch.Tensor
    gs_w1: torch.Tensor
    gs_w2: torch.Tensor
    gs_2: torch.Tensor


def nvfp4_moe(ops: Operands, num_experts: int, device: torch.device, backend: str) -> NvFp4MoE:
    """``ops`` as NVFP4 MoE operands on ``device``; a clear error naming ``backend`` when they are not."""
    if ops.topk_ids is None or ops.topk_weights is None or ops.qw2 is None:
        raise ValueError(f"{backend}: operands are not MoE operands (no routing or fc2 weights)")
    qa, qw = fp4_pair(ops, formats.NVFP4, backend)
    qw2 = ops.qw2
    if not isinstance(qw2, formats.NVFP4):
        raise TypeError(f"{backend}: needs NVFP4 fc2 weights, got {type(qw2).__name__}")

    def f32(t: torch.Tensor) -> torch.Tensor:
        return t.to(device=device, dtype=torch.float32)

    def per_expert(t: torch.Tensor) -> torch.Tensor:
        return f32(t).expand(num_experts, 1, 1).reshape(num_experts)

    gs_2 = formats.nvfp4_global_scale(float(routed_intermediate_amax(ops)))
    return NvFp4MoE(qa, qw, qw2, f32(qa.global_scale).reshape(()), per_expert(qw.global_scale),
                    per_expert(qw2.global_scale), f32(gs_2).reshape(()))
