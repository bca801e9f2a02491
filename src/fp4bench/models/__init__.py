"""MoE model catalog: one file per model family, each defining ``MODELS``; ``catalog`` finds them."""

from fp4bench.models.catalog import DEFAULT_MODEL, all_models, build_registry, get_model, list_models
from fp4bench.models.moe_model import SOURCE_TAGS, SOURCED_FIELDS, MoEModel, sourced_values

__all__ = [
    "DEFAULT_MODEL",
    "SOURCED_FIELDS",
    "SOURCE_TAGS",
    "MoEModel",
    "all_models",
    "build_registry",
    "get_model",
    "list_models",
    "sourced_values",
]
