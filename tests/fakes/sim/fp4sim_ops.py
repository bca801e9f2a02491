"""The torch operators of the simulation, registered once per process.

torch keeps an operator registration for the life of the process: a second ``aten`` CPU kernel
for ``_scaled_mm.out`` or a second ``sgl_kernel`` namespace is refused. Several simulated runs
share one process when ``pytest bench`` runs in-process (``fp4sim_session``), each with its own
``fp4sim_world`` (its GPU, fault and library chosen by its environment). So the kernels are
registered here, once, and each call goes to the ``fp4sim_world`` module of the run in progress;
the in-process runner keeps this module across runs and forgets ``fp4sim_world``.
"""

from __future__ import annotations

import sys

import torch

_aten: torch.library.Library | None = None
_sgl: torch.library.Library | None = None


def _world():
    return sys.modules["fp4sim_world"]


def _scaled_mm_out(a, b, scale_a, scale_b, *args, out, **kwargs):
    return _world().TORCH.scaled_mm_out(a, b, scale_a, scale_b, out)


def _scaled_mm_v2_out(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, *args, out, **kwargs):
    return _world().TORCH.scaled_mm_v2_out(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, out)


def register_aten() -> None:
    """torch's FP4 ``_scaled_mm`` / ``_scaled_mm_v2`` ``out=`` CPU kernels: the world's ``TORCH`` fake."""
    global _aten
    if _aten is None:
        _aten = torch.library.Library("aten", "IMPL")
        _aten.impl("_scaled_mm.out", _scaled_mm_out, "CPU")
        _aten.impl("_scaled_mm_v2.out", _scaled_mm_v2_out, "CPU")


def _sgl_mm(*args):
    return _world().SGL.scaled_fp4_mm(*args)


def _sgl_group_mm(*args):
    return _world().SGL.fp4_group_mm(*args)


def register_sgl_kernel() -> None:
    """``torch.ops.sgl_kernel`` with the op schemas of sgl-kernel's ``common_extension.cc``,
    backed by the world's ``SGL`` fake."""
    global _sgl
    if _sgl is None:
        _sgl = torch.library.Library("sgl_kernel", "DEF")
        _sgl.define("cutlass_scaled_fp4_mm(Tensor! out, Tensor a, Tensor b, Tensor block_scale_a, "
                    "Tensor block_scale_b, Tensor alpha) -> ()")
        _sgl.define("cutlass_fp4_group_mm(Tensor! output, Tensor a, Tensor b, Tensor a_blockscale, "
                    "Tensor b_blockscales, Tensor alphas, Tensor ab_strides, Tensor c_strides, "
                    "Tensor problem_sizes, Tensor expert_offsets, Tensor sf_offsets) -> ()")
        _sgl.impl("cutlass_scaled_fp4_mm", _sgl_mm, "CPU")
        _sgl.impl("cutlass_fp4_group_mm", _sgl_group_mm, "CPU")
