"""Fake ``flashinfer.fused_moe.core``: the CUTLASS module's ``MoERunner`` (tactic counts, occupancy) and
the names the TRT-LLM-gen rows use (weight permutations, ``TrtllmMoERunner``, enums; ``fakes.flashinfer_trtllm_moe``)."""

import enum
from types import SimpleNamespace

from fakes import flashinfer_releases as releases
from fakes.flashinfer_trtllm_moe import modules
from fp4sim_world import MOE, TRTLLM_MOE


class ActivationType(enum.IntEnum):
    Swiglu = 3


def get_cutlass_fused_moe_module(backend: str = "100", use_fast_build: bool = False) -> SimpleNamespace:
    def moe_runner(**kwargs) -> SimpleNamespace:
        releases.bind(MOE.release.moe_runner, "MoERunner", kwargs)
        return SimpleNamespace(fused_moe_runner=MOE.runner())

    return SimpleNamespace(MoERunner=moe_runner)


_TRTLLM = modules(TRTLLM_MOE)[1]
SfLayout = _TRTLLM.SfLayout
DtypeTrtllmGen = _TRTLLM.DtypeTrtllmGen
Fp8QuantizationType = _TRTLLM.Fp8QuantizationType
WeightLayout = _TRTLLM.WeightLayout
MoeRunnerInputs = _TRTLLM.MoeRunnerInputs
TrtllmMoERunner = _TRTLLM.TrtllmMoERunner
get_trtllm_moe_sm100_module = _TRTLLM.get_trtllm_moe_sm100_module
_maybe_get_cached_w3_w1_permute_indices = _TRTLLM._maybe_get_cached_w3_w1_permute_indices
get_w2_permute_indices_with_cache = _TRTLLM.get_w2_permute_indices_with_cache
