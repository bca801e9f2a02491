"""Backend shape rules: which (N, K) a library accepts, and what happens to the rest.

A backend declares an ``AlignmentPolicy`` as ``alignment`` (misaligned problems are skipped
with the rule's name, never run) or as ``padding`` (the problem is padded as the serving stack
that uses the kernel pads it; the case records how). No shape is ever dropped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fp4bench.workload.problems import MoEProblem, Problem

@dataclass(frozen=True)
class AlignmentPolicy:
    """A backend's shape rule: N % n_multiple and K % k_multiple, and what to do otherwise.

    ``action="skip"``: misaligned problems become ``Skipped`` with the reason (the backend cannot
    run them as-is). ``action="pad"``: round the dimension up, as the serving ``stack`` does.
    For gate_up GEMMs (N = 2·I) padding rounds I, so N becomes 2·roundup(I), matching stacks that
    pad the intermediate before fusing gate and up.
    """

    name: str
    k_multiple: int
    n_multiple: int
    action: str = "skip"
    stack: str = ""

    def __post_init__(self) -> None:
        for f in ("k_multiple", "n_multiple"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"AlignmentPolicy.{f} must be a positive int, got {v!r}")
        if self.action not in ("skip", "pad"):
            raise ValueError(f"AlignmentPolicy.action must be 'skip' or 'pad', got {self.action!r}")
        if self.action == "pad" and not self.stack:
            raise ValueError("a padding policy must name the serving stack that pads this way")


#: torch._scaled_mm / cuBLASLt FP4
CUBLASLT_FP4 = AlignmentPolicy("torch cuBLASLt FP4", k_multiple=32, n_multiple=16)
#: FlashInfer mm_fp4 CUTLASS and sgl_kernel cutlass_scaled_fp4_mm on SM100/103
CUTLASS_FP4_SM100 = AlignmentPolicy("CUTLASS FP4 GEMM (SM100/103)", k_multiple=32, n_multiple=32)
#: sglang/vLLM SM100 FlashInfer MXFP4 MoE: round_up(hidden, 256), round_up(I/TP, 256)
FLASHINFER_MXFP4_PAD = AlignmentPolicy(
    "FlashInfer MXFP4 MoE padding",
    k_multiple=256,
    n_multiple=256,
    action="pad",
    stack="vLLM/sglang FlashInfer MXFP4 paths",
)


@dataclass(frozen=True)
class Aligned:
    """A runnable problem; ``original`` differs from ``problem`` when it was padded (see ``note``)."""

    problem: Problem
    original: Problem
    note: str = ""

    @property
    def padded(self) -> bool:
        return self.problem != self.original


@dataclass(frozen=True)
class Skipped:
    """A problem a backend cannot run, kept with the reason so reports show it, never dropped."""

    problem: Problem
    reason: str


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


def _violations(problem: Problem, policy: AlignmentPolicy) -> list[str]:
    out = []
    for label, n, k in problem.gemm_dims():
        if k % policy.k_multiple:
            out.append(f"{label} K={k} is not a multiple of {policy.k_multiple}")
        if n % policy.n_multiple:
            out.append(f"{label} N={n} is not a multiple of {policy.n_multiple}")
    return out


def _padded(problem: Problem, policy: AlignmentPolicy) -> tuple[Problem, list[str]]:
    changes: list[str] = []

    def up(label: str, x: int, mult: int) -> int:
        y = _round_up(x, mult)
        if y != x:
            changes.append(f"{label} {x}→{y}")
        return y

    if isinstance(problem, MoEProblem):
        mult = math.lcm(policy.k_multiple, policy.n_multiple)
        # gate_up N = 2·inter must be % n_multiple: rounding inter to lcm covers both GEMMs
        return replace(problem, hidden=up("H", problem.hidden, mult), inter=up("I", problem.inter, mult)), changes
    k = up("K", problem.k, policy.k_multiple)
    if problem.origin.role.endswith("gate_up") and problem.n % 2 == 0:
        n = 2 * up("I", problem.n // 2, policy.n_multiple)
        if n != problem.n:
            changes.append(f"N {problem.n}→{n}")
    else:
        n = up("N", problem.n, policy.n_multiple)
    return replace(problem, n=n, k=k), changes


def align_problem(problem: Problem, policy: AlignmentPolicy) -> Aligned | Skipped:
    """Apply ``policy``: the problem unchanged, padded (with a note naming the stack), or Skipped."""
    bad = _violations(problem, policy)
    if not bad:
        return Aligned(problem, problem)
    if policy.action == "skip":
        return Skipped(problem, f"{problem.id}: {'; '.join(bad)} ({policy.name} requirement)")
    padded, changes = _padded(problem, policy)
    return Aligned(padded, problem, f"padded {', '.join(changes)} as {policy.stack} do")
