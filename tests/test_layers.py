"""The layer table of docs/architecture.md, read from the document itself: every top-level package
or module of ``src/fp4bench`` is in exactly one layer, and no import runs from a layer to a later one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fp4bench
from fakes.paths import ROOT

SRC = Path(fp4bench.__file__).parent
DOC = ROOT / "docs" / "architecture.md"


def layers_of_doc(text: str) -> dict[str, int]:
    """``{top-level name: layer number}`` from the table under "## Layers": a row is
    ``| <n> <title> | `pkg/`, `module.py` | ... |``."""
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    layers: dict[str, int] = {}
    for row in section.splitlines():
        m = re.match(r"\|\s*(\d+)\s[^|]*\|([^|]*)\|", row)
        if not m:
            continue
        for name in re.findall(r"`([\w]+)(?:/|\.py)`", m.group(2)):
            assert name not in layers, f"{name} is in two layers of docs/architecture.md"
            layers[name] = int(m.group(1))
    return layers


LAYERS = layers_of_doc(DOC.read_text())


def _top(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "fp4bench" and len(parts) > 1 else None


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "fp4bench":
                yield from ((node.lineno, f"fp4bench.{a.name}") for a in node.names)
            else:
                yield node.lineno, node.module
        elif isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names)


def test_the_table_is_read():
    assert LAYERS["formats"] == 1 and LAYERS["cli"] == LAYERS["plugin"] > LAYERS["gate"] > LAYERS["measure"]
    with __import__("pytest").raises(AssertionError, match="two layers"):
        layers_of_doc("## Layers\n| 1 a | `x/` |  |\n| 2 b | `x.py` |  |\n")


def test_every_top_level_name_has_one_layer():
    tops = {p.name.removesuffix(".py") for p in SRC.iterdir()
            if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__init__.py"}
    assert sorted(tops - set(LAYERS)) == [], "in no layer of docs/architecture.md"
    assert sorted(set(LAYERS) - tops) == [], "in docs/architecture.md but not in src/fp4bench"


def test_imports_flow_one_way():
    wrong = []
    for p in sorted(SRC.rglob("*.py")):
        rel = p.relative_to(SRC)
        if rel.parts == ("__init__.py",):
            continue
        own = LAYERS[rel.parts[0].removesuffix(".py")]
        for line, name in _imports(p):
            top = _top(name)
            if top is not None and top in LAYERS and LAYERS[top] > own:
                wrong.append(f"{rel}:{line} imports {name} (layer {LAYERS[top]} > {own})")
    assert wrong == []


def test_no_import_cycle_between_modules():
    """No two modules import each other, directly or around a loop (imports inside functions
    count: a lazy import still ties the two modules together)."""
    graph: dict[str, set[str]] = {}
    for p in SRC.rglob("*.py"):
        mod = ".".join(("fp4bench", *p.relative_to(SRC).with_suffix("").parts)).removesuffix(".__init__")
        deps = set()
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("fp4bench"):
                deps |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names if a.name.startswith("fp4bench")}
        graph[mod] = deps
    graph = {m: {d for d in deps if d in graph and d != m and not m.startswith(d + ".")} for m, deps in graph.items()}
    seen: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> list[str] | None:
        seen[m] = 1
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                return path + [m, d]
            if d not in seen and (cycle := visit(d, path + [m])):
                return cycle
        seen[m] = 2
        return None

    for m in sorted(graph):
        if m not in seen:
            cycle = visit(m, [])
            assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


def test_the_tests_mirror_the_package():
    """A test folder is named after the package it tests (``fakes``, ``data`` and ``workflows``,
    the CI and deployment files, aside); the test files at the top test top-level modules or
    the package across its layers."""
    from fakes.paths import TESTS

    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").exists()}
    folders = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    assert sorted(folders - packages - {"fakes", "data", "workflows"}) == []
