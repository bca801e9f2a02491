"""Fake ``flashinfer.fused_moe``: ``cutlass_fused_moe`` and its workspace query (Blackwell NVFP4)."""

from fp4sim_world import MOE


def cutlass_fused_moe(**kwargs):
    return MOE.cutlass_fused_moe(**kwargs)


def cutlass_fused_moe_workspace_size(**kwargs) -> int:
    return MOE.workspace_size(**kwargs)
