"""Fake ``flashinfer.gemm.gemm_base``: ``get_cutlass_fp4_gemm_module(major, minor)`` and what
``mm_fp4``'s requirement checks import (cudnn-frontend, the CuTe DSL)."""

from types import SimpleNamespace

from fp4sim_world import DENSE, MM

DEFAULT_WORKSPACE_SIZE = 32 * 1024 * 1024
CUDNN_AVAILABLE = MM.cudnn is not None
cudnn = SimpleNamespace(backend_version=lambda: MM.cudnn, __version__=MM.cudnn_frontend)
CUTE_DSL_AVAILABLE = MM.cute_dsl


def get_cutlass_fp4_gemm_module(major: int, minor: int) -> SimpleNamespace:
    return SimpleNamespace(cutlass_fp4_gemm_runner=lambda: DENSE._runner(major, minor))
