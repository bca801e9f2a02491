"""One bisect step: ``fp4bench ab`` of two releases' venvs on the failing benchmarks, read back
from its verdict JSON (``gate.verdict_json``) as a ``Step``.

A step's ``status`` is ab's verdict over the benchmarks: ``FAIL`` when one of them is shown
slower beyond the floor, ``PASS`` when none is, ``AMBIGUOUS`` when one stayed undecided and none
failed, ``INCOMPLETE`` when ab judged less than it was asked (exit 3). Its Δ and interval are
those of the benchmark with the largest Δ.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from fp4bench.gate.verdict_json import VerdictJsonError, validate

STATUSES = ("PASS", "FAIL", "AMBIGUOUS", "INCOMPLETE")


@dataclass(frozen=True)
class Step:
    """``b`` against ``a`` (versions as text): the verdict and, per benchmark, ``[Δ %, low %, high %,
    status]`` (a bound that is unknown is None)."""

    a: str
    b: str
    status: str
    benchmarks: dict[str, list[Any]] = field(default_factory=dict)
    summary: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"step {self.a} -> {self.b}: status {self.status!r} is not one of {STATUSES}")

    @property
    def worst(self) -> tuple[str, list[Any]] | None:
        """The benchmark with the largest Δ, and its numbers."""
        known = [(n, v) for n, v in self.benchmarks.items() if v[0] is not None]
        return max(known, key=lambda kv: kv[1][0]) if known else None

    @property
    def delta_pct(self) -> float | None:
        w = self.worst
        return None if w is None else w[1][0]

    @property
    def slower(self) -> bool:
        return self.status == "FAIL"

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "status": self.status, "benchmarks": self.benchmarks,
                "summary": self.summary}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Step":
        return cls(str(d["a"]), str(d["b"]), str(d["status"]), {str(k): list(v) for k, v in d["benchmarks"].items()},
                   str(d.get("summary", "")))


def case_id(name: str) -> str:
    """The benchmark id ``fp4bench ab`` knows a benchmark by: a pytest run's verdict names it by its
    node (``bench/test_fp4_gemm.py::test_dense[<id>]``), ab by the id in the brackets."""
    head, sep, rest = name.partition("[")
    return rest[:-1] if sep and "::" in head and rest.endswith("]") else name


def from_verdict(a: str, b: str, doc: dict[str, Any], benchmarks: Sequence[str]) -> Step:
    """The step of a verdict JSON of ``fp4bench ab``: the rows of ``benchmarks``; a benchmark it
    does not hold makes the step INCOMPLETE."""
    validate(doc)
    rows = {r["name"]: r for r in doc["benchmarks"]}
    out = {n: [rows[n]["delta_pct"], *(rows[n]["interval_pct"] or [None, None]), rows[n]["status"]]
           for n in benchmarks if n in rows}
    if doc["exit_code"] == 3 or len(out) < len(benchmarks):
        status = "INCOMPLETE"
    elif any(v[3] == "FAIL" for v in out.values()):
        status = "FAIL"
    elif any(v[3] != "PASS" for v in out.values()):
        status = "AMBIGUOUS"
    else:
        status = "PASS"
    return Step(a, b, status, out, str(doc["summary"]))


#: ``measure(a_version, a_venv, b_version, b_venv) -> Step``
Measure = Callable[[str, Path, str, Path], Step]


def ab_measure(benchmarks: Sequence[str], floor_pct: float, ab_args: str, run_ab: Callable[[list[str]], int]
               ) -> Measure:
    """A ``Measure`` that runs ``fp4bench ab --a A --b B --only ... --floor ... --verdict-json ...``
    plus ``ab_args`` (the sweep options of the failing run: the benchmark ids depend on them)
    through ``run_ab`` (the command's entry point, ``cli.ab.ab_main``: its workers run in the two
    venvs) and reads its verdict JSON. ab's report goes to stderr, with its progress."""
    extra = shlex.split(ab_args)

    def measure(a: str, a_venv: Path, b: str, b_venv: Path) -> Step:
        with tempfile.TemporaryDirectory(prefix="fp4bench-bisect-") as tmp:
            out = Path(tmp) / "ab.json"
            argv = ["--a", str(a_venv), "--b", str(b_venv), "--only", ",".join(benchmarks), "--floor",
                    f"{floor_pct:g}", "--verdict-json", str(out), *extra]
            print(f"bisect: fp4bench ab {a} -> {b}", file=sys.stderr, flush=True)
            with contextlib.redirect_stdout(sys.stderr):
                code = run_ab(argv)
            if code == 2 or not out.is_file():
                raise RuntimeError(f"fp4bench ab {a} -> {b} exited {code} without a verdict: "
                                   f"fp4bench ab {shlex.join(argv)}")
            try:
                return from_verdict(a, b, json.loads(out.read_text()), benchmarks)
            except (VerdictJsonError, ValueError, KeyError) as exc:
                raise RuntimeError(f"fp4bench ab {a} -> {b}: unreadable verdict JSON ({exc})") from None

    return measure
