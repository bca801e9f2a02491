"""Fake ``flashinfer`` package (test-only): the entry points fp4bench loads, backed by the fakes."""

from fakes.flashinfer_b12x_moe import modules as _b12x_modules
from fp4sim_world import B12X_MOE, DENSE, MM, TUNER

__version__ = DENSE.version

#: ``flashinfer.mm_fp4`` (gemm_base.py): callable, ``is_backend_supported``, ``suitable_auto_backends``
mm_fp4 = MM
#: ``flashinfer.autotune`` (autotuner.py)
autotune = TUNER.tuning
#: ``flashinfer.b12x_fused_moe`` (fused_moe/cute_dsl/b12x_moe.py)
b12x_fused_moe = _b12x_modules(B12X_MOE)["fused_moe"]

from fakes.flashinfer_mm_fp4 import shuffle_matrix_a, shuffle_matrix_sf_a  # noqa: E402,F401
from flashinfer.fp4_quantization import SfLayout, fp4_quantize, nvfp4_quantize  # noqa: E402,F401
from fakes.flashinfer_trtllm_moe import nvfp4_block_scale_interleave  # noqa: E402,F401
