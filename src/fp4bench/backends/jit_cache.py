"""FlashInfer's JIT modules: which ones a sweep needs on this GPU, whether they are built, and
building them ahead of a run (``fp4bench prepare``).

FlashInfer compiles a CUDA extension the first time an API needs it (``JitSpec.build_and_load``
in flashinfer/jit/core.py); the fused-MoE module alone is hundreds of CUTLASS translation units,
tens of minutes on a fresh runner. A timed run must never pay that inside a test, so the plugin
skips a FlashInfer case whose module is neither built nor prebuilt and names this command.

Where the artifacts live (flashinfer/jit/env.py, 0.7.2.post1): ``FLASHINFER_JIT_DIR`` =
``$FLASHINFER_WORKSPACE_BASE`` (default ``$HOME``) ``/.cache/flashinfer/<version>/<archs>/cached_ops``;
prebuilt modules come from the ``flashinfer-jit-cache`` wheel (``JitSpec.is_aot``).
"""

from __future__ import annotations

import importlib
import os
from fp4bench import clock
from dataclasses import dataclass
from typing import Any, Callable

#: compute capability -> [(module label, backend names that need it, "module:function" making the JitSpec)].
#: The functions are the ones FlashInfer loads: ``gen_cutlass_fused_moe_module`` builds
#: ``fused_moe_{arch}`` (flashinfer/jit/fused_moe.py:275 in 0.7.2.post1, :276 in 0.7.4), and
#: ``get_cutlass_fused_moe_module`` loads the SM100 one for "100"/"107"/"110" and the SM120 one for
#: "120"/"121" (flashinfer/fused_moe/core.py:629-639 in 0.7.2.post1, :887-897 in 0.7.4); the dense
#: runner loads the SM100 module for major 10/11 except SM103 (gemm/gemm_base.py:2895 / :3294).
#: ``tests/backends/test_jit_cache.py`` checks every FlashInfer backend of the registry is named here for
#: every compute capability it supports.
_MOE_NVFP4 = ("flashinfer-cutlass-moe-nvfp4", "flashinfer-cutlass-moe-nvfp4-tuned")
#: the dense GEMM module: the dense rows, the end-to-end row that quantizes and calls it, and
#: ``mm_fp4(backend="auto")``, whose order has CUTLASS in it on every architecture
_DENSE = ("flashinfer-cutlass", "e2e-flashinfer-cutlass", "flashinfer-auto", "flashinfer-auto-tuned")
#: FlashInfer backends that build no JIT module of FlashInfer's: cuDNN's GEMM is the cuDNN library's
#: (its plans are built at the first call); b12x, cute-dsl and cutedsl_low_latency are CuTe-DSL kernels, compiled in
#: process at their first call (gemm/gemm_base.py ``_b12x_gemm_fp4_runner``, ``_cute_dsl_gemm_fp4_runner``,
#: ``_cutedsl_low_latency_blockscaled_gemm_runner``), as is the b12x fused MoE (fused_moe/cute_dsl/blackwell_sm12x/
#: moe_dispatch.py ``_get_static_kernel`` / ``_get_micro_kernel`` / ``_get_dynamic_kernel``)
NO_JIT = ("flashinfer-cudnn", "flashinfer-b12x", "flashinfer-cute-dsl", "flashinfer-cutedsl-low-latency",
          "flashinfer-b12x-moe-nvfp4")
#: the activation quantizers load ``fp4_quantization_<arch>`` (flashinfer/quantization/fp4_quantization.py:274-299
#: in 0.7.2.post1: "120"/"121" become the family module "120f" under CUDA >= 12.9, what Blackwell torch builds are)
_QUANT = ("flashinfer-fp4-quantize", "flashinfer-nvfp4-quantize", "e2e-flashinfer-cutlass")


def _quant(arch: str) -> tuple[str, tuple[str, ...], str]:
    return (f"FP4 quantization (SM{arch})", _QUANT, f"flashinfer.jit.fp4_quantization:gen_fp4_quantization_sm{arch}_module")


#: ``mm_fp4(backend="trtllm")`` loads the TRT-LLM-gen GEMM module (its cubins; gemm/gemm_base.py
#: ``get_trtllm_gemm_module``, flashinfer/jit/gemm/core.py:729 in both releases)
_TRTLLM = ("TRT-LLM-gen GEMM", ("flashinfer-trtllm",), "flashinfer.jit.gemm.core:gen_trtllm_gen_gemm_module")
#: the TRT-LLM-gen fused MoE loads ``fused_moe_trtllm_sm100`` on SM100/103 (fused_moe/core.py
#: ``get_trtllm_moe_sm100_module``: ``enable_rubin`` only on SM107; flashinfer/jit/fused_moe.py:331 in 0.7.2.post1)
_TRTLLM_MOE = ("TRT-LLM-gen fused MoE", ("flashinfer-trtllm-moe-nvfp4", "flashinfer-trtllm-moe-nvfp4-tuned"),
               "flashinfer.jit.fused_moe:gen_trtllm_gen_fused_moe_sm100_module")
_SM100 = [("fused MoE (SM100)", _MOE_NVFP4, "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm100_module"),
          ("dense FP4 GEMM (SM100)", _DENSE, "flashinfer.jit.gemm.core:gen_gemm_sm100_module_cutlass_fp4")]
_SM120 = [("fused MoE (SM120)", _MOE_NVFP4, "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm120_module"),
          ("dense FP4 GEMM (SM120)", _DENSE, "flashinfer.jit.gemm.core:gen_gemm_sm120_module_cutlass_fp4")]
_SPECS: dict[tuple[int, int], list[tuple[str, tuple[str, ...], str]]] = {
    (9, 0): [("fused MoE (SM90)", ("flashinfer-cutlass-moe", "flashinfer-cutlass-moe-tuned"),
              "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm90_module")],
    (10, 0): _SM100 + [_quant("100"), _TRTLLM, _TRTLLM_MOE],
    (10, 3): [_quant("103"), _TRTLLM, _TRTLLM_MOE,
              ("fused MoE (SM103)", _MOE_NVFP4, "flashinfer.jit.fused_moe:gen_cutlass_fused_moe_sm103_module"),
              ("dense FP4 GEMM (SM103)", _DENSE, "flashinfer.jit.gemm.core:gen_gemm_sm103_module_cutlass_fp4")],
    (11, 0): _SM100 + [_quant("110")],
    (12, 0): _SM120 + [_quant("120f")],
    (12, 1): _SM120 + [_quant("120f")],
}
#: set to 1 to let a run compile missing modules inside the first test that needs them
ALLOW_ENV = "FP4BENCH_ALLOW_JIT"


@dataclass
class JitModule:
    label: str
    backends: tuple[str, ...]
    spec: Any  # flashinfer JitSpec

    @property
    def ready(self) -> bool:
        return bool(self.spec.is_aot or self.spec.is_compiled)

    @property
    def where(self) -> str:
        return "prebuilt (flashinfer-jit-cache)" if self.spec.is_aot else str(self.spec.get_library_path())


def _load(path: str) -> Callable[[], Any]:
    module, func = path.split(":")
    return getattr(importlib.import_module(module), func)


def modules_for(capability: tuple[int, int], backends: set[str] | None = None) -> list[JitModule]:
    """The JIT modules the FlashInfer backends use on this compute capability (empty if none)."""
    out = []
    for label, names, path in _SPECS.get(tuple(capability), []):
        if backends is None or set(names) & backends:
            out.append(JitModule(label, names, _load(path)()))
    return out


def cache_dir() -> str:
    from flashinfer.jit import env

    return str(env.FLASHINFER_JIT_DIR)


def unbuilt_reason(backend: str, capability: tuple[int, int]) -> str:
    """'' when ``backend`` needs no JIT build here (or it is built); else why the case must skip."""
    if os.environ.get(ALLOW_ENV) == "1" or not any(backend in names for _, names, _ in _SPECS.get(capability, [])):
        return ""
    try:
        missing = [m for m in modules_for(capability, {backend}) if not m.ready]
    except Exception as exc:  # flashinfer absent or changed: the backend's availability says so
        return "" if isinstance(exc, ImportError) else f"cannot inspect FlashInfer's JIT cache: {exc}"
    if not missing:
        return ""
    return (f"{backend}: FlashInfer JIT module {missing[0].label} is not built (it would compile for tens of "
            f"minutes inside this test); run `fp4bench prepare` first (cache: {cache_dir()}), or set "
            f"{ALLOW_ENV}=1 to compile during the run")


def prepare(capability: tuple[int, int], backends: set[str] | None = None,
            echo: Callable[[str], None] = print) -> int:
    """Build every missing module, one by one, saying which, where and how long it took."""
    mods = modules_for(capability, backends)
    if not mods:
        echo(f"no FlashInfer JIT module is used on SM{capability[0]}{capability[1]}: nothing to build")
        return 0
    echo(f"FlashInfer JIT cache: {cache_dir()} (set FLASHINFER_WORKSPACE_BASE to move it; "
         "FLASHINFER_NVCC_THREADS / MAX_JOBS set the build parallelism)")
    for i, m in enumerate(mods, 1):
        if m.ready:
            echo(f"[{i}/{len(mods)}] {m.label}: already built: {m.where}")
            continue
        echo(f"[{i}/{len(mods)}] {m.label}: building (hundreds of CUDA translation units for the fused MoE; "
             "ninja prints its progress below) ...")
        t0 = clock.now()
        m.spec.build_and_load()
        echo(f"[{i}/{len(mods)}] {m.label}: built in {clock.now() - t0:.0f} s: {m.where}")
    return 0
