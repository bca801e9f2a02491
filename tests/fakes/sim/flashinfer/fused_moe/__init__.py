"""Fake ``flashinfer.fused_moe``: ``cutlass_fused_moe`` and its workspace query (Blackwell NVFP4),
each with the signature of the simulated release (``fakes.flashinfer_releases``)."""

from fp4sim_world import MOE


def cutlass_fused_moe(**kwargs):
    return MOE.cutlass_fused_moe(**kwargs)


def cutlass_fused_moe_workspace_size(**kwargs) -> int:
    return MOE.workspace_size(**kwargs)


cutlass_fused_moe.__signature__ = MOE.release.cutlass_fused_moe
cutlass_fused_moe_workspace_size.__signature__ = MOE.release.workspace_size
