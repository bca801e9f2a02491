"""Fake ``flashinfer.fused_moe``: ``cutlass_fused_moe`` and its workspace query (Blackwell NVFP4) and
``trtllm_fp4_block_scale_routed_moe`` (TRT-LLM-gen), each with the signature of the simulated release
(``fakes.flashinfer_releases``, ``fakes.flashinfer_trtllm_moe.ROUTED``)."""

from fakes.flashinfer_trtllm_moe import modules
from fp4sim_world import MOE, TRTLLM_MOE


def cutlass_fused_moe(**kwargs):
    return MOE.cutlass_fused_moe(**kwargs)


def cutlass_fused_moe_workspace_size(**kwargs) -> int:
    return MOE.workspace_size(**kwargs)


cutlass_fused_moe.__signature__ = MOE.release.cutlass_fused_moe
cutlass_fused_moe_workspace_size.__signature__ = MOE.release.workspace_size

trtllm_fp4_block_scale_routed_moe = modules(TRTLLM_MOE)[0].fused_moe.trtllm_fp4_block_scale_routed_moe
