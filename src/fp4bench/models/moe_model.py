"""The MoE model description: the few numbers that fix every expert GEMM shape, each with a source.

Why a source per number: these values come from configs, config copies and spec pages of
varying trust (tagged **[source]**,
**[secondary]**, **[unverified]**, **[estimate]**). A benchmark result is only as good as the
shape it ran, so the tag travels with the number and the constructor refuses a number
without one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

#: fields that are numbers or facts taken from a config; every one needs a ``sources`` entry
SOURCED_FIELDS: tuple[str, ...] = (
    "hidden",
    "moe_intermediate",
    "num_experts",
    "top_k",
    "shared_experts",
    "shared_intermediate",
    "moe_layers",
    "num_layers",
    "native_format",
)
#: trust tags; every source string carries at least one
SOURCE_TAGS: tuple[str, ...] = ("[source]", "[secondary]", "[unverified]", "[estimate]")
NATIVE_FORMATS: tuple[str, ...] = ("nvfp4", "mxfp4", "bf16")

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]*$")


def normalize_name(name: str) -> str:
    """Lower-case, spaces/underscores to hyphens: 'DeepSeek_R1' and 'deepseek-r1' are one name."""
    return re.sub(r"[\s_]+", "-", name.strip().lower())


@dataclass(frozen=True)
class MoEModel:
    """One MoE model's routed-expert geometry.

    ``moe_intermediate`` is one routed expert's intermediate size I; ``shared_intermediate`` is
    the intermediate size of the shared-expert MLP as a whole (``shared_experts`` experts of
    the same size fused into one dense MLP, as DeepSeek-style code builds it), 0 when the model
    has none. ``native_format`` is the expert-weight format of the deployed checkpoint the
    benchmark mirrors; ``fp4_format`` is the FP4 format its expert GEMMs are benchmarked in.
    """

    name: str
    hidden: int
    moe_intermediate: int
    num_experts: int
    top_k: int
    shared_experts: int
    shared_intermediate: int
    moe_layers: int
    num_layers: int
    native_format: str
    sources: Mapping[str, str] = field(hash=False)
    notes: str = ""
    aliases: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _NAME_RE.match(self.name):
            raise ValueError(f"model name must be lower-case [a-z0-9.-], got {self.name!r}")
        for name in ("hidden", "moe_intermediate", "num_experts", "top_k", "moe_layers", "num_layers"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{self.name}: {name} must be a positive int, got {v!r}")
        for name in ("shared_experts", "shared_intermediate"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{self.name}: {name} must be a non-negative int, got {v!r}")
        if (self.shared_experts == 0) != (self.shared_intermediate == 0):
            raise ValueError(
                f"{self.name}: shared_experts={self.shared_experts} and "
                f"shared_intermediate={self.shared_intermediate} must both be zero or both positive"
            )
        if self.top_k > self.num_experts:
            raise ValueError(f"{self.name}: top_k={self.top_k} exceeds num_experts={self.num_experts}")
        if self.moe_layers > self.num_layers:
            raise ValueError(f"{self.name}: moe_layers={self.moe_layers} exceeds num_layers={self.num_layers}")
        if self.native_format not in NATIVE_FORMATS:
            raise ValueError(f"{self.name}: native_format {self.native_format!r} not in {NATIVE_FORMATS}")
        missing = [f for f in SOURCED_FIELDS if not str(self.sources.get(f, "")).strip()]
        if missing:
            raise ValueError(f"{self.name}: no source for {missing}")
        unknown = sorted(set(self.sources) - set(SOURCED_FIELDS))
        if unknown:
            raise ValueError(f"{self.name}: sources name unknown fields {unknown}")
        untagged = [f for f, s in self.sources.items() if not any(t in s for t in SOURCE_TAGS)]
        if untagged:
            raise ValueError(f"{self.name}: sources without a trust tag {SOURCE_TAGS}: {untagged}")
        # read-only copy: a frozen model must not change under a caller's dict
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))
        object.__setattr__(self, "aliases", tuple(normalize_name(a) for a in self.aliases))

    # --- derived geometry -------------------------------------------------------------------

    @property
    def fp4_format(self) -> str:
        """The FP4 format the expert GEMMs run in: MXFP4 where the checkpoint is MXFP4, else NVFP4."""
        return "mxfp4" if self.native_format == "mxfp4" else "nvfp4"

    @property
    def has_shared(self) -> bool:
        return self.shared_experts > 0

    def check_tp(self, tp: int) -> None:
        """Raise ValueError unless ``tp`` splits the routed (and shared) intermediate evenly."""
        if not isinstance(tp, int) or isinstance(tp, bool) or tp <= 0:
            raise ValueError(f"TP size must be a positive int, got {tp!r}")
        if self.moe_intermediate % tp:
            raise ValueError(
                f"TP={tp} does not divide {self.name} moe_intermediate={self.moe_intermediate}"
            )
        if self.shared_intermediate % tp:
            raise ValueError(
                f"TP={tp} does not divide {self.name} shared_intermediate={self.shared_intermediate}"
            )

    def inter_per_rank(self, tp: int = 1) -> int:
        """I / TP: the routed expert intermediate one tensor-parallel rank holds."""
        self.check_tp(tp)
        return self.moe_intermediate // tp

    def gate_up_nk(self, tp: int = 1) -> tuple[int, int]:
        """(N, K) of one expert's gate_up GEMM on one rank: (2·I/TP, H)."""
        return 2 * self.inter_per_rank(tp), self.hidden

    def down_nk(self, tp: int = 1) -> tuple[int, int]:
        """(N, K) of one expert's down GEMM on one rank: (H, I/TP)."""
        return self.hidden, self.inter_per_rank(tp)

    def describe(self) -> str:
        shared = ""
        if self.has_shared:
            shared = f", shared {self.shared_experts}x{self.shared_intermediate // self.shared_experts}"
        return (
            f"{self.name}: H={self.hidden} I={self.moe_intermediate} E={self.num_experts} "
            f"top-{self.top_k}{shared}, {self.moe_layers}/{self.num_layers} MoE layers, {self.native_format}"
        )


def sourced_values(model: MoEModel) -> dict[str, object]:
    """The sourced fields and their values (what tests and docs iterate over)."""
    return {f: getattr(model, f) for f in SOURCED_FIELDS}
