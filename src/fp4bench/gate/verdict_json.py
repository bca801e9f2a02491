"""The verdict JSON: one versioned document for every front end that judges a run.

The stored-baseline gate (``pytest --fp4-verdict-json``, ``fp4bench compare --verdict-json``) and
``fp4bench ab`` (``--verdict-json``, and ``--fp4-verdict-json`` with ``--fp4-ab-against``) write the same
document around a ``CompareResult`` (docs/architecture.md, "Verdict JSON")::

    {"format": "fp4bench-verdict", "schema": 1, "source": "gate" | "ab",
     "exit_code": 0 | 1 | 3, "outcome": "no regression" | "regression" | "incomplete",
     "summary": "<the verdict in one line>", "counts": {"PASS": n, "FAIL": n, ...},
     "coverage": {...} | null, "changes": [{"key", "old", "new"}], "policy": {...},
     "delta_spread": {"n", "median_abs", "p95_abs", "max_abs"} | null,
     "evidence": {...what this source measured...},
     "benchmarks": [{"name", "status", "kind", "fails_gate", ..., "evidence": {...}}, ...]}

Every key is always there (``null`` where a source has no value); what only one source knows
(the baseline file; ab's processes, rounds and telemetry) is under ``evidence``, at the top and
per benchmark. ``dumps`` validates the document it writes (``validate``), so a writer that
drifts from the schema fails at once instead of writing a file its readers cannot read.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Mapping, Sequence

from fp4bench.gate.compare import CompareResult, delta_spread
from fp4bench.gate.coverage import EXIT_OK, EXIT_REGRESSION, OUTCOME
from fp4bench.gate.record import finite, short
from fp4bench.gate.verdict import Status, Verdict

FORMAT = "fp4bench-verdict"
SCHEMA = 1
SOURCES = ("gate", "ab")
#: the document's keys, in the order written
KEYS = ("format", "schema", "source", "exit_code", "outcome", "summary", "counts", "coverage", "changes", "policy",
        "delta_spread", "evidence", "benchmarks")
#: each benchmark's keys, in the order written
BENCHMARK_KEYS = ("name", "status", "kind", "fails_gate", "improved", "dispatch_changed", "reason", "base_median_s",
                  "new_median_s", "delta_pct", "interval_pct", "n_base", "n_new", "kernels_added", "kernels_removed",
                  "evidence")
SPREAD_KEYS = ("n", "median_abs", "p95_abs", "max_abs")


class VerdictJsonError(ValueError):
    """A document that is not a verdict JSON of this schema, with what is wrong in words."""


def number(x: float | None) -> float | None:
    """``x`` when it is a finite number, else None (JSON has no infinity or NaN)."""
    return x if x is not None and math.isfinite(x) else None


def benchmark(v: Verdict, fails_gate: bool, interval: Sequence[float] | None,
              evidence: Mapping[str, Any]) -> dict[str, Any]:
    """One verdict as a benchmark of the document; ``interval``: the interval of the change the
    verdict was decided on (percent; an unbounded side is null), ``evidence``: what only this
    source knows about it."""
    return {"name": v.name, "status": v.status.value, "kind": v.kind, "fails_gate": fails_gate,
            "improved": v.improved, "dispatch_changed": v.dispatch_changed, "reason": v.reason,
            "base_median_s": number(v.base_median), "new_median_s": number(v.new_median),
            "delta_pct": number(v.pct), "interval_pct": None if interval is None else [number(float(x)) for x in interval],
            "n_base": v.n_base, "n_new": v.n_new, "kernels_added": list(v.kernels_added),
            "kernels_removed": list(v.kernels_removed), "evidence": dict(evidence)}


def document(result: CompareResult, *, source: str, exit_code: int, summary: str, evidence: Mapping[str, Any],
             benchmarks: Sequence[Mapping[str, Any]], coverage: bool = True) -> dict[str, Any]:
    """The verdict document of ``result`` as ``source`` decided it: its exit status and one-line
    summary, its evidence, and ``benchmarks`` (``benchmark`` of each of ``result.sorted()``).
    ``coverage=False``: the source accounts for what it judged itself (in its evidence)."""
    spread = delta_spread(result)
    return {
        "format": FORMAT, "schema": SCHEMA, "source": source,
        "exit_code": exit_code, "outcome": OUTCOME[exit_code], "summary": summary,
        "counts": result.counts(),
        "coverage": result.coverage.to_dict() if coverage and result.coverage is not None else None,
        "changes": [{"key": k, "old": o, "new": n} for k, o, n in result.changes],
        "policy": policy_dict(result.policy),
        "delta_spread": None if spread is None else dict(zip(SPREAD_KEYS, spread)),
        "evidence": dict(evidence),
        "benchmarks": [dict(b) for b in benchmarks],
    }


def policy_dict(policy: Any) -> dict[str, Any]:
    """Every field of ``gate.policy.Policy``; its noise terms as ``{"source", "unit_source",
    "calibrated", "classes": {class: {prior_sigma, run_sigma, unit_sigma}}}``."""
    out = dataclasses.asdict(policy)
    noise = policy.noise
    out["noise"] = {"source": noise.source, "unit_source": noise.unit_source, "calibrated": noise.calibrated,
                    "classes": {c: dataclasses.asdict(t) for c, t in noise.classes}}
    return out


def dumps(doc: Mapping[str, Any]) -> str:
    """The document as JSON text (values JSON has no type for are written as text), validated as
    it will be read back."""
    text = json.dumps(doc, indent=1, default=str) + "\n"
    validate(json.loads(text))
    return text


# --- validation -------------------------------------------------------------------------------------


def _keys(obj: Any, keys: Sequence[str], where: str) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise VerdictJsonError(f"{where} must be an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    unknown = sorted(set(obj) - set(keys))
    if missing or unknown:
        raise VerdictJsonError(f"{where}: " + "; ".join(
            x for x in (f"missing keys {missing}" if missing else "", f"unknown keys {unknown}" if unknown else "") if x))
    return obj


def _check(ok: bool, where: str, what: str, value: Any) -> None:
    if not ok:
        raise VerdictJsonError(f"{where} must be {what}, got {short(value)}")


def _number_or_null(x: Any) -> bool:
    return x is None or finite(x)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def validate(doc: Any) -> dict[str, Any]:
    """``doc`` when it is a verdict document of this schema; else ``VerdictJsonError`` naming the
    key and what is wrong."""
    if isinstance(doc, dict) and doc.get("format") != FORMAT:
        raise VerdictJsonError(f"verdict JSON: 'format' is {doc.get('format')!r}, not {FORMAT!r}")
    d = _keys(doc, KEYS, "verdict JSON")
    schema = d["schema"]
    _check(_count(schema), "verdict JSON 'schema'", "an integer", schema)
    if schema > SCHEMA:
        raise VerdictJsonError(f"verdict JSON schema {schema} is newer than this fp4bench reads ({SCHEMA}); "
                               "upgrade fp4bench")
    _check(schema == SCHEMA, "verdict JSON 'schema'", f"{SCHEMA}", schema)
    _check(d["source"] in SOURCES, "verdict JSON 'source'", f"one of {list(SOURCES)}", d["source"])
    _check(d["exit_code"] in OUTCOME and not isinstance(d["exit_code"], bool), "verdict JSON 'exit_code'",
           f"one of {sorted(OUTCOME)}", d["exit_code"])
    _check(d["outcome"] == OUTCOME[d["exit_code"]], "verdict JSON 'outcome'", repr(OUTCOME[d["exit_code"]]),
           d["outcome"])
    _check(isinstance(d["summary"], str), "verdict JSON 'summary'", "text", d["summary"])
    counts = _keys(d["counts"], [s.value for s in Status], "verdict JSON 'counts'")
    for k, n in counts.items():
        _check(_count(n), f"verdict JSON 'counts'[{k!r}]", "a count", n)
    for key in ("coverage", "delta_spread"):
        _check(d[key] is None or isinstance(d[key], dict), f"verdict JSON {key!r}", "an object or null", d[key])
    if d["delta_spread"] is not None:
        for k, x in _keys(d["delta_spread"], SPREAD_KEYS, "verdict JSON 'delta_spread'").items():
            _check(finite(x), f"verdict JSON 'delta_spread'[{k!r}]", "a finite number", x)
    _check(isinstance(d["changes"], list), "verdict JSON 'changes'", "a list", d["changes"])
    for i, c in enumerate(d["changes"]):
        _keys(c, ("key", "old", "new"), f"verdict JSON 'changes'[{i}]")
    for key in ("policy", "evidence"):
        _check(isinstance(d[key], dict), f"verdict JSON {key!r}", "an object", d[key])
    _check(isinstance(d["benchmarks"], list), "verdict JSON 'benchmarks'", "a list", d["benchmarks"])
    for i, b in enumerate(d["benchmarks"]):
        _benchmark(b, f"verdict JSON 'benchmarks'[{i}]")
    seen = {s.value: 0 for s in Status}
    for b in d["benchmarks"]:
        seen[b["status"]] += 1
    if seen != counts:
        raise VerdictJsonError(f"verdict JSON 'counts' {counts} do not count its benchmarks ({seen})")
    _meaning(d)
    return d


def _meaning(d: dict[str, Any]) -> None:
    """What the document says agrees with itself: each benchmark named once, and the exit code
    with its benchmarks: 1 (regression) needs a measured benchmark that fails the gate (MISSING is
    a coverage gap); 0 (no regression) none that fails it; 3 (incomplete) no FAIL that fails it
    (a FAIL is a regression, which wins over incomplete)."""
    names: dict[str, int] = {}
    for i, b in enumerate(d["benchmarks"]):
        if b["name"] in names:
            raise VerdictJsonError(f"verdict JSON 'benchmarks'[{i}]: {b['name']!r} is also benchmark "
                                   f"[{names[b['name']]}]; each benchmark is judged once")
        names[b["name"]] = i
    code = d["exit_code"]
    failing = [b["name"] for b in d["benchmarks"] if b["fails_gate"]
               and (b["status"] == Status.FAIL.value or code == EXIT_OK)]
    if failing and code != EXIT_REGRESSION:
        raise VerdictJsonError(f"verdict JSON 'exit_code' {code} contradicts its benchmarks: {len(failing)} fail the "
                               f"gate ({short(failing)})")
    measured = [b for b in d["benchmarks"] if b["fails_gate"] and b["status"] != Status.MISSING.value]
    if not measured and code == EXIT_REGRESSION:
        raise VerdictJsonError(f"verdict JSON 'exit_code' {EXIT_REGRESSION} (regression) contradicts its "
                               "benchmarks: none of them fails the gate")


def loads(text: str) -> dict[str, Any]:
    """Read and ``validate`` a verdict JSON text; ``NaN``/``Infinity`` (which Python's json reads
    but JSON has not) are refused by name."""
    def constant(name: str) -> Any:
        raise VerdictJsonError(f"verdict JSON: {name} is not a JSON number")
    try:
        doc = json.loads(text, parse_constant=constant)
    except json.JSONDecodeError as exc:
        raise VerdictJsonError(f"verdict JSON: not JSON ({exc})") from None
    return validate(doc)


def _benchmark(b: Any, where: str) -> None:
    _keys(b, BENCHMARK_KEYS, where)
    _check(isinstance(b["name"], str) and b["name"] != "", f"{where} 'name'", "a non-empty name", b["name"])
    _check(b["status"] in [s.value for s in Status], f"{where} 'status'", f"one of {[s.value for s in Status]}",
           b["status"])
    for key in ("kind", "reason"):
        _check(isinstance(b[key], str), f"{where} {key!r}", "text", b[key])
    for key in ("fails_gate", "improved", "dispatch_changed"):
        _check(isinstance(b[key], bool), f"{where} {key!r}", "true or false", b[key])
    for key in ("base_median_s", "new_median_s", "delta_pct"):
        _check(_number_or_null(b[key]), f"{where} {key!r}", "a finite number or null", b[key])
    iv = b["interval_pct"]
    _check(iv is None or (isinstance(iv, list) and len(iv) == 2 and all(_number_or_null(x) for x in iv)),
           f"{where} 'interval_pct'", "[lower, upper] or null", iv)
    for key in ("n_base", "n_new"):
        _check(_count(b[key]), f"{where} {key!r}", "a count", b[key])
    for key in ("kernels_added", "kernels_removed"):
        _check(isinstance(b[key], list) and all(isinstance(k, str) for k in b[key]), f"{where} {key!r}",
               "a list of kernel names", b[key])
    _check(isinstance(b["evidence"], dict), f"{where} 'evidence'", "an object", b["evidence"])


def failing(doc: Any, source: str = "verdict JSON") -> list[str]:
    """The names of the benchmarks a verdict document judged FAIL (in its order); ``VerdictJsonError``
    for a document that is not one, or one without a FAIL."""
    d = validate(doc)
    names = [b["name"] for b in d["benchmarks"] if b["status"] == Status.FAIL.value]
    if not names:
        raise VerdictJsonError(f"{source}: no benchmark is FAIL (outcome {d['outcome']!r}): nothing to bisect")
    return names
