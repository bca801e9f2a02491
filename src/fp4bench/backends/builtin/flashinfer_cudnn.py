"""``flashinfer-cudnn``: ``mm_fp4(backend="cudnn")``, cuDNN's NVFP4 GEMM through FlashInfer, the
library's default plan (untuned).

FlashInfer offers it on SM100/103/107/110/120/121 (``mm_fp4.is_backend_supported``) when
cudnn-frontend imports with version >= 1.13 and the cuDNN backend is >= 9.10.2
(flashinfer/gemm/gemm_base.py ``_check_cudnn_fp4_availability``); the availability line names
the version that is missing or too old.
"""

from __future__ import annotations

from packaging.version import Version

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import CUDNN_FP4_MIN, MmFp4API, MmFp4Backend

FRONTEND_MIN = Version("1.13")


#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103, 107, 110, 120, 121})  # gemm_base.py _cudnn_gemm_fp4_requirement


class FlashInferCudnn(MmFp4Backend):
    name = "flashinfer-cudnn"
    api = "flashinfer.mm_fp4(backend='cudnn'), untuned (default plan)"
    library_backend = "cudnn"

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        frontend, backend = lib.cudnn_frontend(), lib.cudnn_version()
        if frontend is None:
            return "cudnn-frontend (nvidia-cudnn-frontend) does not import: mm_fp4 'cudnn' needs it"
        if Version(frontend) < FRONTEND_MIN:
            return f"cudnn-frontend {frontend} < {FRONTEND_MIN}: no cuDNN FP4 GEMM"
        if backend is None or backend < CUDNN_FP4_MIN:
            return f"cuDNN backend {backend} < {CUDNN_FP4_MIN}: no cuDNN FP4 GEMM"
        return None

    def available_reason(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str:
        return f"flashinfer {lib.version} on {info.describe()}, cudnn-frontend {lib.cudnn_frontend()}, " \
               f"cuDNN {lib.cudnn_version()}"


BACKENDS = [FlashInferCudnn()]
