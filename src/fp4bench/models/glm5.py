"""GLM-5 (glm_moe_dsa architecture): 256 routed experts, top-8, one shared expert. The default model."""

from fp4bench.models.moe_model import MoEModel

_CFG = (
    "[source] transformers models/glm_moe_dsa/configuration_glm_moe_dsa.py defaults "
    '(@auto_docstring(checkpoint="zai-org/GLM-5"))'
)
_SLIME = "[secondary] slime GLM-5 Megatron launch scripts"

MODELS = (
    MoEModel(
        name="glm-5",
        hidden=6144,
        moe_intermediate=2048,
        num_experts=256,
        top_k=8,
        shared_experts=1,
        shared_intermediate=2048,
        moe_layers=75,
        num_layers=78,
        native_format="nvfp4",
        sources={
            "hidden": f"{_CFG}: hidden_size 6144",
            "moe_intermediate": f"{_CFG}: moe_intermediate_size 2048",
            "num_experts": f"{_CFG}: n_routed_experts 256",
            "top_k": f"{_CFG}: num_experts_per_tok 8",
            "shared_experts": f"{_CFG}: n_shared_experts 1",
            "shared_intermediate": (
                f"{_CFG}: n_shared_experts 1 x moe_intermediate_size 2048; {_SLIME} pass "
                "--moe-shared-expert-intermediate-size 2048"
            ),
            "moe_layers": f"{_CFG}: 78 layers, first 3 dense -> 75 MoE layers; {_SLIME}: N_MOE_LAYERS=75",
            "num_layers": f"{_CFG}: num_hidden_layers 78",
            "native_format": "[unverified] deployed as an NVFP4 checkpoint",
        },
        notes=(
            "DeepSeek-V3.2-style MLA + DSA attention; same expert count/top-k as DeepSeek-V3 with "
            "H=6144. GLM-5.1 shows the same MoE numbers in an AMD FlashInfer bench [secondary]."
        ),
        aliases=("glm5", "glm-5.1"),
    ),
)
