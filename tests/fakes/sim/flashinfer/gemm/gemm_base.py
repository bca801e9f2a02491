"""Fake ``flashinfer.gemm.gemm_base``: ``get_cutlass_fp4_gemm_module(major, minor)``."""

from types import SimpleNamespace

from fp4sim_world import DENSE

DEFAULT_WORKSPACE_SIZE = 32 * 1024 * 1024


def get_cutlass_fp4_gemm_module(major: int, minor: int) -> SimpleNamespace:
    return SimpleNamespace(cutlass_fp4_gemm_runner=lambda: DENSE._runner(major, minor))
