"""The FlashInfer calls of the CUTLASS fused-MoE adapters (``flashinfer_moe.py``,
``flashinfer_moe_tuned.py``), in one replaceable place: CPU contract tests hand the adapters a fake.

Imports are lazy (availability / prepare only). Also the per-tactic failure texts of the fused-MoE
GEMM launchers, and the gate/up row order FlashInfer's fused MoEs read.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from fp4bench.backends.builtin import _gating

MXFP4_GROUP = 32
#: Errors the fused-MoE GEMM launchers raise for one tactic (config) that cannot run this
#: problem: a per-tactic outcome. TensorRT-LLM checks in FlashInfer 0.7.2.post1
#: csrc/nv_internal/tensorrt_llm/kernels/cutlass_kernels/moe_gemm/launchers/
#: moe_gemm_tma_ws_launcher.inl:755-773, moe_gemm_tma_ws_mixed_input_launcher.inl:393-415 and
#: moe_gemm/moe_gemm_template_dispatch.h:205-215. Anything else -- notably TVM-FFI's
#: ``Check failed: ...`` argument checks of flashinfer_cutlass_fused_moe_binding.cu, which
#: also arrive as RuntimeError -- is not a tactic property and propagates as an error.
TACTIC_FAILURES = (
    "Grouped GEMM kernel will fail for params",
    "Failed to initialize cutlass TMA WS grouped gemm",
    "Failed to run cutlass TMA WS grouped gemm",
    "mixed dtype WS grouped cutlass kernel will fail for params",
    "Failed to initialize cutlass mixed dtype WS grouped gemm",
    "Failed to run cutlass mixed dtype WS grouped gemm",
    "MoE FC kernel will fail for params",
    "Failed to initialize cutlass grouped gemm",
    "Failed to run cutlass grouped gemm",
    "Configuration was disabled by FAST_BUILD",
)


class FlashInferMoEApi:
    """The FlashInfer calls of the CUTLASS fused-MoE adapters (lazy imports)."""

    def version(self) -> str:
        import flashinfer

        return str(flashinfer.__version__)

    def device_arch(self, device: torch.device) -> str:
        """FlashInfer's module key for ``device`` ("90", "100", "120", ...)."""
        info = _gating.device_info(device)
        if info is None:
            raise RuntimeError(f"flashinfer fused MoE: {device} is not a CUDA device ({_gating.NO_CUDA})")
        return str(info.sm)

    def cutlass_fused_moe(self, **kwargs: Any) -> Any:
        from flashinfer.fused_moe import cutlass_fused_moe

        return cutlass_fused_moe(**kwargs)

    def accepts(self, keyword: str) -> bool:
        """Whether the installed ``cutlass_fused_moe`` takes ``keyword`` (its signature, not its version)."""
        from flashinfer.fused_moe import cutlass_fused_moe

        return keyword in inspect.signature(cutlass_fused_moe).parameters

    def autotune(self, tune_mode: bool = True) -> Any:
        """``flashinfer.autotune(tune_mode)``: the context under which calls without ``profile_ids`` tune."""
        import flashinfer

        return flashinfer.autotune(tune_mode)

    def tuner(self) -> Any:
        """``AutoTuner.get()``: the process-wide tuner ``cutlass_fused_moe`` asks for its tactics."""
        from flashinfer.autotuner import AutoTuner

        return AutoTuner.get()

    def workspace_size(self, **kwargs: Any) -> int:
        from flashinfer.fused_moe import cutlass_fused_moe_workspace_size

        return int(cutlass_fused_moe_workspace_size(**kwargs))

    def interleave_weights(self, w: torch.Tensor) -> torch.Tensor:
        from flashinfer.fused_moe import interleave_moe_weights_for_sm90_mixed_gemm

        return interleave_moe_weights_for_sm90_mixed_gemm(w, "fp4")

    def interleave_scales(self, s: torch.Tensor) -> torch.Tensor:
        from flashinfer.fused_moe import interleave_moe_scales_for_sm90_mixed_gemm

        return interleave_moe_scales_for_sm90_mixed_gemm(s, group_size=MXFP4_GROUP)

    def tactic_runner(self, arch: str, x_dtype: torch.dtype, weight_dtype: torch.dtype,
                      top_k: int, use_w4_group_scaling: bool) -> Any:
        """The C++ ``fused_moe_runner`` (tactic counts, occupancy, shape validity)."""
        from flashinfer.fused_moe.core import ActivationType, get_cutlass_fused_moe_module

        r = get_cutlass_fused_moe_module(arch).MoERunner(
            x_dtype=x_dtype, weight_dtype=weight_dtype, output_dtype=torch.bfloat16, top_k=top_k,
            tp_size=1, tp_rank=0, ep_size=1, ep_rank=0, cluster_size=1, cluster_rank=0,
            enable_alltoall=False, use_deepseek_fp8_block_scale=False,
            use_w4_group_scaling=use_w4_group_scaling, use_mxfp8_act_scaling=False,
            min_latency_mode=False, enable_pdl=False, activation_type=ActivationType.Swiglu,
            use_packed_weights=False, use_fused_finalize=False, use_wfp4afp8_humming=False)
        return r.fused_moe_runner


def swap_gate_up(t: torch.Tensor, inter: int) -> torch.Tensor:
    """``[E, 2I, ...]`` gate-first (our operands) <-> up-first (FlashInfer's fc1 order)."""
    return torch.cat([t[:, inter:], t[:, :inter]], dim=1).contiguous()
