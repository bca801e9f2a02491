"""What a bisect measured, on disk after every step: a rerun of the same bisect resumes from it.

The state file is JSON (``format: fp4bench-bisect``) keyed by what the bisect is (the package, the
good and bad versions, the benchmarks, the floor): a file of another bisect is refused, never
mixed in. It holds every ``Step`` measured (by pair) and every release that could not be built,
with why. Each change is written through ``outputs.write_atomic``, so an interrupted bisect leaves
the file as it was after its last finished step.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp4bench.bisect.step import Step
from fp4bench.outputs import write_atomic

FORMAT = "fp4bench-bisect"
SCHEMA = 1


class StateError(ValueError):
    """A state file that is not this bisect's, or not a bisect state at all."""


@dataclass
class State:
    path: Path
    key: dict[str, Any]
    steps: dict[tuple[str, str], Step] = field(default_factory=dict)
    #: version -> why it could not be installed, imported or prepared
    broken: dict[str, str] = field(default_factory=dict)

    @classmethod
    def open(cls, path: str | os.PathLike[str], key: dict[str, Any]) -> "State":
        """The state at ``path`` (an empty one when there is no file yet)."""
        p = Path(path)
        if not p.exists():
            return cls(p, dict(key))
        try:
            doc = json.loads(p.read_text())
        except (OSError, ValueError) as exc:
            raise StateError(f"{p}: not a readable bisect state ({exc}); remove it or name another --state") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("schema") != SCHEMA:
            raise StateError(f"{p}: not a {FORMAT} state of schema {SCHEMA}")
        if doc.get("key") != json.loads(json.dumps(key)):
            raise StateError(f"{p}: the state of another bisect ({doc.get('key')}); this one is {key}: "
                             "name another --state")
        steps = {(s["a"], s["b"]): Step.from_dict(s) for s in doc.get("steps", [])}
        return cls(p, dict(key), steps, {str(k): str(v) for k, v in doc.get("broken", {}).items()})

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "schema": SCHEMA, "key": self.key,
                "steps": [s.to_dict() for s in self.steps.values()], "broken": self.broken}

    def save(self) -> None:
        write_atomic(self.path, json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n")

    def record(self, step: Step) -> None:
        self.steps[(step.a, step.b)] = step
        self.save()

    def mark_broken(self, v: str, why: str) -> None:
        self.broken[v] = why
        self.save()
