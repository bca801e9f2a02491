"""One option: a name with one meaning, the front ends that take it, its value, default and help.

The pytest plugin spells an option ``--fp4-<name>``, a command ``--<name>`` (``Option.flag``);
``--fp4-floor`` and ``fp4bench compare --floor`` are one option. It means the same wherever it is
taken; a front end may give it its own default, bounds or help wording (``per_front``): ``--floor``
is 5 % in a gated pytest run and 3 % in ``fp4bench ab``, whose two stacks run side by side. An
option has exactly one spelling on each front end.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

PYTEST = "pytest"
#: every ``fp4bench`` command that takes options, spelled as on the command line
COMMANDS = ("env", "compare", "power", "fidelity", "baseline approve", "baseline migrate", "ab", "units",
            "calibrate", "workload", "shapes", "report", "prepare", "stack freeze", "bisect", "history")
FRONT_ENDS = (PYTEST, *COMMANDS)
#: what a front end may set its own way
PER_FRONT = ("default", "help", "type", "required")
ACTIONS = (None, "store_true", "append")

_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*\Z")


@dataclass(frozen=True)
class Option:
    """``name`` (``--fp4-<name>`` / ``--<name>``), ``help`` (its meaning; ``%(default)s`` is
    expanded as argparse does), ``fronts`` (the front ends that take it), the argparse value
    settings and ``per_front`` (front end -> its own ``PER_FRONT`` values)."""

    name: str
    help: str
    fronts: tuple[str, ...]
    type: Callable[[str], Any] | None = None
    default: Any = None
    action: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    nargs: str | None = None
    const: Any = None
    required: bool = False
    per_front: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        what = f"option {self.name!r}"
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise ValueError(f"{what}: a name is lower-case words joined by '-'")
        if not self.help or not self.help.strip():
            raise ValueError(f"{what}: no help")
        if not self.fronts or len(set(self.fronts)) != len(self.fronts):
            raise ValueError(f"{what}: fronts must name each front end once, got {self.fronts}")
        for front in (*self.fronts, *self.per_front):
            if front not in FRONT_ENDS:
                raise ValueError(f"{what}: unknown front end {front!r}; known: {', '.join(FRONT_ENDS)}")
        for front in self.per_front:
            if front not in self.fronts:
                raise ValueError(f"{what}: {front!r} sets its own value but does not take the option")
        for front, values in self.per_front.items():
            bad = sorted(set(values) - set(PER_FRONT))
            if bad:
                raise ValueError(f"{what}: {front} may set only {', '.join(PER_FRONT)}, got {', '.join(bad)}")
        if self.action not in ACTIONS:
            raise ValueError(f"{what}: action {self.action!r} is not one of {ACTIONS}")

    def on(self, front: str) -> Option:
        """The option as ``front`` takes it: its own default, type, help."""
        if front not in self.fronts:
            raise ValueError(f"--{self.name} is not an option of {front}; it is one of {', '.join(self.fronts)}")
        return dataclasses.replace(self, **self.per_front.get(front, {}))

    def flag(self, front: str) -> str:
        return _flag(self.name, front)

    def arguments(self) -> dict[str, Any]:
        """Keyword arguments for argparse's ``add_argument`` / pytest's ``addoption``."""
        out: dict[str, Any] = {"default": self.default, "help": self.help}
        for key in ("type", "action", "choices", "metavar", "nargs", "const"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.required:
            out["required"] = True
        return out

    def help_text(self) -> str:
        """``help`` with its default filled in, as ``--help`` shows it."""
        return self.help % {"default": self.default}


def _flag(name: str, front: str) -> str:
    return f"--fp4-{name}" if front == PYTEST else f"--{name}"
