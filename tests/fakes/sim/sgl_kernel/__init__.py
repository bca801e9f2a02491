"""Fake ``sgl_kernel`` 0.3.21 (test-only): registers ``torch.ops.sgl_kernel`` ops backed by
``fakes.sgl_kernel.FakeSglKernel``, with the op schemas of sgl-kernel's ``common_extension.cc``.

Like the real wheel (built against the torch 2.9.1 C++ ABI), it fails to import under any other
torch: the torch it sees is ``FP4SIM_TORCH`` (default: the installed one).
"""

import os

import torch

from fp4sim_world import SGL, SGL_QUANT

__version__ = "0.3.21"
BUILT_FOR = "2.9"

_seen = os.environ.get("FP4SIM_TORCH", torch.__version__)
if not _seen.startswith(BUILT_FOR):
    raise ImportError(f"{os.path.dirname(__file__)}/common_ops.abi3.so: undefined symbol: "
                      "_ZN3c104cuda9SetDeviceEab")

_lib = torch.library.Library("sgl_kernel", "DEF")
_lib.define("cutlass_scaled_fp4_mm(Tensor! out, Tensor a, Tensor b, Tensor block_scale_a, "
            "Tensor block_scale_b, Tensor alpha) -> ()")
_lib.define("cutlass_fp4_group_mm(Tensor! output, Tensor a, Tensor b, Tensor a_blockscale, "
            "Tensor b_blockscales, Tensor alphas, Tensor ab_strides, Tensor c_strides, "
            "Tensor problem_sizes, Tensor expert_offsets, Tensor sf_offsets) -> ()")
_lib.impl("cutlass_scaled_fp4_mm", SGL.scaled_fp4_mm, "CPU")
_lib.impl("cutlass_fp4_group_mm", SGL.fp4_group_mm, "CPU")

scaled_fp4_quant = SGL_QUANT.scaled_fp4_quant
