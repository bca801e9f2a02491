"""The verdict JSON (``fp4bench.gate.verdict_json``): the gate and ``fp4bench ab`` write one
versioned schema, it reads back as written, and a document that is not of it is refused with the
key that is wrong."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples
from fp4bench.ab.judge import judge as ab_judge
from fp4bench.ab.report import to_json
from fp4bench.ab.records import AbRun, Paired, SideResult
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.policy import Policy
from fp4bench.gate.verdict_json import BENCHMARK_KEYS, FORMAT, KEYS, SCHEMA, VerdictJsonError, dumps, validate
from fp4bench.report.machine import verdict_json

MED = 23.1e-6
NAMES = [f"bench/test_fp4_gemm.py::test_dense[x{i}]" for i in range(3)]


def _gate_doc() -> dict:
    """A gate verdict: one benchmark 40 % slower (FAIL), one unchanged, one MISSING. Neither side
    names its unit, so the unchanged one is judged with another unit's offset: AMBIGUOUS."""
    rng = np.random.default_rng(0)
    base = parse_baseline(bench_json([bench_entry(n, samples(rng, MED, 0.005)) for n in NAMES]))
    now = {NAMES[0]: ([samples(rng, MED * 1.4, 0.005) for _ in range(3)], {}),
           NAMES[1]: ([samples(rng, MED, 0.005) for _ in range(3)], {})}
    result = compare(base, now, current_fingerprint=replace(H200, driver="590.1"))
    return verdict_json(result, baseline="approved.json")


def _ab_doc() -> dict:
    rng = np.random.default_rng(1)

    def side() -> SideResult:
        return SideResult("measured", samples=samples(rng, MED, 0.01, 40), digest="d")

    run = AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}},
                [Paired(n, side(), side(), [list("ABBA")]) for n in NAMES[:2]], {"A": 1.0, "B": 1.0})
    return to_json(run, ab_judge(run, Policy()))


def test_the_gate_and_ab_write_the_same_versioned_schema():
    gate, ab = _gate_doc(), _ab_doc()
    for doc, source in ((gate, "gate"), (ab, "ab")):
        assert tuple(doc) == KEYS
        assert (doc["format"], doc["schema"], doc["source"]) == (FORMAT, SCHEMA, source)
        assert doc["benchmarks"] and all(tuple(b) == BENCHMARK_KEYS for b in doc["benchmarks"])
        assert validate(json.loads(dumps(doc)))["source"] == source
    assert gate["exit_code"] == 1 and gate["outcome"] == "regression"
    assert [b["status"] for b in gate["benchmarks"]] == ["FAIL", "MISSING", "AMBIGUOUS"]
    assert gate["benchmarks"][0]["fails_gate"] and gate["benchmarks"][0]["delta_pct"] == pytest.approx(40, abs=3)
    assert gate["evidence"]["baseline"] == "approved.json" and gate["coverage"]["missing"] == [NAMES[2]]
    assert {"key": "driver", "old": "580.1", "new": "590.1"} in gate["changes"]
    assert set(gate["policy"]) == set(ab["policy"])  # one policy record: every field of gate.policy.Policy
    assert ab["coverage"] is None and "processes" in ab["evidence"] and "round_order" in ab["benchmarks"][0]["evidence"]


def test_a_document_reads_back_as_written():
    doc = _gate_doc()
    text = dumps(doc)
    assert json.loads(text) == doc
    assert validate(json.loads(text)) == doc
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))  # no NaN / Infinity


def _set(path, value):
    def edit(doc):
        *head, last = path
        target = doc
        for key in head:
            target = target[key]
        if value is KeyError:
            del target[last]
        else:
            target[last] = value
    return edit


@pytest.mark.parametrize("edit, message", [
    (_set(["format"], "fp4bench-baseline"), "'format' is 'fp4bench-baseline', not 'fp4bench-verdict'"),
    (_set(["schema"], SCHEMA + 1), f"schema {SCHEMA + 1} is newer than this fp4bench reads"),
    (_set(["schema"], 0), "'schema' must be 1, got 0"),
    (_set(["source"], "units"), "'source' must be one of ['gate', 'ab'], got 'units'"),
    (_set(["summary"], KeyError), "verdict JSON: missing keys ['summary']"),
    (_set(["extra"], 1), "verdict JSON: unknown keys ['extra']"),
    (_set(["exit_code"], 2), "'exit_code' must be one of [0, 1, 3], got 2"),
    (_set(["outcome"], "no regression"), "'outcome' must be 'regression', got 'no regression'"),
    (_set(["counts", "PASS"], 5), "'counts' {"),
    (_set(["delta_spread", "n"], "3"), "'delta_spread'['n'] must be a finite number, got '3'"),
    (_set(["changes", 0, "new"], KeyError), "'changes'[0]: missing keys ['new']"),
    (_set(["benchmarks", 1, "status"], "LOST"), "'benchmarks'[1] 'status' must be one of"),
    (_set(["benchmarks", 0, "fails_gate"], 1), "'benchmarks'[0] 'fails_gate' must be true or false, got 1"),
    (_set(["benchmarks", 0, "interval_pct"], [1.0]), "'benchmarks'[0] 'interval_pct' must be [lower, upper] or null"),
    (_set(["benchmarks", 2, "evidence"], KeyError), "'benchmarks'[2]: missing keys ['evidence']"),
    (_set(["benchmarks", 2, "n_new"], -1), "'benchmarks'[2] 'n_new' must be a count, got -1"),
])
def test_a_document_not_of_the_schema_is_refused_naming_the_key(edit, message):
    doc = copy.deepcopy(_gate_doc())
    edit(doc)
    with pytest.raises(VerdictJsonError) as err:
        validate(doc)
    assert message in str(err.value)
    with pytest.raises(VerdictJsonError):  # a writer never writes it
        dumps(doc)


def test_what_is_not_an_object_is_refused():
    with pytest.raises(VerdictJsonError, match="verdict JSON must be an object, got list"):
        validate([])


def test_failing_names_the_fail_benchmarks_and_refuses_a_document_without_one():
    from fp4bench.gate.verdict_json import failing

    assert failing(_gate_doc()) == [NAMES[0]]
    with pytest.raises(VerdictJsonError, match="no benchmark is FAIL"):
        failing(_ab_doc())


def test_a_document_whose_meaning_contradicts_itself_is_refused():
    """Shape is not enough: an exit code its benchmarks contradict, a NaN or infinite number and a
    benchmark named twice are each refused, naming what is wrong."""
    from fp4bench.gate.verdict_json import loads

    gate = _gate_doc()  # FAIL, MISSING, PASS -> exit 1
    passing = copy.deepcopy(gate)
    passing.update(exit_code=0, outcome="no regression")
    with pytest.raises(VerdictJsonError, match=r"'exit_code' 0 contradicts its benchmarks: 2 fail the gate"):
        validate(passing)
    no_fail = copy.deepcopy(gate)
    for b in no_fail["benchmarks"]:
        b["fails_gate"] = False
    with pytest.raises(VerdictJsonError, match=r"'exit_code' 1 \(regression\) contradicts its benchmarks: none"):
        validate(no_fail)
    twice = copy.deepcopy(gate)
    twice["benchmarks"][2]["name"] = twice["benchmarks"][0]["name"]
    twice["counts"][twice["benchmarks"][2]["status"]] -= 1  # the counts stay true: only the name is wrong
    twice["benchmarks"][2]["status"] = "FAIL"
    twice["counts"]["FAIL"] += 1
    with pytest.raises(VerdictJsonError, match=r"\[2\]: .* is also benchmark \[0\]"):
        validate(twice)
    for bad in ("NaN", "Infinity", "-Infinity"):
        text = dumps(gate).replace(f'"delta_pct": {json.dumps(gate["benchmarks"][0]["delta_pct"])}',
                                   f'"delta_pct": {bad}', 1)
        assert bad in text
        with pytest.raises(VerdictJsonError, match=f"{bad} is not a JSON number"):
            loads(text)
        with pytest.raises(VerdictJsonError, match="'delta_pct' must be a finite number or null"):
            validate(json.loads(text))
    assert loads(dumps(gate)) == gate
