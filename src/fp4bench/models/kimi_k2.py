"""Kimi-K2 (K2.x): the DeepSeek-V3 architecture with 384 routed experts."""

from fp4bench.models.moe_model import MoEModel

_CFG = "[secondary] several Kimi-K2 config.json copies on Hugging Face"

MODELS = (
    MoEModel(
        name="kimi-k2",
        hidden=7168,
        moe_intermediate=2048,
        num_experts=384,
        top_k=8,
        shared_experts=1,
        shared_intermediate=2048,
        moe_layers=60,
        num_layers=61,
        native_format="nvfp4",
        sources={
            "hidden": f"{_CFG}: hidden_size 7168",
            "moe_intermediate": f"{_CFG}: moe_intermediate_size 2048",
            "num_experts": f"{_CFG}: n_routed_experts 384",
            "top_k": f"{_CFG}: num_experts_per_tok 8",
            "shared_experts": f"{_CFG}: n_shared_experts 1",
            "shared_intermediate": (
                f"{_CFG}: n_shared_experts 1 x moe_intermediate_size 2048, sized as the "
                "DeepseekV3 architecture it uses sizes the shared MLP"
            ),
            "moe_layers": f"{_CFG}: num_hidden_layers 61 - first_k_dense_replace 1 = 60",
            "num_layers": f"{_CFG}: num_hidden_layers 61",
            "native_format": "[unverified] deployed as an NVFP4 checkpoint",
        },
        notes="routed_scaling_factor 2.827, 64 attention heads; same expert shapes as DeepSeek-V3.",
        aliases=("kimi-k2-instruct", "kimi-k2-thinking"),
    ),
)
