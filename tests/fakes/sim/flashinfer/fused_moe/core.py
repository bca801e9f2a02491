"""Fake ``flashinfer.fused_moe.core``: the module's ``MoERunner`` (tactic counts, occupancy)."""

import enum
from types import SimpleNamespace

from fp4sim_world import MOE


class ActivationType(enum.IntEnum):
    Swiglu = 3


def get_cutlass_fused_moe_module(arch: str) -> SimpleNamespace:
    def moe_runner(**kwargs) -> SimpleNamespace:
        return SimpleNamespace(fused_moe_runner=MOE.runner())

    return SimpleNamespace(MoERunner=moe_runner)
