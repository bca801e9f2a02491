"""``flashinfer-cute-dsl``: ``mm_fp4(backend="cute-dsl")``, FlashInfer's CuTe-DSL NVFP4 GEMM
(never picked by ``auto`` on SM100/103; N % 8), the library's default tactic (untuned).

It needs the CuTe DSL (``nvidia-cutlass-dsl``; flashinfer/gemm/gemm_base.py
``_cute_dsl_gemm_fp4_requirement``); the availability line says when FlashInfer did not find it.
"""

from __future__ import annotations

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import MmFp4API, MmFp4Backend


#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103, 107})  # gemm_base.py _cute_dsl_gemm_fp4_requirement


class FlashInferCuteDsl(MmFp4Backend):
    name = "flashinfer-cute-dsl"
    api = "flashinfer.mm_fp4(backend='cute-dsl'), untuned (default tactic)"
    library_backend = "cute-dsl"

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        if not lib.cute_dsl():
            return "cute-dsl needs the CuTe DSL (nvidia-cutlass-dsl), which FlashInfer did not find"
        return None


BACKENDS = [FlashInferCuteDsl()]
