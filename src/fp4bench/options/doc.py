"""docs/options.md from the registry: ``python -m fp4bench.options.doc > docs/options.md``.

One table row per option (name, the front ends that take it, default, meaning) and one per
deprecated spelling; tests/options/test_options_registry.py checks that the committed file is this text.
"""

from __future__ import annotations

from typing import Any

from fp4bench.options.option import Option
from fp4bench.options.registry import OPTIONS

HEADER = """# fp4bench options

Every option of every front end, generated from `src/fp4bench/options/registry.py`
(`python -m fp4bench.options.doc > docs/options.md`; `tests/options/test_options_registry.py` checks that
this file is in step). The pytest plugin spells an option `--fp4-<name>` (`pytest bench --fp4-floor 3`),
each `fp4bench` command `--<name>` (`fp4bench compare A.json B.json --floor 3`); one name has one
meaning wherever it is taken. A front end may give an option its own default (the default column
names the exceptions) or say more about it (the meaning column, by front end). A default of "–" is
"not given": the meaning says what applies then.
"""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(v: Any) -> str:
    if v is None or v == []:
        return "–"
    if v is False:
        return "off"
    return f"`{v}`"


def _help(o: Option) -> str:
    return _cell(o.help_text())


def _default(o: Option) -> str:
    if o.action == "store_true":
        return "off"
    base = _value(o.default)
    other = [f"{front}: {_value(o.on(front).default)}" for front in o.fronts
             if "default" in o.per_front.get(front, {}) and o.on(front).default != o.default]
    if not other:
        return base
    if all(front in o.per_front and "default" in o.per_front[front] for front in o.fronts):
        return "; ".join(other)
    return f"{base} ({'; '.join(other)})"


def _meaning(o: Option) -> str:
    own = [f"*{front}*: {_help(o.on(front))}" for front in o.fronts
           if "help" in o.per_front.get(front, {})]
    if len(own) == len(o.fronts):
        return "<br>".join(own)
    return "<br>".join([_help(o), *own])


def _flags(o: Option) -> str:
    return f"`{o.name}`" + (" (required)" if o.required or any(v.get("required") for v in o.per_front.values())
                            else "")


def render() -> str:
    rows = ["| option | front ends | default | meaning |", "|---|---|---|---|"]
    rows += [f"| {_flags(o)} | {', '.join(o.fronts)} | {_default(o)} | {_meaning(o)} |" for o in OPTIONS]
    old = ["| old spelling | front end | use instead |", "|---|---|---|"]
    old += [f"| `{o.old_flag(front)}` | {front} | `{o.flag(front)}` |" for o in OPTIONS for front in o.fronts
            if o.old_flag(front) is not None]
    return (HEADER + "\n" + "\n".join(rows) + "\n\n## Deprecated spellings\n\nAn old spelling still works for "
            "one release: it parses into the same value and warns once, naming the new spelling.\n\n"
            + "\n".join(old) + "\n")


if __name__ == "__main__":
    print(render(), end="")
