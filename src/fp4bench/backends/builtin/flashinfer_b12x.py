"""``flashinfer-b12x``: ``mm_fp4(backend="b12x")``, FlashInfer's CuTe-DSL NVFP4 GEMM for SM120/121,
``auto``'s first pick on SM120 with CUDA >= 12.9; the library's default tactic (untuned).

Its requirement (flashinfer/gemm/gemm_base.py ``_b12x_gemm_fp4_requirement``, the same in 0.7.2.post1
and 0.7.4): CUDA >= 12.9 for NVFP4 as FlashInfer reads it (nvcc, else torch), 128x4 scales, K % 32,
and the CuTe DSL (``nvidia-cutlass-dsl``); the availability line names which is missing.
"""

from __future__ import annotations

from packaging.version import Version

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import B12X_MIN_CUDA, MmFp4API, MmFp4Backend


#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({120, 121})  # gemm_base.py _b12x_gemm_fp4_requirement


class FlashInferB12x(MmFp4Backend):
    name = "flashinfer-b12x"
    api = "flashinfer.mm_fp4(backend='b12x'), untuned (default tactic)"
    library_backend = "b12x"

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        cuda = lib.cuda_version()
        if Version(str(cuda)) < B12X_MIN_CUDA:
            return f"b12x needs CUDA >= {B12X_MIN_CUDA}; FlashInfer reads CUDA {cuda} (nvcc, else torch)"
        if not lib.cute_dsl():
            return "b12x needs the CuTe DSL (nvidia-cutlass-dsl), which FlashInfer did not find"
        return None


BACKENDS = [FlashInferB12x()]
