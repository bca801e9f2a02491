"""Fake ``sgl_kernel`` 0.3.21 (test-only): registers ``torch.ops.sgl_kernel`` ops backed by
``fakes.sgl_kernel.FakeSglKernel`` (``fp4sim_ops``: once per process).

Like the real wheel (built against the torch 2.9.1 C++ ABI), it fails to import under any other
torch: the torch it sees is ``FP4SIM_TORCH`` (default: the installed one).
"""

import os

import torch

import fp4sim_ops
from fp4sim_world import SGL_QUANT

__version__ = "0.3.21"
BUILT_FOR = "2.9"

_seen = os.environ.get("FP4SIM_TORCH", torch.__version__)
if not _seen.startswith(BUILT_FOR):
    raise ImportError(f"{os.path.dirname(__file__)}/common_ops.abi3.so: undefined symbol: "
                      "_ZN3c104cuda9SetDeviceEab")

fp4sim_ops.register_sgl_kernel()

scaled_fp4_quant = SGL_QUANT.scaled_fp4_quant
