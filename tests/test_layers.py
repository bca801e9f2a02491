"""The layers of docs/architecture.md: no module imports from a layer below its own."""

from __future__ import annotations

import ast
from pathlib import Path

import fp4bench

SRC = Path(fp4bench.__file__).parent

#: top-level module or package -> layer, in the order of the table in docs/architecture.md
LAYERS = {
    "formats": 0, "outputs": 0, "deprecated": 0,
    "models": 1, "problems": 1, "workloads": 1, "options": 1,
    "operands": 2, "reference": 2, "reference_moe": 2,
    "backends": 3,
    "measure": 4, "env": 4, "jit_cache": 4, "gpus": 4,
    "testing": 5,
    "case": 6, "sweep": 6,
    "worker": 7, "windows": 7,
    "gate": 8, "linelog": 8,
    "report": 9, "reporting": 9, "textfit": 9,
    "session": 10, "ab": 10, "units": 10, "plugin_console": 10, "merge": 10,
    "plugin": 11, "plugin_runlog": 11, "plugin_outputs": 11, "plugin_compat": 11, "plugin_ab": 11, "plugin_xdist": 11,
    "cli": 11, "__main__": 11,
}


def _layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "fp4bench":
        return None
    if len(parts) == 1:
        return LAYERS["formats"]  # `from fp4bench import formats`
    name = parts[1]
    return LAYERS.get("cli" if name.startswith("cli") else name)


def test_every_module_has_a_layer():
    for p in SRC.rglob("*.py"):
        top = p.relative_to(SRC).parts[0].removesuffix(".py")
        if top != "__init__":
            assert _layer(f"fp4bench.{top}") is not None, f"{p} is in no layer of docs/architecture.md"


def test_imports_flow_one_way():
    wrong = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        if rel.parts[0] == "__init__.py":
            continue
        own = _layer("fp4bench." + rel.parts[0].removesuffix(".py"))
        for node in ast.walk(ast.parse(p.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                if isinstance(node, ast.ImportFrom) and name == "fp4bench":
                    name = "fp4bench." + node.names[0].name
                layer = _layer(name)
                if layer is not None and layer > own:
                    wrong.append(f"{rel}:{node.lineno} imports {name}")
    assert wrong == []
