"""The pytest plugin's modules: importing the plugin (every pytest run does) loads no torch, numpy
or scipy, and pytest-benchmark's internal objects are reached from ``plugin/benchmark.py`` only."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import fp4bench

SRC = Path(fp4bench.__file__).parent
HOME = Path("plugin") / "benchmark.py"
#: pytest-benchmark's private or undocumented names fp4bench touches
INTERNAL = {"_benchmarksession", "_make_stats", "_mode", "xdist_warning"}


def test_importing_the_plugin_loads_no_torch_numpy_or_scipy():
    code = ("import json, sys\nimport fp4bench.plugin\n"
            "print(json.dumps([m for m in ('torch', 'numpy', 'scipy') if m in sys.modules]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == []


def _internal_uses(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.split(".")[0] == "pytest_benchmark"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "pytest_benchmark":
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Attribute) and node.attr in INTERNAL:
            out.append((node.lineno, node.attr))
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and node.attr.startswith("benchmark_"):
            out.append((node.lineno, f"sets {node.attr}"))  # an option pytest-benchmark reads
        elif isinstance(node, ast.Constant) and node.value in INTERNAL:
            out.append((node.lineno, f"{node.value!r}"))  # getattr(obj, "_benchmarksession")
    return out


def test_pytest_benchmark_internals_are_reached_from_one_module():
    found = {}
    for p in sorted(SRC.rglob("*.py")):
        uses = _internal_uses(ast.parse(p.read_text()))
        if uses:
            found[str(p.relative_to(SRC))] = uses
    assert str(HOME) in found  # the scan sees them where they are
    assert {k: v for k, v in found.items() if k != str(HOME)} == {}


def test_the_scan_sees_each_kind_of_use():
    text = ("import pytest_benchmark\nfrom pytest_benchmark.stats import Stats\nb._mode = 1\n"
            "getattr(c, '_benchmarksession')\nc.option.benchmark_json = 'x'\n")
    assert sorted(line for line, _ in _internal_uses(ast.parse(text))) == [1, 2, 3, 4, 5]
