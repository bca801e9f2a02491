"""FlashInfer's b12x fused MoE, NVFP4 weights x NVFP4 activations on SM120/121 (``b12x_fused_moe``).

``flashinfer-b12x-moe-nvfp4`` calls the functional entry point (flashinfer/fused_moe/cute_dsl/
b12x_moe.py:115, the same signature in 0.7.2.post1 and 0.7.4) the way its own test does
(tests/moe/test_b12x_fused_moe.py ``test_numerical_accuracy``), with the library's defaults
otherwise (``activation="silu"``, ``quant_mode=None`` -> NVFP4 from ``activation_precision="fp4"``):

* activations: the bf16 originals ``Operands.a``; the kernel quantizes them itself (the routing,
  FC1, SwiGLU, FC2 and scatter run in one pipeline). A value within its fast-math arithmetic's reach
  of a rounding boundary (``reference.input_ties``; on bf16 data most tokens of a real hidden size
  hold one) is moved one bf16 ulp toward the rounding our quantizer took (``off_ties``): the kernel
  then has exactly one right answer, ``Operands.qa``, and the bound needs no near-tie term (which,
  rigorous, is several times ``|ref|`` on the tokens it covers). The reference option ``kernel_input``
  names what the kernel read; the reference checks it quantizes to ``qa``. ``input_global_scale`` is the activations'
  *decode* scale ``1 / gs_a``: the library folds it into FC1's output multiplier as
  ``w1_alpha * input_global_scale`` (moe_dispatch.py ``launch_sm120_moe``), so with
  ``w1_alpha = 1 / gs_w1`` (the weights' decode scale, what the docstring calls "the exact fp32
  weight scale") the product is GEMM1's dequantization ``1 / (gs_a * gs_w1)``; the quantizer
  multiplies by its reciprocal, ``gs_a``, our encode scale (the direct micro kernel converts "ordinary
  NVFP4 API scales" so, moe_direct_micro_kernel.py ``_input_scale_multiplier``). The static kernel's
  quantizer reads the value it is given as its multiplier
  (moe_static_kernel.py, ``input_scales_are_reciprocal=False``); FlashInfer's own tests use unit
  scales, which cannot tell the two readings apart. Ours are not unit: a wrong reading is off by
  ``gs_a^2`` and fails the check by orders of magnitude, so the first SM120 run settles it;
* weights: our NVFP4 bytes ``[E, 2I, H/2]`` *up rows first* (we swap our gate-first halves: the
  library's reference, tests/moe/utils.py ``compute_reference_moe_fp4``, takes ``linear = [:I]``,
  ``gate = [I:]``) and ``[E, H, I/2]``; their e4m3 scales per expert in the 128x4 swizzle, then
  ``flashinfer.cute_dsl.utils.convert_sf_to_mma_layout(sf, m, k, num_groups=E)`` (the 6-D MMA view
  the test builds);
* FC2: the kernel re-quantizes the fp32 SwiGLU output to NVFP4 with ``fc2_input_scale``, read like
  ``input_global_scale`` (the kernels take ordinary API scales and convert them to multipliers,
  moe_direct_micro_kernel.py ``MoEDirectMicroKernel``): ``1 / gs_2`` with ``gs_2`` calibrated on this
  batch's routed intermediate (as for the other NVFP4 fused MoEs); ``w2_alpha = 1 / (gs_2 * gs_w2)``
  (the library folds nothing into it). Reference: ``intermediate="nvfp4-fused"``.

Tactics: none. b12x MoE has no tuner and lists no configurations; it picks its micro / static /
dynamic kernel from the routed row count (``select_sm120_moe_backend``), so there is one row, the
library's default, and no ``-tuned`` row. It refuses CUDA < 13 as FlashInfer reads it (nvcc, else
torch; ``b12x_fused_moe`` raises ``ValueError``): the availability line names it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from packaging.version import Version

from fp4bench import formats
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._moe_api import swap_gate_up
from fp4bench.backends.builtin._moe_nvfp4 import nvfp4_moe
from fp4bench.reference.input_ties import off_ties
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import MoEProblem, Problem

DIST = "flashinfer-python"
#: ``@supported_compute_capability([120, 121])`` on ``b12x_fused_moe``
SUPPORTED_SMS = frozenset({120, 121})
#: ``b12x_fused_moe`` raises below this CUDA major (``get_cuda_version().major < 13``)
MIN_CUDA = Version("13")
#: hidden: the W4A4 kernels need a multiple of 128 (0.7.4's ``_validate_w4a4_dimensions``); inter:
#: our scales go to the MMA layout unpadded, so 2I and I/16 must fill whole 128-row x 4-scale tiles
HIDDEN_ALIGN, INTER_ALIGN = 128, 64


@dataclass(frozen=True)
class B12xMoEApi:
    """The FlashInfer entry points of the b12x fused-MoE row (a fake replaces them in CPU tests).

    fused_moe: ``flashinfer.b12x_fused_moe``; to_mma_layout: ``flashinfer.cute_dsl.utils.
    convert_sf_to_mma_layout``; cuda_version(): the CUDA version FlashInfer reads
    (``flashinfer.jit.cpp_ext.get_cuda_version``).
    """

    version: str
    fused_moe: Callable[..., torch.Tensor]
    to_mma_layout: Callable[..., torch.Tensor]
    cuda_version: Callable[[], str]


def load_b12x_moe() -> B12xMoEApi:
    """Import FlashInfer lazily (availability / prepare only) and collect the entry points."""
    import flashinfer
    from flashinfer.cute_dsl.utils import convert_sf_to_mma_layout
    from flashinfer.jit.cpp_ext import get_cuda_version

    return B12xMoEApi(version=str(flashinfer.__version__), fused_moe=flashinfer.b12x_fused_moe,
                      to_mma_layout=convert_sf_to_mma_layout, cuda_version=lambda: str(get_cuda_version()))


class FlashInferB12xMoE(Backend):
    """One row: the library's own kernel choice (it exposes no tactics)."""

    name = "flashinfer-b12x-moe-nvfp4"
    api = "flashinfer.b12x_fused_moe (b12x CuTe-DSL fused MoE, NVFP4, bf16 input quantized in-kernel)"
    kinds = frozenset({"moe"})
    act_format = "nvfp4"
    weight_format = "nvfp4"

    def __init__(self, api: B12xMoEApi | None = None) -> None:
        self._lib = api

    def _library(self) -> B12xMoEApi:
        if self._lib is None:
            self._lib = load_b12x_moe()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is None:
            return Availability.no(_gating.NO_CUDA)
        if info.sm not in SUPPORTED_SMS:
            return Availability.no(f"{self.name}: FlashInfer runs the b12x fused MoE on "
                                   f"{_gating.format_sms(SUPPORTED_SMS)} only; this is {info.describe()}")
        failed = _gating.load_failure(DIST, self._library) if self._lib is None else None
        if failed is not None:
            return Availability.no(*failed)
        lib = self._library()
        cuda = lib.cuda_version()
        if Version(cuda) < MIN_CUDA:
            return Availability.no(f"{self.name}: flashinfer {lib.version}'s b12x fused MoE needs CUDA >= "
                                   f"{MIN_CUDA}; FlashInfer reads CUDA {cuda} (nvcc, else torch) on {info.describe()}")
        return Availability.yes(lib.version, f"flashinfer {lib.version} (CUDA {cuda}) on {info.describe()}")

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is None and isinstance(problem, MoEProblem):
            bad = [f"{n}={v} (needs a multiple of {a})"
                   for n, v, a in (("hidden", problem.hidden, HIDDEN_ALIGN), ("inter", problem.inter, INTER_ALIGN))
                   if v % a]
            if bad:
                why = f"{self.name}: {', '.join(bad)}: the b12x kernels' tiles and our unpadded scale layout"
        return why

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        return [DEFAULT_TACTIC]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        why = self.unsupported_reason(problem)
        if why is not None:
            raise ValueError(why)
        assert isinstance(problem, MoEProblem)
        call, gs_2 = self._marshal(self._library(), problem, operands, torch.device(device))
        out = torch.empty((problem.num_tokens, problem.hidden), dtype=torch.bfloat16, device=device)
        return Prepared(problem, out, {"call": call, "fc2_act_global_scale": gs_2})

    def _marshal(self, lib: B12xMoEApi, p: MoEProblem, ops: Operands, device: torch.device
                 ) -> tuple[dict[str, Any], torch.Tensor]:
        m = nvfp4_moe(ops, p.num_experts, device, self.name)
        e = p.num_experts

        def mma_scales(sf: torch.Tensor, rows: int, k: int) -> torch.Tensor:
            swz = torch.stack([formats.swizzle_128x4(sf[x].contiguous()) for x in range(e)]).to(device)
            return lib.to_mma_layout(swz.view(torch.float8_e4m3fn).reshape(e * rows, k // 16),
                                     m=rows, k=k, num_groups=e, sf_vec_size=16)

        s1 = swap_gate_up(m.qw.scales.view(torch.uint8), p.inter)
        call = {
            "x": off_ties(ops.a.to(device=device, dtype=torch.bfloat16), m.gs_a).contiguous(),
            "w1_weight": swap_gate_up(m.qw.data, p.inter).to(device).contiguous(),
            "w1_weight_sf": mma_scales(s1, 2 * p.inter, p.hidden),
            "w2_weight": m.qw2.data.to(device).contiguous(),
            "w2_weight_sf": mma_scales(m.qw2.scales.view(torch.uint8), p.hidden, p.inter),
            "token_selected_experts": ops.topk_ids.to(device=device, dtype=torch.int32).contiguous(),
            "token_final_scales": ops.topk_weights.to(device=device, dtype=torch.float32).contiguous(),
            "num_experts": e, "top_k": p.top_k,
            "w1_alpha": (1.0 / m.gs_w1).contiguous(),
            "w2_alpha": (1.0 / (m.gs_2 * m.gs_w2)).contiguous(),
            "fc2_input_scale": (1.0 / m.gs_2).reshape(1),
            "input_global_scale": (1.0 / m.gs_a).reshape(1),
        }
        return call, m.gs_2

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        return self._library().fused_moe(output=prepared.out, **prepared.args["call"])

    def reference_options(self, prepared: Prepared) -> dict[str, Any]:
        """GEMM1's epilogue applies SwiGLU to fp32 accumulators and re-quantizes to NVFP4 with the
        calibrated fc2 scale; the kernel quantized the bf16 activations ``x`` itself."""
        return {"intermediate": "nvfp4-fused", "fc2_act_global_scale": prepared.args["fc2_act_global_scale"],
                "kernel_input": prepared.args["call"]["x"]}


BACKENDS = [FlashInferB12xMoE()]
