"""Fake ``flashinfer.fp4_quantize`` / ``nvfp4_quantize`` / ``SfLayout`` (flashinfer 0.7.2.post1
flashinfer/quantization/fp4_quantization.py), backed by ``fakes.quantize.FakeQuantizer``."""

from enum import Enum

from fp4sim_world import QUANT


class SfLayout(Enum):
    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


fp4_quantize = QUANT.fp4_quantize


def nvfp4_quantize(a, a_global_sf, sfLayout=SfLayout.layout_128x4, *args, **kwargs):
    if not isinstance(sfLayout, SfLayout):
        raise TypeError(f"sfLayout must be a SfLayout, got {sfLayout!r}")
    return QUANT.nvfp4_quantize(a, a_global_sf, sfLayout.name, *args, **kwargs)
