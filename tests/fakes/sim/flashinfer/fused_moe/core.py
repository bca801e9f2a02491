"""Fake ``flashinfer.fused_moe.core``: the module's ``MoERunner`` (tactic counts, occupancy)."""

import enum
from types import SimpleNamespace

from fakes import flashinfer_releases as releases
from fp4sim_world import MOE


class ActivationType(enum.IntEnum):
    Swiglu = 3


def get_cutlass_fused_moe_module(backend: str = "100", use_fast_build: bool = False) -> SimpleNamespace:
    def moe_runner(**kwargs) -> SimpleNamespace:
        releases.bind(MOE.release.moe_runner, "MoERunner", kwargs)
        return SimpleNamespace(fused_moe_runner=MOE.runner())

    return SimpleNamespace(MoERunner=moe_runner)
