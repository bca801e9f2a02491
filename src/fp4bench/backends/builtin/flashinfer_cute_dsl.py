"""``flashinfer-cute-dsl``: ``mm_fp4(backend="cute-dsl")``, FlashInfer's CuTe-DSL NVFP4 GEMM, the
library's default tactic (untuned). ``auto`` never picks it on SM100/103/120/121 (SM107 only, and for
a per-token alpha, which our rows do not pass).

Its requirement (flashinfer/gemm/gemm_base.py ``_cute_dsl_gemm_fp4_requirement``, the same in
0.7.2.post1 and 0.7.4): the CuTe DSL (``nvidia-cutlass-dsl``) and 128x4 scales; N % 8 on
SM100/103/107; on SM120/121 (``kernels/sm12x_cute/runner.py`` ``check_requirement``) N % 64 and
K % 64 with bf16 output. The availability line says when FlashInfer did not find the CuTe DSL; a
problem off the SM12x alignment is skipped with the rule named.
"""

from __future__ import annotations

import torch

from fp4bench.backends.base import Availability
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import MmFp4API, MmFp4Backend
from fp4bench.workload.problems import GemmProblem

#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103, 107, 120, 121})  # gemm_base.py _cute_dsl_gemm_fp4_requirement
#: the SM120/121 kernel's alignment of N and K
SM12X_ALIGN = 64


class FlashInferCuteDsl(MmFp4Backend):
    name = "flashinfer-cute-dsl"
    api = "flashinfer.mm_fp4(backend='cute-dsl'), untuned (default tactic)"
    library_backend = "cute-dsl"
    #: the GPU of the last availability asked was an SM12x (its stricter alignment applies)
    _sm12x = False

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        self._sm12x = info is not None and info.major == 12
        return super().availability(device)

    def shape_rule(self, problem: GemmProblem) -> str | None:
        if self._sm12x and (problem.n % SM12X_ALIGN or problem.k % SM12X_ALIGN):
            return (f"FlashInfer's SM120/121 cute-dsl GEMM needs N % {SM12X_ALIGN} == 0 and "
                    f"K % {SM12X_ALIGN} == 0, got N={problem.n}, K={problem.k}")
        return None

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        if not lib.cute_dsl():
            return "cute-dsl needs the CuTe DSL (nvidia-cutlass-dsl), which FlashInfer did not find"
        return None


BACKENDS = [FlashInferCuteDsl()]
