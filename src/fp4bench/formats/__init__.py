"""Bit-exact NVFP4 / MXFP4 reference formats as small pure-torch functions (CPU or GPU).

Conventions and their upstream sources: docs/formats.md.
"""

from fp4bench.formats.e2m1 import E2M1_MAX, e2m1_decode, e2m1_encode, pack_fp4, unpack_fp4
from fp4bench.formats.mxfp4 import MXFP4, MXFP4_BLOCK, mxfp4_dequantize, mxfp4_quantize
from fp4bench.formats.nvfp4 import NVFP4, NVFP4_BLOCK, nvfp4_dequantize, nvfp4_global_scale, nvfp4_quantize
from fp4bench.formats.swizzle import (
    POISON_BYTE,
    PaddingFill,
    pad4,
    pad128,
    scale_padding,
    sf_offset_8x4,
    sf_offset_128x4,
    swizzle_8x4,
    swizzle_128x4,
    swizzle_128x4_grouped,
    unswizzle_8x4,
    unswizzle_128x4,
    unswizzle_128x4_grouped,
)

__all__ = [
    "E2M1_MAX", "MXFP4", "MXFP4_BLOCK", "NVFP4", "NVFP4_BLOCK", "POISON_BYTE", "PaddingFill",
    "e2m1_decode", "e2m1_encode", "mxfp4_dequantize", "mxfp4_quantize",
    "nvfp4_dequantize", "nvfp4_global_scale", "nvfp4_quantize", "pack_fp4", "pad128", "pad4",
    "scale_padding", "sf_offset_128x4", "sf_offset_8x4", "swizzle_128x4", "swizzle_128x4_grouped", "swizzle_8x4",
    "unpack_fp4", "unswizzle_128x4", "unswizzle_128x4_grouped", "unswizzle_8x4",
]
