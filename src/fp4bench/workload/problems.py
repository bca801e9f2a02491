"""GEMM problem descriptions: plain, hashable value objects shared by every layer above.

A problem says *what* is multiplied (shapes, per-expert token counts, where the numbers came
from); it never holds tensors. Its ``id`` is the pytest parameter id, so it must be stable
across releases: baselines are matched by it.

Conventions (docs/formats.md): ``D[M, N] = A[M, K] @ W[N, K]^T``,
A = activations, W = weights, K contiguous in both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Storage bytes per element including block scales.
BYTES_PER_ELEMENT: dict[str, float] = {
    "nvfp4": 0.5 + 1 / 16,
    "mxfp4": 0.5 + 1 / 32,
    "fp8": 1.0,
    "bf16": 2.0,
    "fp32": 4.0,
}
OUTPUT_BYTES = 2.0  # every backend here writes bf16


@dataclass(frozen=True)
class Origin:
    """Where a problem came from: model, decode batch (concurrency), TP size, routing."""

    model: str = "synthetic"
    batch: int = 0
    tp: int = 1
    routing: str = "uniform"
    role: str = ""  # "gate_up", "down", "shared_gate_up", "shared_down", "moe"

    def tag(self) -> str:
        return f"{self.model}-b{self.batch}-tp{self.tp}-{self.routing}-{self.role}"


@dataclass(frozen=True)
class GemmProblem:
    """A dense GEMM ``[m, k] x [n, k]^T`` (a shared expert or any plain linear layer)."""

    m: int
    n: int
    k: int
    origin: Origin = field(default_factory=Origin)

    kind = "dense"

    def __post_init__(self) -> None:
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"GemmProblem.{name} must be a positive int, got {v!r}")

    @property
    def id(self) -> str:
        return f"{self.origin.tag()}-m{self.m}n{self.n}k{self.k}"

    @property
    def size(self) -> str:
        """The shape for a results table."""
        return f"M{self.m} N{self.n} K{self.k}"

    @property
    def operand_elements(self) -> int:
        """Elements of the activations and weights (what a quantizer draws and decodes)."""
        return self.m * self.k + self.n * self.k

    @property
    def rows(self) -> int:
        """Rows of A the GEMMs multiply, summed over experts."""
        return self.m

    @property
    def expert_rows(self) -> None:
        """Rows per expert: a dense GEMM has no experts."""
        return None

    def gemm_dims(self) -> list[tuple[str, int, int]]:
        """(label, N, K) of every GEMM inside the problem (what alignment rules check)."""
        return [(self.origin.role or self.kind, self.n, self.k)]

    def shape_info(self) -> dict[str, Any]:
        """The shape as recorded in each measurement's ``extra_info``."""
        return {"m": self.m, "n": self.n, "k": self.k}

    @property
    def flops(self) -> int:
        return 2 * self.m * self.n * self.k

    def bytes_moved(self, a_fmt: str, w_fmt: str | None = None) -> float:
        """Fewest bytes: each operand read once, the output written once."""
        w_fmt = w_fmt or a_fmt
        return (
            self.m * self.k * BYTES_PER_ELEMENT[a_fmt]
            + self.n * self.k * BYTES_PER_ELEMENT[w_fmt]
            + self.m * self.n * OUTPUT_BYTES
        )


@dataclass(frozen=True)
class GroupedProblem:
    """A grouped GEMM: expert ``e`` computes ``[m_e, k] x [n, k]^T`` with its own weights.

    ``tokens_per_expert`` holds one entry per expert of the layer (zeros allowed: an idle
    expert moves no weight bytes and does no work, which is how real decode steps look).
    """

    tokens_per_expert: tuple[int, ...]
    n: int
    k: int
    origin: Origin = field(default_factory=Origin)

    kind = "grouped"

    def __post_init__(self) -> None:
        if not self.tokens_per_expert:
            raise ValueError("GroupedProblem needs at least one expert")
        if any((not isinstance(t, int)) or t < 0 for t in self.tokens_per_expert):
            raise ValueError(f"tokens_per_expert must be non-negative ints: {self.tokens_per_expert!r}")
        if sum(self.tokens_per_expert) == 0:
            raise ValueError("GroupedProblem with no tokens routed to any expert")
        for name in ("n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"GroupedProblem.{name} must be a positive int, got {v!r}")

    @property
    def num_experts(self) -> int:
        return len(self.tokens_per_expert)

    @property
    def active_experts(self) -> int:
        return sum(1 for t in self.tokens_per_expert if t > 0)

    @property
    def total_rows(self) -> int:
        return sum(self.tokens_per_expert)

    @property
    def id(self) -> str:
        mx = max(self.tokens_per_expert)
        return (
            f"{self.origin.tag()}-e{self.num_experts}a{self.active_experts}"
            f"rows{self.total_rows}max{mx}n{self.n}k{self.k}"
        )

    @property
    def size(self) -> str:
        return f"{self.total_rows} rows/{self.active_experts} experts N{self.n} K{self.k}"

    @property
    def operand_elements(self) -> int:
        return self.total_rows * self.k + self.num_experts * self.n * self.k

    @property
    def rows(self) -> int:
        return self.total_rows

    @property
    def expert_rows(self) -> tuple[int, ...]:
        return self.tokens_per_expert

    def gemm_dims(self) -> list[tuple[str, int, int]]:
        return [(self.origin.role or self.kind, self.n, self.k)]

    def shape_info(self) -> dict[str, Any]:
        return {"n": self.n, "k": self.k, "tokens_per_expert": list(self.tokens_per_expert),
                "active_experts": self.active_experts}

    @property
    def flops(self) -> int:
        return 2 * self.total_rows * self.n * self.k

    def bytes_moved(self, a_fmt: str, w_fmt: str | None = None) -> float:
        """Activations once, weights of *active* experts once, output once."""
        w_fmt = w_fmt or a_fmt
        return (
            self.total_rows * self.k * BYTES_PER_ELEMENT[a_fmt]
            + self.active_experts * self.n * self.k * BYTES_PER_ELEMENT[w_fmt]
            + self.total_rows * self.n * OUTPUT_BYTES
        )


@dataclass(frozen=True)
class MoEProblem:
    """A whole routed-expert MoE layer as fused kernels run it: gate_up GEMM, SwiGLU, down GEMM.

    ``topk_ids`` is the routing of each token (``num_tokens`` rows of ``top_k`` expert ids),
    fixed and seeded so baseline and candidate see the same routing.
    """

    hidden: int
    inter: int  # per-rank moe_intermediate (I / TP)
    num_experts: int
    top_k: int
    topk_ids: tuple[tuple[int, ...], ...]
    origin: Origin = field(default_factory=Origin)

    kind = "moe"

    def __post_init__(self) -> None:
        for name in ("hidden", "inter", "num_experts", "top_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"MoEProblem.{name} must be a positive int, got {v!r}")
        if not self.topk_ids:
            raise ValueError("MoEProblem needs at least one token")
        for row in self.topk_ids:
            if len(row) != self.top_k or len(set(row)) != self.top_k:
                raise ValueError(f"each token needs {self.top_k} distinct experts, got {row!r}")
            if any(e < 0 or e >= self.num_experts for e in row):
                raise ValueError(f"expert id out of range [0, {self.num_experts}): {row!r}")

    @property
    def num_tokens(self) -> int:
        return len(self.topk_ids)

    @property
    def tokens_per_expert(self) -> tuple[int, ...]:
        counts = [0] * self.num_experts
        for row in self.topk_ids:
            for e in row:
                counts[e] += 1
        return tuple(counts)

    @property
    def active_experts(self) -> int:
        return sum(1 for t in self.tokens_per_expert if t > 0)

    @property
    def id(self) -> str:
        return (
            f"{self.origin.tag()}-t{self.num_tokens}e{self.num_experts}k{self.top_k}"
            f"a{self.active_experts}h{self.hidden}i{self.inter}"
        )

    @property
    def size(self) -> str:
        return f"{self.num_tokens} tok x top{self.top_k} H{self.hidden} I{self.inter}"

    @property
    def operand_elements(self) -> int:
        """Activations and the three weight matrices (gate, up, down) of every expert."""
        return self.num_tokens * self.hidden + 3 * self.num_experts * self.inter * self.hidden

    @property
    def rows(self) -> int:
        """Routed rows: each token once per chosen expert."""
        return self.num_tokens * self.top_k

    @property
    def expert_rows(self) -> tuple[int, ...]:
        return self.tokens_per_expert

    def gemm_dims(self) -> list[tuple[str, int, int]]:
        return [("gate_up", 2 * self.inter, self.hidden), ("down", self.hidden, self.inter)]

    def shape_info(self) -> dict[str, Any]:
        return {"hidden": self.hidden, "inter": self.inter, "num_tokens": self.num_tokens, "top_k": self.top_k,
                "active_experts": self.active_experts}

    @property
    def flops(self) -> int:
        rows = self.num_tokens * self.top_k
        return 2 * rows * (2 * self.inter) * self.hidden + 2 * rows * self.hidden * self.inter

    def bytes_moved(self, a_fmt: str, w_fmt: str | None = None) -> float:
        w_fmt = w_fmt or a_fmt
        rows = self.num_tokens * self.top_k
        weights = self.active_experts * 3 * self.inter * self.hidden * BYTES_PER_ELEMENT[w_fmt]
        acts = self.num_tokens * self.hidden * BYTES_PER_ELEMENT[a_fmt] + rows * self.inter * 2
        return weights + acts + self.num_tokens * self.hidden * OUTPUT_BYTES


@dataclass(frozen=True)
class QuantProblem:
    """Quantizing one activation ``[m, k]`` (bf16) to NVFP4: what an engine does before each FP4
    GEMM of a decode step (``m`` tokens, ``k`` the GEMM's K). No weights, no product: the result
    is bytes (payload, block scales in the GEMM's layout, global scale), checked bit-exact."""

    m: int
    k: int
    origin: Origin = field(default_factory=Origin)

    kind = "quant"

    def __post_init__(self) -> None:
        for name in ("m", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"QuantProblem.{name} must be a positive int, got {v!r}")

    @property
    def id(self) -> str:
        return f"{self.origin.tag()}-quant-m{self.m}k{self.k}"

    @property
    def size(self) -> str:
        return f"M{self.m} K{self.k} (quantize)"

    @property
    def operand_elements(self) -> int:
        return self.m * self.k

    @property
    def rows(self) -> int:
        return self.m

    @property
    def expert_rows(self) -> None:
        return None

    def gemm_dims(self) -> list[tuple[str, int, int]]:
        """No GEMM inside: no N/K alignment rule applies (the quantizers need K % 16 only)."""
        return []

    def shape_info(self) -> dict[str, Any]:
        return {"m": self.m, "k": self.k}

    @property
    def flops(self) -> int:
        return 0

    def bytes_moved(self, a_fmt: str = "bf16", w_fmt: str | None = None) -> float:
        """bf16 activations read once, the NVFP4 bytes (payload + block scales) written once."""
        return self.m * self.k * (BYTES_PER_ELEMENT["bf16"] + BYTES_PER_ELEMENT["nvfp4"])


def quant_problems(problems: list) -> list[QuantProblem]:
    """The activation quantizations a decode step's GEMM problems imply, one per dense GEMM
    (``[M, K]`` of its role) and one per fused MoE layer (its ``[tokens, hidden]`` input)."""
    out: list[QuantProblem] = []
    for p in problems:
        if isinstance(p, GemmProblem):
            out.append(QuantProblem(p.m, p.k, p.origin))
        elif isinstance(p, MoEProblem):
            out.append(QuantProblem(p.num_tokens, p.hidden, p.origin))
    return out


Problem = GemmProblem | GroupedProblem | MoEProblem | QuantProblem
