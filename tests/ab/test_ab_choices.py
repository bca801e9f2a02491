"""``fp4bench ab`` shows what the library chose on each side of a library-choice row."""

from __future__ import annotations

from fakes.benchjson import H200
from fp4bench.ab.judge import judge
from fp4bench.ab.report import choices, report, to_json
from fp4bench.ab.records import AbRun, Paired, SideResult
from fp4bench.gate.policy import Policy

CUTLASS = {"backend": "cutlass", "tactic": -1, "tuned": False, "compare_with": "flashinfer-cutlass"}
CUDNN = {"backend": "cudnn", "tactic": -1, "tuned": False, "compare_with": "flashinfer-cudnn"}


def _side(choice: dict | None) -> SideResult:
    extra = {"backend": "flashinfer-auto", "problem": "p"} | ({"choice": choice} if choice else {})
    return SideResult("measured", samples=[1e-5] * 8, digest="d", extra_info=extra)


def _run() -> AbRun:
    pairs = [Paired("b::t[auto]", _side(CUTLASS), _side(CUDNN)), Paired("b::t[tuned]", _side(CUTLASS), _side(CUTLASS)),
             Paired("b::t[fixed]", _side(None), _side(None))]
    return AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}}, pairs, {"A": 0, "B": 0})


def test_the_two_sides_choices_stand_side_by_side_and_a_change_is_marked():
    run = _run()
    assert choices(run) == [["b::t[auto]", "cutlass tactic -1", "cudnn tactic -1", "changed"],
                            ["b::t[tuned]", "cutlass tactic -1", "cutlass tactic -1", ""]]
    result = judge(run, Policy(allow_missing=True))
    text = report(run, result)
    assert "what the library chose (library-choice rows), A and B:" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("b::t[auto]"))
    assert line.split() == ["b::t[auto]", "cutlass", "tactic", "-1", "cudnn", "tactic", "-1", "changed"]
    (auto,) = [v for v in result.verdicts if v.name == "b::t[auto]"]
    assert "choice changed: cutlass tactic -1 → cudnn tactic -1" in auto.reason  # kept by the replicate rule
    rows = {r["name"]: r["evidence"] for r in to_json(run, result)["benchmarks"]}
    assert (rows["b::t[auto]"]["a_choice"], rows["b::t[auto]"]["b_choice"]) == (CUTLASS, CUDNN)
    assert rows["b::t[fixed]"]["a_choice"] is None and rows["b::t[fixed]"]["b_choice"] is None


def test_a_judged_pair_keeps_the_choice_note_after_the_replicate_rule():
    from fp4bench.ab.estimate import MIN_REPLICATES
    from fp4bench.ab.judge import _ruled
    from fp4bench.gate.verdict import Status, Verdict
    from fp4bench.gate.rule import RuleSettings

    v = Verdict(name="b::t[auto]", status=Status.PASS, reason="choice changed: a tactic -1 → b tactic -1 (1 us → 1 us)")
    p = Paired("b::t[auto]", _side(CUTLASS), _side(CUDNN))
    ruled = _ruled(v, p, RuleSettings(floor=0.05))  # no estimate: fewer than MIN_REPLICATES processes
    assert ruled.reason == (f"not judged: fewer than {MIN_REPLICATES} usable processes per side; "
                            "choice changed: a tactic -1 → b tactic -1 (1 us → 1 us)")
