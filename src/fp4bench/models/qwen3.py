"""Qwen3 MoE (qwen3_moe architecture): 128 experts, top-8, no shared expert."""

from fp4bench.models.moe_model import MoEModel

_235 = "[secondary] several copies of the Qwen3-235B-A22B config"
_30 = "[source] transformers Qwen3MoeConfig defaults (checkpoint Qwen/Qwen3-30B-A3B-Base)"
_FP4 = "[unverified] deployed as an NVFP4 checkpoint"

MODELS = (
    MoEModel(
        name="qwen3-235b-a22b",
        hidden=4096,
        moe_intermediate=1536,
        num_experts=128,
        top_k=8,
        shared_experts=0,
        shared_intermediate=0,
        moe_layers=94,
        num_layers=94,
        native_format="nvfp4",
        sources={
            "hidden": f"{_235}: hidden_size 4096",
            "moe_intermediate": f"{_235}: moe_intermediate_size 1536",
            "num_experts": f"{_235}: num_experts 128",
            "top_k": f"{_235}: num_experts_per_tok 8",
            "shared_experts": f"{_235}: no shared expert",
            "shared_intermediate": f"{_235}: no shared expert",
            "moe_layers": f"{_235}: every one of the 94 layers is MoE",
            "num_layers": f"{_235}: num_hidden_layers 94",
            "native_format": _FP4,
        },
        notes="TP16 gives I/TP = 96: down-GEMM K = 96, 6 NVFP4 scale columns swizzle-padded to 8.",
        aliases=("qwen3-235b",),
    ),
    MoEModel(
        name="qwen3-30b-a3b",
        hidden=2048,
        moe_intermediate=768,
        num_experts=128,
        top_k=8,
        shared_experts=0,
        shared_intermediate=0,
        moe_layers=48,
        num_layers=48,
        native_format="nvfp4",
        sources={
            "hidden": f"{_30}: hidden_size 2048",
            "moe_intermediate": f"{_30}: moe_intermediate_size 768",
            "num_experts": f"{_30}: num_experts 128",
            "top_k": f"{_30}: num_experts_per_tok 8",
            "shared_experts": f"{_30}: no shared expert",
            "shared_intermediate": f"{_30}: no shared expert",
            "moe_layers": (
                "[unverified] model card: 48 (the transformers default says 24); "
                "[secondary] slime scripts/models/qwen3-30B-A3B.sh: --num-layers 48, all MoE"
            ),
            "num_layers": (
                "[unverified] model card: 48 (the transformers default says 24); "
                "[secondary] slime scripts/models/qwen3-30B-A3B.sh: --num-layers 48"
            ),
            "native_format": _FP4,
        },
        notes="TP8 gives I/TP = 96 and TP16 gives 48 (3 scale columns swizzle-padded to 4).",
        aliases=("qwen3-30b",),
    ),
)
