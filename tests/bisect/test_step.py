"""One bisect step: the ids ab knows the benchmarks by, and a step read from ab's verdict JSON."""

from __future__ import annotations

import pytest

from fp4bench.bisect.step import Step, case_id, from_verdict


def test_a_pytest_node_name_becomes_the_id_ab_knows():
    assert case_id("bench/test_fp4_gemm.py::test_dense[torch-bf16-default-glm-5-b64-tp1-uniform-shared_down-m64n6144k2048]") \
        == "torch-bf16-default-glm-5-b64-tp1-uniform-shared_down-m64n6144k2048"
    assert case_id("sim-bf16-default-glm-5-b1-tp8-uniform-shared_down-m1n6144k256") \
        == "sim-bf16-default-glm-5-b1-tp8-uniform-shared_down-m1n6144k256"


def _doc(rows: list[tuple[str, str, float | None]], exit_code: int) -> dict:
    """ab's verdict document of an A/A run of benchmarks x and y, its rows set to (name, status, Δ %)
    and whether each fails the gate as the default ``Policy`` has it (FAIL and MISSING do)."""
    import numpy as np

    from fakes.benchjson import H200, samples
    from fp4bench.ab.judge import judge
    from fp4bench.ab.report import to_json
    from fp4bench.ab.records import AbRun, Paired, SideResult
    from fp4bench.gate.policy import Policy

    rng = np.random.default_rng(1)

    def side() -> SideResult:
        return SideResult("measured", samples=samples(rng, 20e-6, 0.01, 40), digest="d")

    run = AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}},
                [Paired(n, side(), side(), [list("ABBA")]) for n in ("x", "y")], {"A": 1.0, "B": 1.0})
    doc = to_json(run, judge(run, Policy()))
    given = {n: (st, d) for n, st, d in rows}
    doc["benchmarks"] = [dict(r, status=given[r["name"]][0], delta_pct=given[r["name"]][1],
                              fails_gate=given[r["name"]][0] in ("FAIL", "MISSING"))
                         for r in doc["benchmarks"] if r["name"] in given]
    doc["counts"] = {k: sum(r["status"] == k for r in doc["benchmarks"]) for k in doc["counts"]}
    doc["exit_code"] = exit_code
    doc["outcome"] = {0: "no regression", 1: "regression", 3: "incomplete"}[exit_code]
    return doc


@pytest.mark.parametrize("rows, code, status", [
    ([("x", "FAIL", 8.0), ("y", "PASS", 0.1)], 1, "FAIL"),
    ([("x", "PASS", 0.3), ("y", "AMBIGUOUS", 2.0)], 0, "AMBIGUOUS"),
    ([("x", "PASS", 0.3), ("y", "PASS", -0.2)], 0, "PASS"),
    ([("x", "FAIL", 8.0)], 1, "INCOMPLETE"),  # y was not judged
    ([("x", "MISSING", None), ("y", "PASS", 0.1)], 3, "INCOMPLETE"),  # ab lost x
])
def test_a_step_from_abs_verdict(rows, code, status):
    s = from_verdict("0.7.1", "0.7.2", _doc(rows, code), ["x", "y"])
    assert s.status == status
    if status == "FAIL":
        assert s.worst[0] == "x" and s.delta_pct == 8.0  # the row with the largest Δ
    assert Step.from_dict(s.to_dict()) == s
