"""FlashInfer's NVFP4 activation quantizers, as an engine calls them before ``mm_fp4`` / the
CUTLASS FP4 GEMM (flashinfer 0.7.2.post1 and 0.7.4, flashinfer/quantization/fp4_quantization.py)::

    x_fp4, x_sf = flashinfer.fp4_quantize(x, gs, 16, False, True, nvfp4_4over6=None)
    x_fp4, x_sf = flashinfer.nvfp4_quantize(x, gs, sfLayout=SfLayout.layout_128x4, nvfp4_4over6=None)

``gs``: fp32 ``[1]`` encode scale (``448·6 / amax``; ``is_global_scale_inversed=False``). Both
return uint8 ``[M, K/2]`` and the 128x4-swizzled scales ``[pad128(M), pad4(K/16)]`` (uint8; the
padding is zero). ``nvfp4_quantize`` forwards to ``fp4_quantize`` (same kernel) after its own
argument handling: a bug in either layer shows in its own row. ``nvfp4_4over6=None`` pins the
standard recipe (without it, ``FLASHINFER_NVFP4_4OVER6*`` variables switch the rounding recipe).

Where it runs: the quantize kernel ``quantize_with_block_size`` has a body only for
``__CUDA_ARCH__ >= 1000`` (csrc/nv_internal/tensorrt_llm/kernels/quantization.cuh:229-236 in
0.7.2.post1). On SM90 the Python routes to the ``fp4_quantization_90`` JIT module, so 0.7.2.post1
launches an empty kernel and returns unwritten ``torch.empty`` memory, and 0.7.4 raises
"fp4_quantize requires SM100 or newer" (flashinfer/utils.py:367-374). The row is therefore
unavailable on SM90 with that reason (``fp4_quantization_90`` serves only the host-side
``e2m1_and_ufp8sf_scale_to_float`` dequantizer there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._quant import QuantizerBackend, QuantOutput
from fp4bench.backends.base import Availability, Prepared, Tactic

DIST = "flashinfer-python"
SUPPORTED_SMS = frozenset({100, 103, 110, 120, 121})
NOT_ON_SM90 = ("the FlashInfer quantize kernel has no body below __CUDA_ARCH__ 1000 (quantization.cuh:229): "
               "0.7.2.post1 returns unwritten memory on SM90, 0.7.4 refuses it")


@dataclass(frozen=True)
class FlashInferQuantAPI:
    """``flashinfer.fp4_quantize``, ``flashinfer.nvfp4_quantize`` and ``SfLayout.layout_128x4``."""

    version: str
    fp4_quantize: Callable[..., Any]
    nvfp4_quantize: Callable[..., Any]
    layout_128x4: Any


def load_flashinfer_quant() -> FlashInferQuantAPI:
    import flashinfer

    return FlashInferQuantAPI(version=str(flashinfer.__version__), fp4_quantize=flashinfer.fp4_quantize,
                              nvfp4_quantize=flashinfer.nvfp4_quantize,
                              layout_128x4=flashinfer.SfLayout.layout_128x4)


class _FlashInferQuant(QuantizerBackend):
    def __init__(self, api: FlashInferQuantAPI | None = None) -> None:
        self._lib = api

    def _library(self) -> FlashInferQuantAPI:
        if self._lib is None:
            self._lib = load_flashinfer_quant()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is not None and info.major == 9:
            return Availability.no(f"{info.describe()}: {NOT_ON_SM90}")
        reason = _gating.arch_reason(info, SUPPORTED_SMS)
        if reason:
            return Availability.no(reason)
        failed = _gating.load_failure(DIST, self._library) if self._lib is None else None
        if failed is not None:
            return Availability.no(*failed)
        return Availability.yes(self._library().version)

    def run(self, prepared: Prepared, tactic: Tactic) -> QuantOutput:
        x, gs = prepared.args["x"], prepared.args["gs"]
        data, sf = self.quantize(self._library(), x, gs)
        return QuantOutput(data, sf, gs)

    def quantize(self, lib: FlashInferQuantAPI, x: torch.Tensor, gs: torch.Tensor) -> tuple:
        raise NotImplementedError


class FlashInferFp4Quantize(_FlashInferQuant):
    name = "flashinfer-fp4-quantize"
    api = "flashinfer.fp4_quantize (NVFP4, 128x4 scales, nvfp4_4over6=None)"

    def quantize(self, lib: FlashInferQuantAPI, x: torch.Tensor, gs: torch.Tensor) -> tuple:
        return lib.fp4_quantize(x, gs, 16, False, True, nvfp4_4over6=None)


class FlashInferNvfp4Quantize(_FlashInferQuant):
    name = "flashinfer-nvfp4-quantize"
    api = "flashinfer.nvfp4_quantize (sfLayout=layout_128x4, nvfp4_4over6=None)"

    def quantize(self, lib: FlashInferQuantAPI, x: torch.Tensor, gs: torch.Tensor) -> tuple:
        return lib.nvfp4_quantize(x, gs, sfLayout=lib.layout_128x4, nvfp4_4over6=None)


BACKENDS = [FlashInferFp4Quantize(), FlashInferNvfp4Quantize()]
