"""Llama 4 Scout / Maverick: top-1 routing over 16 or 128 experts plus one shared expert."""

from fp4bench.models.moe_model import MoEModel

_CFG = "[secondary] Llama-4 config.json copies on Hugging Face"
_FP4 = "[unverified] deployed as an NVFP4 checkpoint"


def _llama4(name: str, experts: int, moe_layers: int, step: int, aliases: tuple[str, ...]) -> MoEModel:
    return MoEModel(
        name=name,
        hidden=5120,
        moe_intermediate=8192,
        num_experts=experts,
        top_k=1,
        shared_experts=1,
        shared_intermediate=8192,
        moe_layers=moe_layers,
        num_layers=48,
        native_format="nvfp4",
        sources={
            "hidden": f"{_CFG}: hidden_size 5120",
            "moe_intermediate": f"{_CFG}: intermediate_size 8192 (intermediate_size_mlp 16384 is the dense layers)",
            "num_experts": f"{_CFG}: num_local_experts {experts}",
            "top_k": f"{_CFG}: num_experts_per_tok 1",
            "shared_experts": f"{_CFG}: one shared expert",
            "shared_intermediate": f"{_CFG}: shared expert 1 x 8192",
            "moe_layers": f"{_CFG}: interleave_moe_layer_step {step} over 48 layers -> {moe_layers}",
            "num_layers": f"{_CFG}: num_hidden_layers 48",
            "native_format": _FP4,
        },
        notes="top-1 routing: at small batch only a handful of large experts (47 MB NVFP4 gate_up) are read.",
        aliases=aliases,
    )


MODELS = (
    _llama4("llama-4-scout", 16, 48, 1, ("llama-4-scout-17b-16e", "llama-4-scout-17b-16e-instruct")),
    _llama4("llama-4-maverick", 128, 24, 2, ("llama-4-maverick-17b-128e", "llama-4-maverick-17b-128e-instruct")),
)
