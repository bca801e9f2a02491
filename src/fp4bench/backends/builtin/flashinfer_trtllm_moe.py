"""FlashInfer's TRT-LLM-gen fused MoE, NVFP4 x NVFP4 on SM100/103 (``trtllm_fp4_block_scale_routed_moe``).

``flashinfer-trtllm-moe-nvfp4`` calls the routed entry point (flashinfer/fused_moe/core.py,
0.7.2.post1 :6606, 0.7.4 :7269) with our routing as ``topk_ids=(ids int32, weights fp32)`` (the
unpacked pre-computed form: the weights are read at their own dtype) and the library's defaults
otherwise (``routing_method_type=0``, ``do_finalize=True``, SwiGLU, no biases, no per-token scale):

* activations: our NVFP4 bytes ``[T, H/2]`` and their *linear* e4m3 scales ``[T, H/16]``, declared
  ``hidden_states_scale_layout=SfLayout.layout_linear`` (the only layout the kernel reads);
* weights: the layout ``use_shuffled_weight=True, weight_layout=MajorK`` that the call builds its
  runner with, made per expert with FlashInfer's own functions as its test
  (tests/moe/trtllm_gen_fused_moe_utils.py ``FP4Moe.prepare_static_weights_for_kernel``) does: fc1
  (up rows first, as for every FlashInfer fused MoE: we swap our gate-first halves) row-permuted by
  ``_maybe_get_cached_w3_w1_permute_indices(cache, w, 128)`` (gated-activation interleave, then the
  128-row epilogue shuffle), its linear scales by the same with ``num_elts_per_sf=16`` and then
  ``nvfp4_block_scale_interleave`` (128x4); fc2 by ``get_w2_permute_indices_with_cache``;
* scales per expert: ``output1_scale_scalar = gs_2 / (gs_a * gs_w1)`` (GEMM1 dequantization times
  the fc2 input's encode scale: the kernel re-quantizes the SwiGLU output to NVFP4 with it),
  ``output1_scale_gate_scalar = 1 / (gs_a * gs_w1)``, ``output2_scale_scalar = 1 / (gs_2 * gs_w2)``
  (upstream: ``scale_c_fc1``, ``scale_gate_fc1``, ``scale_c_fc2`` of the same test), with ``gs_2``
  calibrated on this batch's routed intermediate as for ``flashinfer-cutlass-moe-nvfp4``; the reference
  is that row's but for GEMM1's epilogue, which works on fp32 accumulators (``intermediate="nvfp4-fused"``);
* 0.7.4's ``nvfp4_4over6=None`` where the release takes it (4over6 off whatever the environment).

Tactics: the call asks ``AutoTuner.get().choose_one("flashinfer::trtllm_fp4_block_scale_moe",
[runner], ...)`` for a ``[tile_n, config]`` pair (-1: the launcher's default). The library lists the
valid pairs (``MoERunner.get_valid_tactics``, flashinfer/fused_moe/backends/trtllm/sm100_runner.py:205,
a query of the C++ ``trtllm_get_valid_moe_configs``) but the entry point takes none, so an explicit
tactic row has the tuner answer that pair for this op (``_choice.pinned``) as a cached tuning result
would; the default row calls under ``autotune(False, skip_ops={op})`` (what a caller that never tuned
gets). ``flashinfer-trtllm-moe-nvfp4-tuned`` runs the call once under ``autotune(True)`` in
``prepare`` and records the tuner's pick, held to the explicit rows (``gate.picks``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fp4bench.backends.jit_cache import unbuilt_reason
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._choice import ChoiceLog, pinned
from fp4bench.backends.builtin._moe_api import swap_gate_up
from fp4bench.backends.builtin._moe_nvfp4 import nvfp4_moe
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import MoEProblem, Problem

DIST = "flashinfer-python"
#: the op the call asks the tuner for (flashinfer/fused_moe/core.py ``trtllm_fp4_block_scale_moe_op``)
TUNER_OP = "flashinfer::trtllm_fp4_block_scale_moe"
#: the TRT-LLM-gen fused-MoE cubins FlashInfer ships are the SM100 family's (module ``fused_moe_trtllm_sm100``,
#: flashinfer/jit/fused_moe.py ``gen_trtllm_gen_fused_moe_sm100_module``; SM107 builds its own module)
SUPPORTED_SMS = frozenset({100, 103})
#: the kernels tile expert weights in 128-row blocks (intermediate_size % 128, the docstring of 0.7.4);
#: the epilogue shuffle permutes 128-row tiles of fc2's H rows
DIM_ALIGN = 128
EPILOGUE_TILE_M = 128


@dataclass(frozen=True)
class TrtllmMoEApi:
    """The FlashInfer entry points of the TRT-LLM-gen fused-MoE rows (a fake replaces them in CPU tests).

    routed_moe: ``trtllm_fp4_block_scale_routed_moe``; autotune / tuner: ``flashinfer.autotune``,
    ``AutoTuner.get``; linear_sf_layout: ``SfLayout.layout_linear``; shuffle_fc1(w, sf) / shuffle_fc2(w, sf):
    one expert's ``[rows, K/2]`` bytes and linear ``[rows, K/16]`` uint8 scales in the kernel's layout
    (the library's permutations and ``nvfp4_block_scale_interleave``); valid_tactics(problem, hidden_states):
    the ``[tile_n, config]`` pairs ``MoERunner.get_valid_tactics`` lists for the call's runner.
    """

    version: str
    routed_moe: Callable[..., Any]
    autotune: Callable[..., Any]
    tuner: Callable[[], Any]
    linear_sf_layout: Any
    shuffle_fc1: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    shuffle_fc2: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]
    valid_tactics: Callable[[MoEProblem, torch.Tensor], list[Any]]

    def accepts(self, keyword: str) -> bool:
        return keyword in inspect.signature(self.routed_moe).parameters


def load_trtllm_moe() -> TrtllmMoEApi:
    """Import FlashInfer lazily (availability / prepare only) and collect the entry points."""
    import flashinfer
    from flashinfer.autotuner import AutoTuner
    from flashinfer.fused_moe import core

    return trtllm_moe_api(flashinfer, core, AutoTuner.get)


def trtllm_moe_api(flashinfer: Any, core: Any, get_tuner: Callable[[], Any]) -> TrtllmMoEApi:
    """The entry points from the modules ``flashinfer`` and ``flashinfer.fused_moe.core``."""
    cache: dict = {}

    def shuffle(w_perm: Callable[..., torch.Tensor]) -> Callable[[torch.Tensor, torch.Tensor], tuple]:
        def apply(w: torch.Tensor, sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            rows = w_perm(cache, w, EPILOGUE_TILE_M).to(w.device)
            sf_rows = w_perm(cache, sf, EPILOGUE_TILE_M, num_elts_per_sf=16).to(sf.device)
            sf_out = flashinfer.nvfp4_block_scale_interleave(sf[sf_rows].contiguous())
            return w[rows].contiguous(), sf_out.reshape(sf.shape)
        return apply

    def valid_tactics(p: MoEProblem, hidden_states: torch.Tensor) -> list[Any]:
        runner = core.TrtllmMoERunner(
            core.get_trtllm_moe_sm100_module().moe_op, top_k=p.top_k, num_local_experts=p.num_experts,
            dtype_act=core.DtypeTrtllmGen.E2m1, dtype_weights=core.DtypeTrtllmGen.E2m1,
            fp8_quantization_type=core.Fp8QuantizationType.NoneFp8, hidden_size=p.hidden,
            hidden_size_output=p.hidden, intermediate_size=p.inter, use_shuffled_weight=True,
            weight_layout=core.WeightLayout.MajorK, num_experts=p.num_experts)
        inputs = core.MoeRunnerInputs(output=None, routing_logits=None, topk_ids=None, expert_weights=None,
                                      hidden_states=hidden_states, hidden_states_scale=None,
                                      gemm1_lora_delta=None, per_token_scale=None).to_list()
        return list(runner.get_valid_tactics(inputs, None))

    return TrtllmMoEApi(
        version=str(flashinfer.__version__), routed_moe=flashinfer.fused_moe.trtllm_fp4_block_scale_routed_moe,
        autotune=flashinfer.autotune, tuner=get_tuner, linear_sf_layout=core.SfLayout.layout_linear,
        shuffle_fc1=shuffle(core._maybe_get_cached_w3_w1_permute_indices),
        shuffle_fc2=shuffle(core.get_w2_permute_indices_with_cache), valid_tactics=valid_tactics)


class FlashInferTrtllmMoE(Backend):
    """Explicit rows: the launcher's default (tactic -1) and each valid ``[tile_n, config]`` pair."""

    name = "flashinfer-trtllm-moe-nvfp4"
    api = "flashinfer.trtllm_fp4_block_scale_routed_moe (TRT-LLM-gen fused MoE, NVFP4), explicit tactics"
    kinds = frozenset({"moe"})
    act_format = "nvfp4"
    weight_format = "nvfp4"
    #: tuned under ``autotune(True)`` over the case before it is timed (the library-choice row)
    tuned: ClassVar[bool] = False

    def __init__(self, api: TrtllmMoEApi | None = None) -> None:
        self._lib = api

    def _library(self) -> TrtllmMoEApi:
        if self._lib is None:
            self._lib = load_trtllm_moe()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is None:
            return Availability.no(_gating.NO_CUDA)
        if info.sm not in SUPPORTED_SMS:
            return Availability.no(f"{self.name}: FlashInfer ships the TRT-LLM-gen fused-MoE kernels for "
                                   f"sm_{sorted(SUPPORTED_SMS)} only; this is {info.describe()}")
        failed = _gating.load_failure(DIST, self._library) if self._lib is None else None
        if failed is not None:
            return Availability.no(*failed)
        lib = self._library()
        return Availability.yes(lib.version, f"flashinfer {lib.version} on {info.describe()}")

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is None and isinstance(problem, MoEProblem):
            bad = [f"{n}={v}" for n, v in (("hidden", problem.hidden), ("inter", problem.inter)) if v % DIM_ALIGN]
            if bad:
                why = (f"{self.name} needs hidden and inter divisible by {DIM_ALIGN} (TRT-LLM-gen tiles expert "
                       f"weights in 128-row blocks); got {', '.join(bad)}")
        return why

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        info = _gating.device_info(device)
        if self.tuned or (info is not None and unbuilt_reason(self.name, (info.major, info.minor))):
            return [DEFAULT_TACTIC]  # listing would build the JIT module at collection; the case skips naming it
        assert isinstance(problem, MoEProblem)
        probe = torch.empty((problem.num_tokens, problem.hidden // 2), dtype=torch.uint8, device=device)
        # each a [tile_n, config] pair (a list, or the C++ query's array: read as ints either way)
        pairs = [[int(v) for v in t] for t in self._library().valid_tactics(problem, probe)]
        return [DEFAULT_TACTIC] + [Tactic(tuple(p), f"tile{p[0]}-cfg{p[1]}") for p in pairs]

    # -- prepare / run -----------------------------------------------------------------
    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        why = self.unsupported_reason(problem)
        if why is not None:
            raise ValueError(why)
        assert isinstance(problem, MoEProblem)
        lib = self._library()
        device = torch.device(device)
        call, gs_2 = self._marshal(lib, problem, operands, device)
        out = torch.empty((problem.num_tokens, problem.hidden), dtype=torch.bfloat16, device=device)
        prepared = Prepared(problem, out, {"call": call, "fc2_act_global_scale": gs_2,
                                           "log": ChoiceLog.on(lib.tuner())})
        if self.tuned:  # profiles this shape once; later prepares (copies, windows) hit the tuner's cache
            with lib.autotune(True):
                lib.routed_moe(output=out, **call)
        return prepared

    def _marshal(self, lib: TrtllmMoEApi, p: MoEProblem, ops: Operands, device: torch.device
                 ) -> tuple[dict[str, Any], torch.Tensor]:
        m = nvfp4_moe(ops, p.num_experts, device, self.name)
        qa, qw, qw2, gs_a, gs_w1, gs_w2, gs_2 = m.qa, m.qw, m.qw2, m.gs_a, m.gs_w1, m.gs_w2, m.gs_2
        e = p.num_experts
        w1 = swap_gate_up(qw.data, p.inter).to(device)
        s1 = swap_gate_up(qw.scales.view(torch.uint8), p.inter).to(device)
        fc1 = [lib.shuffle_fc1(w1[x].contiguous(), s1[x].contiguous()) for x in range(e)]
        w2, s2 = qw2.data.to(device), qw2.scales.view(torch.uint8).to(device)
        fc2 = [lib.shuffle_fc2(w2[x].contiguous(), s2[x].contiguous()) for x in range(e)]
        call = {
            "topk_ids": (ops.topk_ids.to(device=device, dtype=torch.int32).contiguous(),
                         ops.topk_weights.to(device=device, dtype=torch.float32).contiguous()),
            "routing_bias": None,
            "hidden_states": qa.data.to(device).contiguous(),
            "hidden_states_scale": qa.scales.view(torch.uint8).to(device).contiguous().view(torch.float8_e4m3fn),
            "gemm1_weights": torch.stack([w for w, _ in fc1]),
            "gemm1_weights_scale": torch.stack([s for _, s in fc1]).view(torch.float8_e4m3fn),
            "gemm1_bias": None, "gemm1_alpha": None, "gemm1_beta": None, "gemm1_clamp_limit": None,
            "gemm2_weights": torch.stack([w for w, _ in fc2]),
            "gemm2_weights_scale": torch.stack([s for _, s in fc2]).view(torch.float8_e4m3fn),
            "gemm2_bias": None,
            "output1_scale_scalar": (gs_2 / (gs_a * gs_w1)).contiguous(),
            "output1_scale_gate_scalar": (1.0 / (gs_a * gs_w1)).contiguous(),
            "output2_scale_scalar": (1.0 / (gs_2 * gs_w2)).contiguous(),
            "num_experts": e, "top_k": p.top_k, "n_group": None, "topk_group": None,
            "intermediate_size": p.inter, "local_expert_offset": 0, "local_num_experts": e,
            "routed_scaling_factor": None,
            "hidden_states_scale_layout": lib.linear_sf_layout,
        }
        if lib.accepts("nvfp4_4over6"):
            call["nvfp4_4over6"] = None  # 0.7.4: 4over6 off, environment ignored
        return call, gs_2

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        lib = self._library()
        call = dict(output=prepared.out, **prepared.args["call"])
        if self.tuned:
            lib.routed_moe(**call)
        elif tactic.value is None:  # what a caller that never tuned gets, whatever another row cached
            with lib.autotune(False, skip_ops={TUNER_OP}):
                lib.routed_moe(**call)
        else:
            with pinned(lib.tuner(), TUNER_OP, list(tactic.value)):
                lib.routed_moe(**call)
        return prepared.out

    def reference_options(self, prepared: Prepared) -> dict[str, Any]:
        """GEMM1's epilogue applies SwiGLU to its fp32 accumulators and re-quantizes to NVFP4 with the
        calibrated fc2 encode scale (no bf16 store of gate and up, unlike the CUTLASS fused MoE)."""
        return {"intermediate": "nvfp4-fused", "fc2_act_global_scale": prepared.args["fc2_act_global_scale"]}

    def library_choice(self, prepared: Prepared) -> dict[str, Any] | None:
        if not self.tuned:
            return None
        _, tactic = prepared.args["log"].answer(TUNER_OP, self.name)
        return {"backend": "trtllm-gen", "tactic": tactic, "tuned": True, "compare_with": FlashInferTrtllmMoE.name}


class FlashInferTrtllmMoETuned(FlashInferTrtllmMoE):
    """The library-choice row: the call after ``autotune(True)`` over the case, the tuner's pick."""

    name = "flashinfer-trtllm-moe-nvfp4-tuned"
    api = "flashinfer.trtllm_fp4_block_scale_routed_moe (NVFP4) after autotune(True): the tuner's [tile_n, config]"
    tuned = True
    choice_row = True


BACKENDS = [FlashInferTrtllmMoE(), FlashInferTrtllmMoETuned()]
