"""DeepSeek-V3 / R1 (671B): 256 routed experts, top-8, one shared expert."""

from fp4bench.models.moe_model import MoEModel

_CFG = "[source] deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json"
_FP4 = (
    "[unverified] deployed as an NVFP4 checkpoint "
    "(the released checkpoint is block-scaled FP8)"
)

MODELS = (
    MoEModel(
        name="deepseek-v3",
        hidden=7168,
        moe_intermediate=2048,
        num_experts=256,
        top_k=8,
        shared_experts=1,
        shared_intermediate=2048,
        moe_layers=58,
        num_layers=61,
        native_format="nvfp4",
        sources={
            "hidden": f"{_CFG}: dim 7168",
            "moe_intermediate": f"{_CFG}: moe_inter_dim 2048",
            "num_experts": f"{_CFG}: n_routed_experts 256",
            "top_k": f"{_CFG}: n_activated_experts 8",
            "shared_experts": f"{_CFG}: n_shared_experts 1",
            "shared_intermediate": f"{_CFG}: n_shared_experts 1 x moe_inter_dim 2048",
            "moe_layers": f"{_CFG}: n_layers 61 - n_dense_layers 3 = 58",
            "num_layers": f"{_CFG}: n_layers 61",
            "native_format": _FP4,
        },
        notes=(
            "sigmoid router with 8 groups / 4 limited and route_scale 2.5; fp4bench routing is "
            "uniform or zipf, not the grouped top-k of the real router. R1 has the same MoE shapes."
        ),
        aliases=("deepseek-r1", "deepseek-v3-671b"),
    ),
)
