"""Model registry: every module in ``fp4bench.models`` that defines ``MODELS`` contributes.

Adding a model family = adding one file with ``MODELS = (MoEModel(...), ...)``; nothing here
changes. Discovery runs on first use (not at import) so family files can import
``fp4bench.models.moe_model`` without a cycle.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

from fp4bench.models.moe_model import MoEModel, normalize_name

DEFAULT_MODEL = "glm-5"


def build_registry(package: str = "fp4bench.models") -> dict[str, MoEModel]:
    """Import every submodule of ``package`` and map canonical names and aliases to models.

    Raises ValueError when two models (or a model and an alias) claim the same name: a silent
    override would benchmark the wrong shapes.
    """
    pkg = importlib.import_module(package)
    table: dict[str, MoEModel] = {}
    owner: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{package}.{info.name}")
        models = getattr(module, "MODELS", None)
        if models is None:
            continue
        for model in models:
            if not isinstance(model, MoEModel):
                raise TypeError(f"{module.__name__}.MODELS holds {type(model).__name__}, not MoEModel")
            for key in (model.name, *model.aliases):
                if key in table and table[key] is not model:
                    raise ValueError(
                        f"model name {key!r} defined twice: {owner[key]} and {module.__name__}"
                    )
                table[key] = model
                owner[key] = module.__name__
    return table


@cache
def _registry() -> dict[str, MoEModel]:
    return build_registry()


def list_models() -> list[str]:
    """Canonical model names, sorted (aliases excluded)."""
    return sorted({m.name for m in _registry().values()})


def all_models() -> list[MoEModel]:
    """Every registered model, sorted by canonical name."""
    table = _registry()
    return [table[name] for name in list_models()]


def get_model(name: str | MoEModel = DEFAULT_MODEL) -> MoEModel:
    """Look a model up by canonical name or alias (case, '_' and ' ' ignored; an 'org/' prefix
    such as 'deepseek-ai/' is dropped). Unknown names raise ValueError listing the known ones."""
    if isinstance(name, MoEModel):
        return name
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"model name must be a non-empty string, got {name!r}")
    table = _registry()
    key = normalize_name(name)
    for candidate in (key, key.rsplit("/", 1)[-1]):
        if candidate in table:
            return table[candidate]
    aliases = sorted(k for k, m in table.items() if k != m.name)
    raise ValueError(
        f"unknown model {name!r}; known models: {', '.join(list_models())}"
        f" (aliases: {', '.join(aliases)})"
    )
