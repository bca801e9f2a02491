"""Fake ``flashinfer.fp4_quantize`` / ``nvfp4_quantize`` / ``SfLayout`` of the simulated release
(flashinfer/quantization/fp4_quantization.py, flashinfer/tllm_enums.py), backed by
``fakes.quantize.FakeQuantizer``."""

from fakes.flashinfer_releases import SfLayout  # noqa: F401
from fp4sim_world import QUANT

fp4_quantize = QUANT.fp4_quantize
nvfp4_quantize = QUANT.nvfp4_quantize
