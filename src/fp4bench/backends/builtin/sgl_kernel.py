"""sgl_kernel 0.3.21 NVFP4 GEMMs: dense ``cutlass_scaled_fp4_mm`` and grouped ``cutlass_fp4_group_mm``.

Two hazards shape this module:

* The wheel is built against the torch 2.9.1 C++ ABI and links ``libcuda.so.1``: under another
  torch it fails to import (missing symbols), and a bad native import may take the process down.
  ``availability`` therefore imports it in a child process first (cached), and only then here.
* Neither op has an architecture guard that saves an SM90: the dense op picks ``sm == 120 ?
  sm120 : sm100`` and its sm_90 cubin is a trap stub. We gate on SM100/120 before any call.
  SM103 (B300) would be routed to the SM100 kernels, but the wheel carries arch-specific
  ``sm_100a``/``sm_120a`` cubins and no ``sm_103`` one (``a`` targets are not forward
  compatible), so the launch would fail: SM103 is reported unsupported with that reason.

The timed call is the registered op (``torch.ops.sgl_kernel.<op>.default``), i.e. the public
Python wrapper minus its per-call ``torch.empty`` of the output, so that ``run`` allocates
nothing itself (the C++ side still allocates its CUTLASS workspace on every call: library
behaviour, part of what is measured). There is no tactic argument: the tile is hard-coded per
M (sgl-kernel csrc/gemm/nvfp4_scaled_mm_kernels.cu) and the single Tactic's label names it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from fp4bench import formats
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._marshal import fp4_pair, nvfp4_alpha
from fp4bench.backends.alignment import CUTLASS_FP4_SM100
from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem, Problem

SUPPORTED_SMS = frozenset({100, 120})
#: SMs the library would route to kernels the wheel has no cubin for
NO_CUBIN = {103: "sgl_kernel's wheel has sm_100a/sm_120a cubins and no sm_103 one (B300 would fail at launch)"}
DISTS = ("sgl-kernel", "sglang-kernel")
#: torch release each sgl_kernel wheel was built for (its README; no Requires-Dist in the wheel).
BUILT_FOR_TORCH = {"0.3.21": "2.9.1"}
MAX_EXPERTS = 1024


def dense_tile(m: int, sm: int) -> str:
    """The tile sgl_kernel 0.3.21 hard-codes for a bf16 dense FP4 GEMM with ``m`` rows."""
    if sm == 120:
        return "128x128x128" if max(16, 1 << max(m - 1, 0).bit_length()) <= 256 else "256x128x128"
    if m <= 128:
        return "128x256x256-1sm-c1x4"
    if m <= 256:
        return "256x256x256-2sm-c2x4"
    return "256x256x256-2sm-c4x4"


def group_tile(sm: int) -> str:
    """The single tile of ``cutlass_fp4_group_mm`` (bf16 out)."""
    return "128x128x128-pingpong" if sm == 120 else "128x128x128-1sm-c1x1"


# -- library access --------------------------------------------------------------------------

@dataclass(frozen=True)
class SglKernelAPI:
    """The registered ops, with their schemas (a fake replaces them in CPU tests).

    scaled_fp4_mm(out, a, b, block_scale_a, block_scale_b, alpha)
    fp4_group_mm(output, a, b, a_blockscale, b_blockscale, alphas, ab_strides, c_strides,
                 problem_sizes, expert_offsets, sf_offsets)     # offsets: [E], i.e. [:-1]
    """

    version: str
    scaled_fp4_mm: Callable[..., None] | None  # None: the installed package has no such op
    fp4_group_mm: Callable[..., None] | None
    #: "sgl-kernel 0.3.21": the distribution that provides ``sgl_kernel`` (for skip reasons)
    dist: str = "sgl_kernel"


def _import_reason(version: str | None, error: str) -> str:
    built = BUILT_FOR_TORCH.get(version or "")
    tail = (f" (built for torch {built}: run the sgl rows in the sglang runner environment, "
            f"docs/sglang-runner.md)") if built else ""
    return f"sgl_kernel {version or '?'} does not import under torch {torch.__version__}: {error}{tail}"


def _installed_dist() -> str:
    """The distribution that provides ``sgl_kernel``, with its version ("sglang-kernel 0.4.10")."""
    for name in DISTS:
        version = _gating.dist_version(name)
        if version is not None:
            return f"{name} {version}"
    return "sgl_kernel (no distribution metadata)"


def _op(ops: object, name: str) -> Callable[..., None] | None:
    """``torch.ops.sgl_kernel.<name>.default``, or None when the package registers no such op
    (sglang-kernel 0.4.x, sgl-kernel's successor, has neither FP4 GEMM op)."""
    try:
        return getattr(ops, name).default
    except AttributeError:
        return None


def load_sgl_kernel() -> SglKernelAPI:
    """Import sgl_kernel in-process (only after ``_gating.probe_import`` said it is safe)."""
    mod = importlib.import_module("sgl_kernel")
    ops = torch.ops.sgl_kernel
    version = getattr(mod, "__version__", None) or _gating.dist_version(*DISTS) or "?"
    return SglKernelAPI(
        version=str(version),
        scaled_fp4_mm=_op(ops, "cutlass_scaled_fp4_mm"),
        fp4_group_mm=_op(ops, "cutlass_fp4_group_mm"),
        dist=_installed_dist(),
    )


class _SglKernelBase(Backend):
    act_format = "nvfp4"
    weight_format = "nvfp4"
    #: the ``SglKernelAPI`` field this backend calls, and the registered op behind it
    op: str
    op_name: str

    def __init__(self, api: SglKernelAPI | None = None) -> None:
        self._lib: SglKernelAPI | None = api  # ``Backend.api`` is the description string

    def _library(self) -> SglKernelAPI:
        if self._lib is None:
            self._lib = load_sgl_kernel()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is not None and info.sm in NO_CUBIN:
            return Availability.no(f"{info.describe()}: {NO_CUBIN[info.sm]}")
        reason = _gating.arch_reason(info, SUPPORTED_SMS)
        if reason:
            return Availability.no(reason)
        if self._lib is None:
            version = _gating.dist_version(*DISTS)
            if version is None and not _gating.module_installed("sgl_kernel"):
                return Availability.no("sgl_kernel is not installed")
            probe = _gating.probe_import("sgl_kernel")
            if not probe.ok:
                return Availability.no(_import_reason(version, probe.error), version)
            try:
                self._library()
            except Exception as exc:  # the child imported it; report rather than crash if we cannot
                return Availability.no(_import_reason(version, f"{type(exc).__name__}: {exc}".splitlines()[0]),
                                       version)
        lib = self._library()
        if getattr(lib, self.op) is None:
            return Availability.no(f"{lib.dist} has no {self.op_name} (it imports; this backend calls "
                                   f"torch.ops.sgl_kernel.{self.op_name})", lib.version)
        return Availability.yes(lib.version)

    @staticmethod
    def _sm(device: torch.device) -> int | None:
        info = _gating.device_info(device)
        return None if info is None else info.sm

    def _check(self, problem: Problem) -> None:
        why = self.unsupported_reason(problem)
        if why:
            raise ValueError(why)


class SglKernelDense(_SglKernelBase):
    """``sgl-kernel``: ``cutlass_scaled_fp4_mm``, NVFP4 x NVFP4 -> bf16, TN."""

    name = "sgl-kernel"
    kinds = frozenset({"dense"})
    op, op_name = "scaled_fp4_mm", "cutlass_scaled_fp4_mm"
    alignment = CUTLASS_FP4_SM100  # "Expected k/n to be divisible by 32" (nvfp4_scaled_mm_kernels.cu)
    api = "sgl_kernel cutlass_scaled_fp4_mm (registered op, output preallocated)"

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        assert isinstance(problem, GemmProblem)
        sm = self._sm(device)
        label = "auto" if sm is None else f"auto:{dense_tile(problem.m, sm)}"
        return [Tactic(value=None, label=label, default=True)]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        self._check(problem)
        assert isinstance(problem, GemmProblem)
        qa, qw = fp4_pair(operands, formats.NVFP4, self.name)
        self._library()
        args = {
            "a": qa.data.to(device).contiguous(),                          # [M, K/2] uint8
            "b": qw.data.to(device).contiguous(),                          # [N, K/2] uint8 (TN)
            "scale_a": formats.swizzle_128x4(qa.scales).to(device),       # exactly [pad128(M), pad4(K/16)]
            "scale_b": formats.swizzle_128x4(qw.scales).to(device),       # exactly [pad128(N), pad4(K/16)]
            "alpha": nvfp4_alpha(qa.global_scale, qw.global_scale).reshape(1).to(device),
        }
        out = torch.empty((problem.m, problem.n), dtype=torch.bfloat16, device=device)
        return Prepared(problem, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a = prepared.args
        self._library().scaled_fp4_mm(prepared.out, a["a"], a["b"], a["scale_a"], a["scale_b"], a["alpha"])
        return prepared.out


class SglKernelGroup(_SglKernelBase):
    """``sgl-kernel-group``: ``cutlass_fp4_group_mm``, per-expert NVFP4 GEMMs -> bf16."""

    name = "sgl-kernel-group"
    op, op_name = "fp4_group_mm", "cutlass_fp4_group_mm"
    kinds = frozenset({"grouped"})
    api = "sgl_kernel cutlass_fp4_group_mm (registered op, output preallocated)"

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why:
            return why
        assert isinstance(problem, GroupedProblem)
        if problem.num_experts > MAX_EXPERTS:
            return f"{self.name}: at most {MAX_EXPERTS} experts, got {problem.num_experts}"
        # The op locates expert e's scales at sf_offsets[e] * K/16 and e * N * K/16 bytes, i.e.
        # without the 128x4 padding of columns (pad4(K/16)) and of weight rows (pad128(N)): its
        # addressing matches the padded layout only when K % 64 == 0 and N % 128 == 0
        # (sgl-kernel csrc/moe/nvfp4_blockwise_moe.cu, __get_group_gemm_starts).
        if problem.k % 64 or problem.n % 128:
            return (f"{self.name}: needs K % 64 == 0 and N % 128 == 0 (the op addresses per-expert "
                    f"scale blocks without 128x4 padding), got N={problem.n} K={problem.k}")
        return None

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        sm = self._sm(device)
        return [Tactic(value=None, label="auto" if sm is None else f"auto:{group_tile(sm)}", default=True)]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        self._check(problem)
        assert isinstance(problem, GroupedProblem)
        qa, qw = fp4_pair(operands, formats.NVFP4, self.name)
        self._library()
        e, n, k = problem.num_experts, problem.n, problem.k
        counts = problem.tokens_per_expert
        a_sf, sf_offsets = formats.swizzle_128x4_grouped(qa.scales, counts)   # [sum pad128(m_e), pad4(K/16)]
        b_sf = formats.swizzle_128x4(qw.scales)                               # [E, pad128(N), pad4(K/16)]
        m_e = torch.tensor(counts, dtype=torch.int32)
        problem_sizes = torch.stack((m_e, torch.full_like(m_e, n), torch.full_like(m_e, k)), dim=1)
        expert_offsets = torch.cat((torch.zeros(1, dtype=torch.int32), torch.cumsum(m_e, 0).to(torch.int32)))
        params = {
            "ab_strides": torch.full((e,), k, dtype=torch.int64, device=device),
            "c_strides": torch.full((e,), n, dtype=torch.int64, device=device),
            "problem_sizes": problem_sizes.contiguous().to(device),          # int32 [E, 3]
            "expert_offsets": expert_offsets.to(device),                     # int32 [E+1]
            "blockscale_offsets": sf_offsets.to(torch.int32).to(device),     # int32 [E+1]
        }
        alphas = nvfp4_alpha(qa.global_scale, qw.global_scale).reshape(-1)
        if alphas.numel() == 1:  # one weight global scale for all experts
            alphas = alphas.expand(e)
        args = {
            "a": qa.data.to(device).contiguous(),                            # [M_total, K/2] uint8
            "b": qw.data.to(device).contiguous(),                            # [E, N, K/2] uint8
            "a_blockscale": a_sf.to(device),
            "b_blockscale": b_sf.to(device),
            "alphas": alphas.contiguous().to(device),                        # fp32 [E]
            "params": params,
            # The op takes E offsets (problem_sizes.size(0) == expert_offsets.size(0)): [:-1] views.
            "expert_offsets_op": params["expert_offsets"][:-1],
            "sf_offsets_op": params["blockscale_offsets"][:-1],
        }
        out = torch.empty((problem.total_rows, n), dtype=torch.bfloat16, device=device)
        return Prepared(problem, out, args)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        a, p = prepared.args, prepared.args["params"]
        self._library().fp4_group_mm(prepared.out, a["a"], a["b"], a["a_blockscale"], a["b_blockscale"],
                                     a["alphas"], p["ab_strides"], p["c_strides"], p["problem_sizes"],
                                     a["expert_offsets_op"], a["sf_offsets_op"])
        return prepared.out


BACKENDS = [SglKernelDense(), SglKernelGroup()]
