"""docs/options.md from the registry: ``python -m fp4bench.options.doc > docs/options.md``.

One table row per option (name, the front ends that take it, default, meaning, and for a number
its bounds); tests/options/test_options_registry.py checks that the committed file is this text.
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
meaning wherever it is taken, and one spelling (no aliases; an abbreviation such as `--model` for
`--models` is refused). `-` is standard output for every option that writes one document
(`--verdict-json`, `--markdown`, `--csv`, `--rows-json`, `baseline migrate --out`, `stack freeze
--file`); options that name a folder or an on-disk record (`--out` of `report`, `--baselines`,
`--fp4-log`, `--benchmark-json`) refuse it (docs/outputs.md). A front end may give an option its own default (the default column
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
    text = "<br>".join(own) if len(own) == len(o.fronts) else "<br>".join([_help(o), *own])
    bounds = {f: b for f in o.fronts if (b := bounds_of(o.on(f))) is not None}
    if bounds:
        kinds = set(bounds.values())
        text += "<br>bounds: " + (next(iter(kinds)) if len(kinds) == 1 and len(bounds) == len(o.fronts)
                                  else "; ".join(f"{f}: {b}" for f, b in bounds.items()))
    return text


def bounds_of(o: Option) -> str | None:
    """The documented bounds of a numeric option's value (its type's ``bounds``), None for others."""
    return getattr(o.type, "bounds", None)


def _flags(o: Option) -> str:
    return f"`{o.name}`" + (" (required)" if o.required or any(v.get("required") for v in o.per_front.values())
                            else "")


def render() -> str:
    rows = ["| option | front ends | default | meaning |", "|---|---|---|---|"]
    rows += [f"| {_flags(o)} | {', '.join(o.fronts)} | {_default(o)} | {_meaning(o)} |" for o in OPTIONS]
    return HEADER + "\n" + "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(render(), end="")
