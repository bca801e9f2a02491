"""``flashinfer-trtllm``: ``mm_fp4(backend="trtllm")``, the TRT-LLM-gen NVFP4 GEMM (prebuilt cubins)
for SM100/103, the library's default tactic (untuned); never picked by ``auto``.

Its B operand is the TRT-LLM-gen weight layout: what ``nvfp4_quantize(w, gs, SfLayout.layout_128x4,
do_shuffle=True)`` returns (``mm_fp4``'s docstring; quantization/fp4_quantization.py): the ``[N, K/2]``
bytes row-shuffled by ``shuffle_matrix_a(w, 128)`` and the linear scales by
``shuffle_matrix_sf_a(sf, 128)`` into 128x4 order, passed transposed like every other row's
(``MmFp4API.shuffle_b`` applies FlashInfer's own functions to our bytes, untimed). A stays as for the
other rows (128x4 scales, ``use_8x4_sf_layout=False``). The scale shuffle needs N % 128 and whole
4-column groups of scales (K % 64); its requirement (gemm/gemm_base.py
``_trtllm_gemm_fp4_requirement``, the same in 0.7.2.post1 and 0.7.4): NVFP4, bf16 output.
"""

from __future__ import annotations

from typing import Any

import torch

from fp4bench import formats
from fp4bench.backends.builtin._marshal import fp4_pair
from fp4bench.backends.builtin._mm_fp4 import MmFp4Backend, nvfp4_inputs
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem

#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103})  # gemm_base.py _trtllm_gemm_fp4_requirement (also 107)
#: ``get_shuffle_matrix_sf_a_row_indices`` asserts N % 128; the 128x4 scale order needs K/16 % 4
N_ALIGN, K_ALIGN = 128, 64


class FlashInferTrtllm(MmFp4Backend):
    name = "flashinfer-trtllm"
    api = "flashinfer.mm_fp4(backend='trtllm') on shuffled weights (do_shuffle=True), untuned (default tactic)"
    library_backend = "trtllm"

    def shape_rule(self, problem: GemmProblem) -> str | None:
        if problem.n % N_ALIGN or problem.k % K_ALIGN:
            return (f"the TRT-LLM-gen weight shuffle needs N % {N_ALIGN} == 0 and K % {K_ALIGN} == 0, "
                    f"got N={problem.n}, K={problem.k}")
        return None

    def inputs(self, problem: GemmProblem, operands: Operands, device: torch.device) -> dict[str, Any]:
        args = nvfp4_inputs(problem, operands, device, self.name)
        _, qw = fp4_pair(operands, formats.NVFP4, self.name)
        w, sf = self._library().shuffle_b(qw.data.to(device).contiguous(),
                                         qw.scales.view(torch.uint8).to(device).contiguous())
        args["b"], args["b_descale"] = w.T, sf.T
        return args


BACKENDS = [FlashInferTrtllm()]
