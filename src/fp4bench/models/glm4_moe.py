"""GLM-4.5 / 4.6 / 4.7 (355B) and GLM-4.5-Air (glm4_moe architecture)."""

from fp4bench.models.moe_model import MoEModel

_COPIES = "[secondary] GLM-4.5/4.6/4.7 config copies (GLM_47_CONFIG, glm4_moe test fixtures)"
_AIR = (
    "[unverified] transformers Glm4MoeConfig defaults (describe the ~100B Air-class model); "
    "[secondary] slime scripts/models/glm4.5-106B-A12B.sh agrees"
)
_FP4 = "[unverified] deployed as an NVFP4 checkpoint"

MODELS = (
    MoEModel(
        name="glm-4.5",
        hidden=5120,
        moe_intermediate=1536,
        num_experts=160,
        top_k=8,
        shared_experts=1,
        shared_intermediate=1536,
        moe_layers=89,
        num_layers=92,
        native_format="nvfp4",
        sources={
            "hidden": f"{_COPIES}: hidden_size 5120",
            "moe_intermediate": f"{_COPIES}: moe_intermediate_size 1536",
            "num_experts": f"{_COPIES}: n_routed_experts 160",
            "top_k": f"{_COPIES}: num_experts_per_tok 8",
            "shared_experts": f"{_COPIES}: n_shared_experts 1",
            "shared_intermediate": (
                f"{_COPIES}: 1 x 1536; slime scripts/models/glm4.5-355B-A32B.sh "
                "--moe-shared-expert-intermediate-size 1536"
            ),
            "moe_layers": f"{_COPIES}: 92 layers, first 3 dense -> 89",
            "num_layers": f"{_COPIES}: num_hidden_layers 92",
            "native_format": _FP4,
        },
        notes=(
            "355B-A32B. Not GLM-4.7-Flash (30B-A3B, 64 experts), a different model. "
            "TP16 gives I/TP = 96, an awkward down-GEMM K."
        ),
        aliases=("glm-4.6", "glm-4.7", "glm-4.5-355b"),
    ),
    MoEModel(
        name="glm-4.5-air",
        hidden=4096,
        moe_intermediate=1408,
        num_experts=128,
        top_k=8,
        shared_experts=1,
        shared_intermediate=1408,
        moe_layers=45,
        num_layers=46,
        native_format="nvfp4",
        sources={
            "hidden": f"{_AIR}: hidden_size 4096",
            "moe_intermediate": f"{_AIR}: moe_intermediate_size 1408",
            "num_experts": f"{_AIR}: n_routed_experts 128",
            "top_k": f"{_AIR}: num_experts_per_tok 8",
            "shared_experts": f"{_AIR}: 1 shared expert (n_shared not verified in a checkpoint)",
            "shared_intermediate": f"{_AIR}: --moe-shared-expert-intermediate-size 1408",
            "moe_layers": f"{_AIR}: 45 of 46 (first_k_dense 1 not verified in a checkpoint)",
            "num_layers": f"{_AIR}: 46 layers",
            "native_format": _FP4,
        },
        notes="106B-A12B; numbers not checked against the released checkpoint's config.json.",
        aliases=("glm-4.5-air-106b",),
    ),
)
