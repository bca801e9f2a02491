"""Mixtral-8x7B: 8 large experts, top-2, no shared expert; the classic bf16 MoE reference shape."""

from fp4bench.models.moe_model import MoEModel

_CFG = "[source] transformers MixtralConfig (checkpoint mistralai/Mixtral-8x7B-v0.1)"

MODELS = (
    MoEModel(
        name="mixtral-8x7b",
        hidden=4096,
        moe_intermediate=14336,
        num_experts=8,
        top_k=2,
        shared_experts=0,
        shared_intermediate=0,
        moe_layers=32,
        num_layers=32,
        native_format="bf16",
        sources={
            "hidden": f"{_CFG}: hidden_size 4096",
            "moe_intermediate": f"{_CFG}: intermediate_size 14336",
            "num_experts": f"{_CFG}: num_local_experts 8",
            "top_k": f"{_CFG}: num_experts_per_tok 2",
            "shared_experts": f"{_CFG}: no shared expert",
            "shared_intermediate": f"{_CFG}: no shared expert",
            "moe_layers": f"{_CFG}: num_hidden_layers 32, every layer MoE",
            "num_layers": f"{_CFG}: num_hidden_layers 32",
            "native_format": f"{_CFG}: released in bf16; benchmarked after NVFP4 quantization",
        },
        notes="Few, large experts: at decode every expert is active from batch ~8 on.",
        aliases=("mixtral", "mixtral-8x7b-v0.1", "mixtral-8x7b-instruct-v0.1"),
    ),
)
