"""The worker protocol: one JSON object per line, both ways.

Requests (parent -> child)::

    {"op": "init", "device": "cuda:0", "plugins": [...], "timing": {TimingConfig fields},
     "cold_l2": true, "seed": 0, "min_copies": 4}   run.settings.RunnerSettings.to_init
    {"op": "run", "case": CASE, "measure": true}     check + time, like CaseRunner.run
    {"op": "check", "case": CASE}                    check only, plus the reference digest
                                                     ("memory": true: the check's memory report)
    {"op": "time", "case": CASE, "samples": 10}      one short timing round (after "check";
                                                     "memory": true: the capture's memory report)
    {"op": "memory"}                                 the memory report now (child.device_memory)
    {"op": "drop"}                                   forget prepared operands ("release": every
                                                     operand set too; "placement": then a fresh
                                                     placement set, CaseRunner.new_placement)

    CASE = {"backend": name, "tactic": label, "problem": PROBLEM}

Replies (child -> parent): ``{"type": "ready", "fingerprint": {...}, "pid": n}`` once, then one
``{"type": "result", ...}`` per request. A reply with ``"fatal": <reason>`` is the child's last:
its CUDA context is poisoned and it exits; the parent starts a fresh one.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from fp4bench.run.case import CaseResult
from fp4bench.measure.timing import TimingResult
from fp4bench.measure.verify import CheckResult
from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem, Origin, Problem, QuantProblem

_PROBLEM_TYPES = {cls.kind: cls for cls in (GemmProblem, GroupedProblem, MoEProblem, QuantProblem)}


def encode_problem(problem: Problem) -> dict[str, Any]:
    d = {f.name: getattr(problem, f.name) for f in dataclasses.fields(problem)}
    d["origin"] = dataclasses.asdict(problem.origin)
    d["kind"] = problem.kind
    return d


def _tuples(v: Any) -> Any:
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def decode_problem(d: dict[str, Any]) -> Problem:
    """Inverse of ``encode_problem``; the problem's own checks reject bad values."""
    d = dict(d)
    cls = _PROBLEM_TYPES.get(d.pop("kind", None))
    if cls is None:
        raise ValueError(f"unknown problem kind in {d!r}")
    origin = Origin(**d.pop("origin", {}))
    return cls(origin=origin, **{k: _tuples(v) for k, v in d.items()})


def encode_case(backend: str, problem: Problem, tactic_label: str) -> dict[str, Any]:
    return {"backend": backend, "tactic": tactic_label, "problem": encode_problem(problem)}


def finite(v: Any) -> Any:
    """JSON has no NaN: non-finite floats travel as None."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    return v


def encode_result(res: CaseResult) -> dict[str, Any]:
    out: dict[str, Any] = {"status": res.status, "reason": res.reason, "extra_info": finite(res.extra_info)}
    if res.check is not None:
        out["check"] = finite({f.name: getattr(res.check, f.name)
                                for f in dataclasses.fields(res.check) if f.name != "output"})
    if res.timing is not None:
        out["timing"] = finite(dataclasses.asdict(res.timing))
    return out


def decode_result(d: dict[str, Any]) -> CaseResult:
    check = timing = None
    if d.get("check") is not None:
        c = {k: (math.nan if v is None and k != "detail" else v) for k, v in d["check"].items()}
        check = CheckResult(**c)
    if d.get("timing") is not None:
        t = dict(d["timing"])
        t["rel_ci"] = math.inf if t.get("rel_ci") is None else t["rel_ci"]
        timing = TimingResult(**t)
    return CaseResult(d["status"], d.get("reason", ""), check=check, timing=timing,
                      extra_info=dict(d.get("extra_info") or {}))


def dumps(msg: dict[str, Any]) -> str:
    return json.dumps(msg, allow_nan=False, separators=(",", ":")) + "\n"
