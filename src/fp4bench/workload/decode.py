"""Decode workloads: model + batch + TP + routing -> the GEMM problems one MoE layer runs.

Why: decode-step expert GEMMs have tiny, uneven per-expert row counts (M_e ~ 1-16) that
uniform-M sweeps miss. This module turns a model's geometry and a seeded routing into exactly
those problems, and exposes the decode arithmetic (tokens per expert, active experts, arithmetic
intensity) as functions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from fp4bench.models import MoEModel, get_model
from fp4bench.workload.problems import (
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
