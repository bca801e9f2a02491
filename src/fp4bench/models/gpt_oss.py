"""gpt-oss (120b / 20b): MXFP4 experts, top-4, H = I = 2880 (not a multiple of 64 or 256)."""

from fp4bench.models.moe_model import MoEModel

_CFG = "[source] transformers GptOssConfig defaults"
_COPY = "[secondary] gpt-oss-20b config copy"
_MX = (
    "[source] checkpoints store experts as MXFP4 *_blocks/*_scales "
    "(transformers GptOssConfig quantization)"
)
_NOTES = (
    "gate/up rows interleaved, per-expert biases, clamped SwiGLU (alpha 1.702, limit 7.0). "
    "vLLM/sglang FlashInfer MXFP4 paths pad H and I/TP up to multiples of 256 (2880 -> 3072)."
)

MODELS = (
    MoEModel(
        name="gpt-oss-120b",
        hidden=2880,
        moe_intermediate=2880,
        num_experts=128,
        top_k=4,
        shared_experts=0,
        shared_intermediate=0,
        moe_layers=36,
        num_layers=36,
        native_format="mxfp4",
        sources={
            "hidden": f"{_CFG}: hidden_size 2880",
            "moe_intermediate": f"{_CFG}: intermediate_size 2880",
            "num_experts": f"{_CFG}: num_local_experts 128",
            "top_k": f"{_CFG}: num_experts_per_tok 4",
            "shared_experts": f"{_CFG}: no shared expert",
            "shared_intermediate": f"{_CFG}: no shared expert",
            "moe_layers": f"{_CFG}: num_hidden_layers 36, every layer MoE",
            "num_layers": f"{_CFG}: num_hidden_layers 36",
            "native_format": _MX,
        },
        notes=_NOTES,
    ),
    MoEModel(
        name="gpt-oss-20b",
        hidden=2880,
        moe_intermediate=2880,
        num_experts=32,
        top_k=4,
        shared_experts=0,
        shared_intermediate=0,
        moe_layers=24,
        num_layers=24,
        native_format="mxfp4",
        sources={
            "hidden": f"{_COPY}: hidden_size 2880",
            "moe_intermediate": f"{_COPY}: intermediate_size 2880",
            "num_experts": f"{_COPY}: num_local_experts 32",
            "top_k": f"{_COPY}: num_experts_per_tok 4",
            "shared_experts": f"{_COPY}: no shared expert",
            "shared_intermediate": f"{_COPY}: no shared expert",
            "moe_layers": f"{_COPY}: 24 layers, every layer MoE",
            "num_layers": f"{_COPY}: num_hidden_layers 24",
            "native_format": _MX,
        },
        notes=_NOTES,
    ),
)
