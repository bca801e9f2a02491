"""Messages fit the 160 characters a line the README promises (``report.textfit.WIDTH``).

An error is printed after a prefix (``ERROR: fp4bench: ``, ``fp4bench compare: error: ``) and
with its values filled in, so the fixed text of one line of a raised message leaves room for
both: at most ``FIXED`` characters. A command's usage error is wrapped to the width whatever
its length (``cli.command.fail``).
"""

from __future__ import annotations

import ast

from fakes.paths import ROOT
from fp4bench.report.textfit import WIDTH

#: the fixed text of one line of a raised message, at most: 160 less a prefix of ~10 characters
FIXED = WIDTH - 10


def _fixed_text(node: ast.AST) -> str | None:
    """A message argument's text without its placeholders (None: not a literal message)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        a, b = _fixed_text(node.left), _fixed_text(node.right)
        return None if a is None or b is None else a + b
    return None


def test_every_raised_message_leaves_room_for_its_values_and_prefix():
    long = []
    for path in sorted((ROOT / "src" / "fp4bench").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                text = _fixed_text(node.exc.args[0]) or ""
                for line in text.splitlines():
                    if len(line) > FIXED:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno}: {len(line)}: {line[:80]}...")
    assert not long, "\n".join(long)



def test_a_runs_closing_messages_are_wrapped_to_the_width():
    """The lines the pytest plugin writes after the tables (a candidate's path, twice; a window
    that could not be measured, with its benchmark's name) are wrapped, whatever the paths."""
    from fp4bench.plugin.hooks import _writer

    lines: list[str] = []

    class Reporter:
        write_line = staticmethod(lines.append)

    path = "baselines/nvidia-h200/candidates/" + "a-long-folder-name/" * 3 + "20261206T010203Z.json"
    _writer(Reporter())(f"candidate baseline written to {path}; approve it with: fp4bench baseline approve {path}")
    assert len(lines) > 1 and all(len(line) <= WIDTH for line in lines)
    assert " ".join(line.strip() for line in lines).endswith(f"fp4bench baseline approve {path}")
