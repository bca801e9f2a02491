"""``flashinfer-cutedsl-low-latency``: ``mm_fp4(backend="cutedsl_low_latency")``, FlashInfer's CuTe-DSL
low-latency NVFP4 GEMM for decode-sized M on SM100/103/107, the library's default tactic (untuned).

Its requirement (flashinfer/gemm/gemm_base.py ``_cutedsl_low_latency_gemm_fp4_requirement``, the same
in 0.7.2.post1 and 0.7.4): 128x4 scales, a contiguous ``[M, K/2]`` a and a column-major ``[K/2, N]`` b
(ours: ``w.T`` of a contiguous ``[N, K/2]``), M <= 8 and K % 64 == 0 for NVFP4; its runner is a CuTe
DSL kernel (``nvidia-cutlass-dsl``). ``auto`` adds it as the last candidate where FlashInfer found the
CuTe DSL (``_heuristic_func_mm_fp4``), so a tuned ``auto`` can pick it for M <= 8.
"""

from __future__ import annotations

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import LOW_LATENCY_K_ALIGN, LOW_LATENCY_MAX_M, MmFp4API, MmFp4Backend
from fp4bench.workload.problems import GemmProblem

#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103, 107})  # gemm_base.py _cutedsl_low_latency_gemm_fp4_requirement


class FlashInferCuteDslLowLatency(MmFp4Backend):
    name = "flashinfer-cutedsl-low-latency"
    api = "flashinfer.mm_fp4(backend='cutedsl_low_latency'), M <= 8, untuned (default tactic)"
    library_backend = "cutedsl_low_latency"

    def shape_rule(self, problem: GemmProblem) -> str | None:
        if problem.m > LOW_LATENCY_MAX_M or problem.k % LOW_LATENCY_K_ALIGN:
            return (f"FlashInfer's cutedsl_low_latency needs M <= {LOW_LATENCY_MAX_M} and "
                    f"K % {LOW_LATENCY_K_ALIGN} == 0, got M={problem.m}, K={problem.k}")
        return None

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        if not lib.cute_dsl():
            return "cutedsl_low_latency needs the CuTe DSL (nvidia-cutlass-dsl), which FlashInfer did not find"
        return None


BACKENDS = [FlashInferCuteDslLowLatency()]
