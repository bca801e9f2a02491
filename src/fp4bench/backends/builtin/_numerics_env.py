"""FlashInfer environment variables that change NVFP4 numerics, and which of them are set.

FlashInfer's NVFP4 activation quantizers (``fp4_quantize`` and the fused MoE's re-quantization
of its intermediate, TRT-LLM ``cvt_warp_fp16_to_fp4``) read these process-wide variables; each
selects another rounding recipe ("4over6": per block, scale to 4 instead of 6 where that has the
smaller error) or turns off fast math. The list is FlashInfer's own ``NVFP4_QUANT_ENV_VARS``
(flashinfer/quantization/fp4_quantization.py:75-81, identical in 0.7.2.post1 and 0.7.4). A kernel
checked against our reference quantizes with the default recipe, so any of them set explains a
"mismatch"; the fingerprint records them so a baseline and a run that differ in them show it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

NVFP4_QUANT_ENV_VARS = (
    "FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH",
    "FLASHINFER_NVFP4_4OVER6",
    "FLASHINFER_NVFP4_4OVER6_ERR_MODE",
    "FLASHINFER_NVFP4_4OVER6_ERR_USE_FAST_MATH",
    "FLASHINFER_NVFP4_4OVER6_E4M3_USE_256",
)
#: the ones ``cutlass_fused_moe(nvfp4_4over6=None)`` overrides (FlashInfer 0.7.4: "4over6 off,
#: environment ignored"); the fast-math switch is not part of the 4over6 recipe
PINNED_BY_4OVER6_NONE = tuple(v for v in NVFP4_QUANT_ENV_VARS if v.startswith("FLASHINFER_NVFP4_4OVER6"))


def set_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of ``NVFP4_QUANT_ENV_VARS`` present in ``environ`` (default: this process)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in NVFP4_QUANT_ENV_VARS if k in env}


def describe(values: Mapping[str, str]) -> str | None:
    """``"K=V, K2=V2"`` (sorted), or None when none is set: the fingerprint's field."""
    return ", ".join(f"{k}={values[k]}" for k in sorted(values)) or None


def unpinned(pinned_4over6: bool, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The set variables a call still obeys (all, unless it pinned the 4over6 recipe)."""
    return {k: v for k, v in set_vars(environ).items() if not (pinned_4over6 and k in PINNED_BY_4OVER6_NONE)}


def hint(values: Mapping[str, str]) -> str:
    """The suffix a failure message gets when such variables are set ('' when none is)."""
    if not values:
        return ""
    return (f" (FlashInfer NVFP4 quantization environment set: {describe(values)}; it selects another "
            "rounding recipe than the reference's: unset it to check the kernel)")
