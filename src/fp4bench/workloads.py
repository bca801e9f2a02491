"""Decode workloads: model + batch + TP + routing -> the GEMM problems one MoE layer runs.

Why: decode-step expert GEMMs have tiny, uneven per-expert row counts (M_e ~ 1-16) that
uniform-M sweeps miss. This module turns a model's geometry and a seeded routing into exactly
those problems, exposes the decode arithmetic (tokens per expert, active
experts, arithmetic intensity) as functions, and applies backend alignment rules without ever
dropping a shape silently.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import torch

from fp4bench.models import MoEModel, get_model
from fp4bench.problems import (
    BYTES_PER_ELEMENT,
    OUTPUT_BYTES,
    GemmProblem,
    GroupedProblem,
    MoEProblem,
    Origin,
    Problem,
)

# --------------------------------------------------------------------------------------------
# routing


@dataclass(frozen=True)
class Routing:
    """A routing distribution: "uniform" or Zipf with exponent ``s`` over a seeded expert ranking."""

    kind: str  # "uniform" | "zipf"
    s: float = 0.0

    @property
    def tag(self) -> str:
        """Short id used in problem ids: "uniform", "zipf1.2"."""
        return "uniform" if self.kind == "uniform" else f"zipf{self.s:g}"


_ZIPF_RE = re.compile(r"^zipf(?:[:=])?(?P<s>.*)$")


def parse_routing(spec: str | Routing) -> Routing:
    """Parse "uniform" or "zipf:<s>" (also "zipf<s>", the tag form) with s a positive finite float."""
    if isinstance(spec, Routing):
        return spec
    if not isinstance(spec, str):
        raise ValueError(f"routing must be a string like 'uniform' or 'zipf:1.2', got {spec!r}")
    text = spec.strip().lower()
    if text == "uniform":
        return Routing("uniform")
    m = _ZIPF_RE.match(text)
    if m is None:
        raise ValueError(f"unknown routing {spec!r}; expected 'uniform' or 'zipf:<s>' (e.g. 'zipf:1.2')")
    if not m.group("s"):
        raise ValueError(f"routing {spec!r}: Zipf needs an exponent, e.g. 'zipf:1.2'")
    try:
        s = float(m.group("s"))
    except ValueError:
        raise ValueError(f"routing {spec!r}: Zipf exponent {m.group('s')!r} is not a number") from None
    if not math.isfinite(s) or s <= 0:
        raise ValueError(f"routing {spec!r}: Zipf exponent must be a positive finite number (s=0 is 'uniform')")
    return Routing("zipf", s)


def _check_routing_args(num_tokens: int, num_experts: int, top_k: int) -> None:
    for name, v in (("num_tokens", num_tokens), ("num_experts", num_experts), ("top_k", top_k)):
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if top_k > num_experts:
        raise ValueError(f"top_k={top_k} exceeds num_experts={num_experts}: tokens need distinct experts")


def zipf_popularity(num_experts: int, s: float, generator: torch.Generator) -> torch.Tensor:
    """Expert selection weights ∝ 1/rank^s, ranks assigned by a seeded random permutation.

    The permutation keeps "hot" experts from always being ids 0..k, which would flatter any
    kernel whose scheduling depends on expert order.
    """
    ranks = torch.randperm(num_experts, generator=generator) + 1
    return ranks.to(torch.float64).pow(-s)


def route_tensor(
    num_tokens: int,
    num_experts: int,
    top_k: int,
    routing: str | Routing = "uniform",
    seed: int = 0,
) -> torch.Tensor:
    """``[num_tokens, top_k]`` int64 expert ids, distinct within each row, deterministic for ``seed``."""
    _check_routing_args(num_tokens, num_experts, top_k)
    r = parse_routing(routing)
    g = torch.Generator().manual_seed(seed)
    if r.kind == "uniform":
        # the top-k of iid uniform keys is a uniformly random k-subset (random order)
        return torch.rand(num_tokens, num_experts, generator=g).topk(top_k, dim=1).indices
    weights = zipf_popularity(num_experts, r.s, g)
    return torch.multinomial(weights.expand(num_tokens, num_experts), top_k, replacement=False, generator=g)


def route(
    num_tokens: int,
    num_experts: int,
    top_k: int,
    routing: str | Routing = "uniform",
    seed: int = 0,
) -> tuple[tuple[int, ...], ...]:
    """Per-token expert ids as nested tuples (the form ``MoEProblem.topk_ids`` stores)."""
    ids = route_tensor(num_tokens, num_experts, top_k, routing, seed)
    return tuple(tuple(row) for row in ids.tolist())


def tokens_per_expert(ids: Sequence[Sequence[int]] | torch.Tensor, num_experts: int) -> tuple[int, ...]:
    """Rows routed to each expert (length ``num_experts``, zeros for idle experts)."""
    if not isinstance(num_experts, int) or num_experts <= 0:
        raise ValueError(f"num_experts must be a positive int, got {num_experts!r}")
    t = torch.as_tensor(ids, dtype=torch.int64).reshape(-1)
    if t.numel() and (int(t.min()) < 0 or int(t.max()) >= num_experts):
        raise ValueError(f"expert id out of range [0, {num_experts}): min {int(t.min())}, max {int(t.max())}")
    return tuple(torch.bincount(t, minlength=num_experts).tolist())


# --------------------------------------------------------------------------------------------
# problems of one decode step


def _check_batch(batch: int) -> None:
    if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
        raise ValueError(f"batch (decode tokens per step) must be a positive int, got {batch!r}")


def decode_problems(
    model: str | MoEModel,
    batch: int,
    tp: int = 1,
    routing: str | Routing = "uniform",
    seed: int = 0,
) -> list[Problem]:
    """The GEMMs of one MoE layer for one decode step of ``batch`` tokens on one TP rank.

    In order: shared-expert ``shared_gate_up`` / ``shared_down`` dense GEMMs (M = batch) when the
    model has shared experts; routed ``gate_up`` / ``down`` grouped GEMMs with the routing's
    per-expert row counts; one ``moe`` problem for fused-MoE kernels. TP splits the
    intermediate (I/TP); every rank sees every token, so all E experts appear in the counts.
    """
    m = get_model(model)
    _check_batch(batch)
    m.check_tp(tp)
    r = parse_routing(routing)
    ids = route(batch, m.num_experts, m.top_k, r, seed)
    counts = tokens_per_expert(ids, m.num_experts)

    def origin(role: str) -> Origin:
        return Origin(model=m.name, batch=batch, tp=tp, routing=r.tag, role=role)

    problems: list[Problem] = []
    if m.has_shared:
        si = m.shared_intermediate // tp
        problems.append(GemmProblem(m=batch, n=2 * si, k=m.hidden, origin=origin("shared_gate_up")))
        problems.append(GemmProblem(m=batch, n=m.hidden, k=si, origin=origin("shared_down")))
    (gn, gk), (dn, dk) = m.gate_up_nk(tp), m.down_nk(tp)
    problems.append(GroupedProblem(tokens_per_expert=counts, n=gn, k=gk, origin=origin("gate_up")))
    problems.append(GroupedProblem(tokens_per_expert=counts, n=dn, k=dk, origin=origin("down")))
    problems.append(
        MoEProblem(
            hidden=m.hidden,
            inter=m.inter_per_rank(tp),
            num_experts=m.num_experts,
            top_k=m.top_k,
            topk_ids=ids,
            origin=origin("moe"),
        )
    )
    return problems


# --------------------------------------------------------------------------------------------
# the seed documents' arithmetic


def mean_tokens_per_expert(model: str | MoEModel, concurrency: int) -> float:
    """Routed rows per expert when ``concurrency`` tokens spread evenly: concurrency·top_k / E."""
    m = get_model(model)
    _check_batch(concurrency)
    return concurrency * m.top_k / m.num_experts


def expected_active_experts(num_experts: int, top_k: int, batch: int) -> float:
    """E·(1 − (1 − k/E)^B): experts hit at least once by B uniformly routed tokens.

    Each token picks k of E without replacement, so a given expert is missed by one token with
    probability 1 − k/E, independently across tokens.
    """
    _check_routing_args(batch, num_experts, top_k)
    return num_experts * (1.0 - (1.0 - top_k / num_experts) ** batch)


def expert_weight_bytes(model: str | MoEModel, fmt: str | None = None, tp: int = 1) -> tuple[float, float]:
    """(gate_up, down) weight bytes of one routed expert on one TP rank, block scales included.

    ``fmt`` defaults to the model's FP4 format. This is what a decode step streams per active
    expert, so it sets the bandwidth floor of the grouped GEMMs.
    """
    m = get_model(model)
    fmt = fmt or m.fp4_format
    if fmt not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(BYTES_PER_ELEMENT)}")
    (gn, gk), (dn, dk) = m.gate_up_nk(tp), m.down_nk(tp)
    return gn * gk * BYTES_PER_ELEMENT[fmt], dn * dk * BYTES_PER_ELEMENT[fmt]


def rows_per_active_expert(num_experts: int, top_k: int, batch: int) -> float:
    """B·k / E[active experts]: the typical M_e of a decode grouped GEMM."""
    return batch * top_k / expected_active_experts(num_experts, top_k, batch)


def arithmetic_intensity(m_e: float, n: int, k: int, fmt: str = "nvfp4") -> float:
    """FLOP per byte of one expert's ``[m_e, k] x [n, k]^T`` GEMM with both operands in ``fmt``.

    Bytes = weights N·K·bpe + activations M·K·bpe + bf16 output M·N·2 (problems.BYTES_PER_ELEMENT
    includes block scales), i.e. each operand moved once.
    """
    if fmt not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(BYTES_PER_ELEMENT)}")
    if m_e <= 0 or n <= 0 or k <= 0:
        raise ValueError(f"m_e, n, k must be positive, got {m_e}, {n}, {k}")
    bpe = BYTES_PER_ELEMENT[fmt]
    return 2.0 * m_e * n * k / (n * k * bpe + m_e * k * bpe + m_e * n * OUTPUT_BYTES)


def weight_only_intensity(m_e: float, fmt: str = "nvfp4") -> float:
    """The doc's simplification 2·M_e / bytes-per-weight (≈ 3.56·M_e for NVFP4): weights only."""
    if fmt not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(BYTES_PER_ELEMENT)}")
    return 2.0 * m_e / BYTES_PER_ELEMENT[fmt]


# --------------------------------------------------------------------------------------------
# alignment


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


def _gemm_dims(problem: Problem) -> list[tuple[str, int, int]]:
    """(label, n, k) of every GEMM inside the problem."""
    if isinstance(problem, MoEProblem):
        return [("gate_up", 2 * problem.inter, problem.hidden), ("down", problem.hidden, problem.inter)]
    return [(problem.origin.role or problem.kind, problem.n, problem.k)]


def _violations(problem: Problem, policy: AlignmentPolicy) -> list[str]:
    out = []
    for label, n, k in _gemm_dims(problem):
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


def align_all(problems: Iterable[Problem], policy: AlignmentPolicy) -> tuple[list[Aligned], list[Skipped]]:
    """Split problems into runnable (possibly padded) ones and skipped ones with reasons."""
    kept: list[Aligned] = []
    skipped: list[Skipped] = []
    for p in problems:
        r = align_problem(p, policy)
        (skipped if isinstance(r, Skipped) else kept).append(r)  # type: ignore[arg-type]
    return kept, skipped


def scale_padding_note(k: int, fmt: str = "nvfp4") -> str:
    """What the 128x4 scale swizzle pads for reduction length ``k`` ("" when nothing).

    Scale columns = K / block (16 NVFP4, 32 MXFP4), padded to a multiple of 4; so NVFP4 K is
    effectively granular to 64 elements in the scale buffer (K=96: 6 columns padded to 8).
    """
    block = {"nvfp4": 16, "mxfp4": 32}.get(fmt)
    if block is None:
        raise ValueError(f"scale padding applies to nvfp4/mxfp4, got {fmt!r}")
    if k % block:
        raise ValueError(f"K={k} is not a multiple of the {fmt} block size {block}")
    cols = k // block
    padded = _round_up(cols, 4)
    return "" if padded == cols else f"K={k}: {cols} {fmt} scale columns padded to {padded} by the 128x4 swizzle"
