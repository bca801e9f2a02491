"""sgl_kernel's NVFP4 activation quantizer, as sglang calls it before ``cutlass_scaled_fp4_mm``
(sgl-project/sglang sgl-kernel/python/sgl_kernel/gemm.py, ``scaled_fp4_quant``)::

    x_fp4, x_sf = sgl_kernel.scaled_fp4_quant(x, gs)   # gs: fp32 [1] encode scale (1 / input_scale)

It returns uint8 ``[M, K/2]`` and float8_e4m3fn ``[pad128(M), pad4(K/16)]`` scales, 128x4
swizzled (an int32 buffer viewed as e4m3; allocated with ``torch.empty`` when ``K/16`` is a
multiple of 4, so padded rows are uninitialized: only the ``[M, K/16]`` region is compared).
The public wrapper is what is timed: its two allocations are part of what the engine pays.
Where it runs: as the dense GEMM, the wheel's sm_100a/sm_120a builds (``SUPPORTED_SMS``); SM90
has no NVFP4 conversion instructions (``cvt.rn.satfinite.e2m1x2`` needs sm_100a+).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._quant import QuantizerBackend, QuantOutput
from fp4bench.backends.base import Prepared, Tactic
from fp4bench.backends.builtin.sgl_kernel import DISTS, _installed_dist, _SglKernelBase


@dataclass(frozen=True)
class SglQuantAPI:
    version: str
    scaled_fp4_quant: Callable[..., Any] | None  # None: the installed package has no such function
    #: the distribution that provides ``sgl_kernel`` (for skip reasons)
    dist: str = "sgl_kernel"


def load_sgl_quant() -> SglQuantAPI:
    mod = importlib.import_module("sgl_kernel")
    version = getattr(mod, "__version__", None) or _gating.dist_version(*DISTS) or "?"
    return SglQuantAPI(version=str(version), scaled_fp4_quant=getattr(mod, "scaled_fp4_quant", None),
                       dist=_installed_dist())


class SglKernelFp4Quant(QuantizerBackend, _SglKernelBase):
    """``sgl-kernel-fp4-quant``: ``sgl_kernel.scaled_fp4_quant``, bf16 -> NVFP4, 128x4 scales."""

    name = "sgl-kernel-fp4-quant"
    api = "sgl_kernel.scaled_fp4_quant (public wrapper, 128x4 scales)"
    op = op_name = "scaled_fp4_quant"  # the SglQuantAPI field and the public function

    def _library(self) -> SglQuantAPI:  # type: ignore[override]
        if self._lib is None:
            self._lib = load_sgl_quant()  # type: ignore[assignment]
        return self._lib  # type: ignore[return-value]

    def run(self, prepared: Prepared, tactic: Tactic) -> QuantOutput:
        x, gs = prepared.args["x"], prepared.args["gs"]
        data, sf = self._library().scaled_fp4_quant(x, gs)
        return QuantOutput(data, sf, gs)


BACKENDS = [SglKernelFp4Quant()]
