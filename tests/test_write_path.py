"""One write path: no module of the package but ``fp4bench.outputs`` opens a file for writing.

The test walks the package's source (AST) and fails on every call that could create, truncate,
append to or replace a file outside ``outputs.py``: ``open``/``os.fdopen``/``X.open`` with a
writing mode, ``os.open``, ``write_text``, ``write_bytes``, ``json.dump`` (to a file), an image or
figure ``save``/``savefig`` to anything but an in-memory buffer, and ``shutil`` copies and moves.
A writer that goes around ``outputs.py`` skips its checks (protected baselines, FIFOs, atomic
replace, the error that names the file), which is how baselines were lost before.
"""

from __future__ import annotations

import ast
from pathlib import Path

import fp4bench

SRC = Path(fp4bench.__file__).parent
OWNER = SRC / "outputs.py"
#: (module, function): a call that writes no file, and why
ALLOWED = {
    ("run/worker/child.py", "main"): "os.fdopen(os.dup(1), 'w'): the worker's protocol pipe to its parent, not a file",
}
#: the package's classes with an ``open`` classmethod whose first argument is a path, not a mode
#: (their own writes are walked in their bodies)
CLASSES = ("State",)
SHUTIL = {"copy", "copy2", "copyfile", "copyfileobj", "copytree", "move"}
_WRITING = set("wax+")


def _mode(call: ast.Call, index: int) -> str | None:
    """The literal mode argument of an open-like call (positional ``index`` or ``mode=``); ``"?"``
    when it is not a literal (judged as writing)."""
    node = call.args[index] if len(call.args) > index else next(
        (k.value for k in call.keywords if k.arg == "mode"), None)
    if node is None:
        return None
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else "?"


def _writes(mode: str | None) -> bool:
    return mode is not None and (mode == "?" or bool(_WRITING & set(mode)))


def _buffer(node: ast.AST) -> bool:
    """An in-memory buffer (``buf``, ``png``, ``io.BytesIO()``): saving there writes no file."""
    if isinstance(node, ast.Call):
        f = node.func
        return isinstance(f, ast.Attribute) and f.attr in ("BytesIO", "StringIO")
    return isinstance(node, ast.Name) and node.id in ("buf", "png")


def bypasses(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, enclosing function, what) of every write that does not go through ``outputs``."""
    out: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, func: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else func
            if isinstance(child, ast.Call):
                f = child.func
                attr = f.attr if isinstance(f, ast.Attribute) else None
                base = f.value.id if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) else None
                what = None
                if isinstance(f, ast.Name) and f.id == "open" and _writes(_mode(child, 1)):
                    what = "open(..., writing mode)"
                elif attr == "open" and base == "os":
                    what = "os.open"
                elif attr == "fdopen" and base == "os" and _writes(_mode(child, 1)):
                    what = "os.fdopen(..., writing mode)"
                elif attr == "open" and base not in ("os", "Image", "tarfile", "zipfile", *CLASSES) and _writes(_mode(child, 0)):
                    what = "Path.open(writing mode)"
                elif attr in ("write_text", "write_bytes"):
                    what = attr
                elif attr == "dump" and base == "json":
                    what = "json.dump to a file"
                elif attr in ("save", "savefig") and (child.args or child.keywords) and not (
                        child.args and _buffer(child.args[0])):  # no argument: no file named (a method's own write is walked in its body)
                    what = f"{attr}(path)"
                elif base == "shutil" and attr in SHUTIL:
                    what = f"shutil.{attr}"
                if what is not None:
                    out.append((child.lineno, name, what))
            visit(child, name)

    visit(tree, "<module>")
    return out


def test_no_module_but_outputs_writes_a_file():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == OWNER:
            continue
        rel = path.relative_to(SRC).as_posix()
        for line, func, what in bypasses(ast.parse(path.read_text(encoding="utf-8"))):
            if (rel, func) not in ALLOWED:
                found.append(f"{rel}:{line} ({func}): {what}")
    assert found == [], "write through fp4bench.outputs instead:\n" + "\n".join(found)


def test_the_walk_finds_each_kind_of_bypass():
    """Each form the test refuses is found in a sample (the walk itself can fail)."""
    sample = '''
import json, os, shutil
from pathlib import Path
def f(p, fig, img):
    open(p, "w"); open(p, mode="a"); open(p, "rb")
    Path(p).open("w"); Path(p).open()
    os.open(p, os.O_WRONLY)
    os.fdopen(3, "w")
    Path(p).write_text("x"); Path(p).write_bytes(b"x")
    json.dump({}, fh); json.dumps({})
    fig.savefig(p); fig.savefig(buf)
    img.save(p); img.save(io.BytesIO())
    shutil.copy(p, p); shutil.move(p, p); shutil.rmtree(p)
    state.save(); State.open(p, key)
'''
    kinds = [what for _, _, what in bypasses(ast.parse(sample))]
    assert kinds == ["open(..., writing mode)", "open(..., writing mode)", "Path.open(writing mode)", "os.open",
                     "os.fdopen(..., writing mode)", "write_text", "write_bytes", "json.dump to a file",
                     "savefig(path)", "save(path)", "shutil.copy", "shutil.move"]
