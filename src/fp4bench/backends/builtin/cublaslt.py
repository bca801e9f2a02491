"""cuBLASLt block-scaled FP4 GEMMs through torch: ``torch._scaled_mm`` (v1) and ``F.scaled_mm`` (v2).

* ``cublaslt`` (v1, NVFP4): ``a`` ``[M, K/2]`` fp4x2, ``b = w.view(fp4x2).t()`` (TN), 128x4
  swizzled e4m3 block scales (flat). v1 has no input for the global scales, so the output is
  multiplied by ``alpha = 1/(gs_a*gs_w)`` afterwards: that ``out.mul_(alpha)`` is a second kernel
  and part of the timed op (torchao and vLLM do the same), and it rounds the output to bf16
  twice (before and after the multiply).
* ``cublaslt-v2`` (NVFP4): two-level decode scales ``[swizzled block scales, 1/gs]`` with recipes
  ``[BlockWise1x16, TensorWise]`` and swizzles ``[SWIZZLE_32_4_4, NO_SWIZZLE]``; cuBLASLt takes the
  product of the two global decode scales as its alpha, one output rounding. (torch forms that
  product with a tensor multiply on every call, ``ScaledBlas.cpp`` ``_scaled_nvfp4_nvfp4``: a tiny
  extra kernel inside the timed op.)
* ``cublaslt-v2-mxfp4``: ``BlockWise1x32`` e8m0 scales, single level. torch routes it to
  FBGEMM/MSLK ``f4f4bf16``, gated ``major == 10`` (B200/B300) by torch itself.

The v2 call is the ``out=`` overload ``torch.ops.aten._scaled_mm_v2.out`` (what ``F.scaled_mm``
calls, minus its output allocation); a torch without that overload falls back to ``F.scaled_mm``
plus a copy into ``out`` (said in ``availability``'s reason). Hazard: never ``.float()`` a CUDA
fp4x2 tensor (device assert in c10/core/DynamicCast.h, sticky); nothing here converts one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp4bench import formats
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._marshal import decode_scale, fp4_pair, nvfp4_alpha
from fp4bench.backends.alignment import CUBLASLT_FP4
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic, TacticUnsupported
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, Problem

NVFP4_SMS = frozenset({100, 103, 110, 120, 121})
UNVERIFIED_SMS = frozenset({110})  # third-party report only, not confirmed
MXFP4_SMS = frozenset({100, 103})  # torch: "MXFP4 scaling only supported in CUDA for B200/B300" (major 10)
MIN_CUDA = (12, 8)


def _fp4_dtype() -> torch.dtype:
    return torch.float4_e2m1fn_x2


def _enum_value(enum: str, member: str) -> int:
    """Integer value of ``F.ScalingType`` / ``F.SwizzleType`` members (what ``_scaled_mm_v2`` takes)."""
    import torch.nn.functional as F

    return int(getattr(getattr(F, enum), member).value)


# -- library access --------------------------------------------------------------------------

@dataclass(frozen=True)
class TorchScaledMMAPI:
    """The two torch entry points (a fake replaces them in CPU tests).

    scaled_mm_out(a, b, scale_a, scale_b, out): ``torch._scaled_mm(..., out_dtype=out.dtype, out=out)``.
    scaled_mm_v2_out(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, out):
        ``torch.ops.aten._scaled_mm_v2.out`` with lists of scales and integer enums.
    """

    version: str
    scaled_mm_out: Callable[..., torch.Tensor]
    scaled_mm_v2_out: Callable[..., torch.Tensor]
    v2_copies: bool = False  # True when the fallback (F.scaled_mm + copy) is in use


def load_torch_scaled_mm() -> TorchScaledMMAPI:
    """Bind the installed torch's scaled-mm entry points."""

    def v1(a, b, scale_a, scale_b, out):  # noqa: ANN001 - mirrors torch's signature
        return torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=out.dtype, out=out)

    overload = getattr(getattr(torch.ops.aten, "_scaled_mm_v2", None), "out", None)
    if overload is not None:
        def v2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, out):  # noqa: ANN001
            return overload(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b,
                            None, out.dtype, [], False, out=out)
    else:
        import torch.nn.functional as F

        def v2(a, b, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, out):  # noqa: ANN001
            res = F.scaled_mm(a, b, scale_a, [F.ScalingType(r) for r in recipe_a], scale_b,
                              [F.ScalingType(r) for r in recipe_b], [F.SwizzleType(s) for s in swizzle_a],
                              [F.SwizzleType(s) for s in swizzle_b], output_dtype=out.dtype)
            return out.copy_(res)
    return TorchScaledMMAPI(torch.__version__, v1, v2, v2_copies=overload is None)


def _cuda_version() -> tuple[int, int] | None:
    v = torch.version.cuda
    if not v:
        return None
    parts = v.split(".")
    return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0


class _CublasLtBase(Backend):
    kinds = frozenset({"dense"})
    alignment = CUBLASLT_FP4  # K % 32, N % 16: checks on the packed FP4 dims
    supported_sms: frozenset[int] = NVFP4_SMS
    needs_v2 = False

    def __init__(self, api: TorchScaledMMAPI | None = None) -> None:
        self._lib: TorchScaledMMAPI | None = api  # ``Backend.api`` is the description string

    def _library(self) -> TorchScaledMMAPI:
        if self._lib is None:
            self._lib = load_torch_scaled_mm()
        return self._lib

    def _torch_reason(self) -> str | None:
        """Why the installed torch cannot run this (API and CUDA build), None when it can."""
        ver = torch.__version__
        cuda = _cuda_version()
        if cuda is None:
            return f"torch {ver} is not a CUDA build"
        if cuda < MIN_CUDA:
            return f"torch {ver} is built with CUDA {torch.version.cuda}; FP4 scaled mm needs CUDA >= 12.8"
        if not hasattr(torch, "float4_e2m1fn_x2") or not hasattr(torch, "_scaled_mm"):
            return f"torch {ver} has no float4_e2m1fn_x2 / FP4 _scaled_mm (needs torch >= 2.8)"
        if self.needs_v2:
            import torch.nn.functional as F

            if not hasattr(F, "scaled_mm") or not hasattr(getattr(F, "ScalingType", None), "BlockWise1x16"):
                return f"torch {ver} has no F.scaled_mm with block-wise recipes (needs torch >= 2.10)"
        return None

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        reason = _gating.arch_reason(info, self.supported_sms)
        if reason:
            return Availability.no(reason)
        if self._lib is None:
            why = self._torch_reason()
            if why:
                return Availability.no(why, torch.__version__)
        lib = self._library()
        notes = []
        if info.sm in UNVERIFIED_SMS:
            notes.append(f"{info.describe()}: FP4 cuBLASLt support unverified")
        if self.needs_v2 and lib.v2_copies:
            notes.append("no _scaled_mm_v2.out in this torch: F.scaled_mm result copied into out (timed)")
        return Availability.yes(lib.version, "available" + (f" ({'; '.join(notes)})" if notes else ""))

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        return [DEFAULT_TACTIC]  # cuBLASLt's heuristic picks the algorithm; torch exposes no choice

    def _check(self, problem: Problem) -> GemmProblem:
        why = self.unsupported_reason(problem)
        if why:
            raise ValueError(why)
        assert isinstance(problem, GemmProblem)
        return problem

    @staticmethod
    def _fp4(data: torch.Tensor, device: torch.device) -> torch.Tensor:
        """uint8 packed bytes -> fp4x2 view on ``device`` (a view: never a value conversion)."""
        return data.to(device).contiguous().view(_fp4_dtype())


class CublasLtV1(_CublasLtBase):
    """``cublaslt``: ``torch._scaled_mm`` NVFP4, output times alpha afterwards (timed)."""

    name = "cublaslt"
    act_format = "nvfp4"
    weight_format = "nvfp4"
    api = "torch._scaled_mm NVFP4 (cuBLASLt) + out.mul_(alpha) (second kernel, timed)"

    #: the kernel's bf16 output, then ``out.mul_(alpha)`` rounded to bf16 again
    output_roundings = 2

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        p = self._check(problem)
        qa, qw = fp4_pair(operands, formats.NVFP4, self.name)
        self._library()
        args = {
            "a": self._fp4(qa.data, device),                                  # [M, K/2]
            "b": self._fp4(qw.data, device).t(),                              # [K/2, N] column-major
            "scale_a": formats.swizzle_128x4(qa.scales).reshape(-1).to(device),  # pad128(M)*pad4(K/16)
            "scale_b": formats.swizzle_128x4(qw.scales).reshape(-1).to(device),
            "alpha": nvfp4_alpha(qa.global_scale, qw.global_scale).reshape(()).to(device),  # 0-d fp32
        }
        out = torch.empty((p.m, p.n), dtype=torch.bfloat16, device=device)
        return Prepared(p, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        self._library().scaled_mm_out(a["a"], a["b"], a["scale_a"], a["scale_b"], prepared.out)
        prepared.out.mul_(a["alpha"])  # v1 has no global-scale input
        return prepared.out


class CublasLtV2(_CublasLtBase):
    """``cublaslt-v2``: ``F.scaled_mm`` NVFP4 with two-level decode scales, alpha inside cuBLASLt."""

    name = "cublaslt-v2"
    act_format = "nvfp4"
    weight_format = "nvfp4"
    needs_v2 = True
    api = "F.scaled_mm NVFP4 [BlockWise1x16 + TensorWise] (cuBLASLt, via _scaled_mm_v2.out)"

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        p = self._check(problem)
        qa, qw = fp4_pair(operands, formats.NVFP4, self.name)
        self._library()
        recipe = [_enum_value("ScalingType", "BlockWise1x16"), _enum_value("ScalingType", "TensorWise")]
        swizzle = [_enum_value("SwizzleType", "SWIZZLE_32_4_4"), _enum_value("SwizzleType", "NO_SWIZZLE")]
        args = {
            "a": self._fp4(qa.data, device),
            "b": self._fp4(qw.data, device).t(),
            "scale_a": [formats.swizzle_128x4(qa.scales).reshape(-1).to(device),
                        decode_scale(qa.global_scale).reshape(()).to(device)],
            "scale_b": [formats.swizzle_128x4(qw.scales).reshape(-1).to(device),
                        decode_scale(qw.global_scale).reshape(()).to(device)],
            "recipe": recipe,
            "swizzle": swizzle,
        }
        out = torch.empty((p.m, p.n), dtype=torch.bfloat16, device=device)
        return Prepared(p, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        self._library().scaled_mm_v2_out(a["a"], a["b"], a["scale_a"], a["recipe"], a["swizzle"],
                                         a["scale_b"], a["recipe"], a["swizzle"], prepared.out)
        return prepared.out


class CublasLtV2MXFP4(_CublasLtBase):
    """``cublaslt-v2-mxfp4``: ``F.scaled_mm`` MXFP4 (``BlockWise1x32``, e8m0), B200/B300 only."""

    name = "cublaslt-v2-mxfp4"
    act_format = "mxfp4"
    weight_format = "mxfp4"
    supported_sms = MXFP4_SMS
    needs_v2 = True
    api = "F.scaled_mm MXFP4 [BlockWise1x32] (torch routes to FBGEMM/MSLK f4f4bf16, via _scaled_mm_v2.out)"

    def _torch_reason(self) -> str | None:
        why = super()._torch_reason()
        if why is None and not hasattr(torch, "float8_e8m0fnu"):
            why = f"torch {torch.__version__} has no float8_e8m0fnu"
        return why

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        p = self._check(problem)
        qa, qw = fp4_pair(operands, formats.MXFP4, self.name)
        self._library()
        e8m0 = torch.float8_e8m0fnu
        args = {
            "a": self._fp4(qa.data, device),
            "b": self._fp4(qw.data, device).t(),
            "scale_a": [formats.swizzle_128x4(qa.scales).reshape(-1).view(e8m0).to(device)],
            "scale_b": [formats.swizzle_128x4(qw.scales).reshape(-1).view(e8m0).to(device)],
            "recipe": [_enum_value("ScalingType", "BlockWise1x32")],
            "swizzle": [_enum_value("SwizzleType", "SWIZZLE_32_4_4")],
        }
        out = torch.empty((p.m, p.n), dtype=torch.bfloat16, device=device)
        return Prepared(p, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        try:
            self._library().scaled_mm_v2_out(a["a"], a["b"], a["scale_a"], a["recipe"], a["swizzle"],
                                             a["scale_b"], a["recipe"], a["swizzle"], prepared.out)
        except NotImplementedError as exc:  # e.g. a torch built without MSLK/FBGEMM GenAI
            raise TacticUnsupported(f"{self.name}: {str(exc).strip().splitlines()[0]}") from exc
        return prepared.out


BACKENDS = [CublasLtV1(), CublasLtV2(), CublasLtV2MXFP4()]
