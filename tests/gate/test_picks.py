"""Verdicts about what a library chose (``gate.picks``): a changed choice reported with both times
and judged on its time, and the autotuner mis-pick within one run."""

from __future__ import annotations

import re

import numpy as np

from fakes.benchjson import bench_entry, bench_json, samples
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.picks import choice_change, mispick, mispick_verdicts
from fp4bench.gate.policy import Policy
from fp4bench.gate.verdict import MISPICK, Status
from fp4bench.report.tables import verdict_message

MED = 20e-6
AUTO = {"backend": "flashinfer-auto", "problem": "p1"}
CUTLASS = {"backend": "cutlass", "tactic": -1, "tuned": False, "compare_with": "flashinfer-cutlass"}
CUDNN = {"backend": "cudnn", "tactic": -1, "tuned": False, "compare_with": "flashinfer-cudnn"}
TUNED = {"backend": "cutlass", "tactic": 7, "tuned": True, "compare_with": "flashinfer-cutlass"}


def _windows(rng, medians, n=30):
    return [samples(rng, MED * m, 0.002, n) for m in medians]


def _compare(rng, base_choice, new_choice, new_medians):
    ws = _windows(rng, (1.0, 1.003, 0.997))
    data = bench_json([bench_entry("b::t[auto]", ws[0], {**AUTO, "choice": base_choice})])
    data["fp4bench"]["windows"] = {"b::t[auto]": ws}
    res = compare(parse_baseline(data), {"b::t[auto]": (_windows(rng, new_medians), {**AUTO, "choice": new_choice})},
                  policy=Policy())
    (v,) = res.verdicts
    return v


def test_a_changed_choice_that_got_slower_fails_and_names_both_choices_and_times():
    v = _compare(np.random.default_rng(1), CUTLASS, CUDNN, (1.5, 1.5, 1.5))
    assert v.status is Status.FAIL and v.dispatch_changed
    assert re.search(r"choice changed: cutlass tactic -1 → cudnn tactic -1 \(20\.0\d us → (29\.9|30\.0)\d us\)", v.reason), v.reason
    assert "choice changed" in verdict_message(v)


def test_a_changed_choice_at_the_same_speed_passes_and_is_still_named():
    v = _compare(np.random.default_rng(2), CUTLASS, TUNED, (1.0, 1.002, 0.999))
    assert v.status is Status.PASS and "choice changed: cutlass tactic -1 → cutlass tactic 7 (tuned)" in v.reason


def test_an_unchanged_choice_is_not_named():
    v = _compare(np.random.default_rng(3), CUTLASS, dict(CUTLASS), (1.0, 1.002, 0.999))
    assert v.status is Status.PASS and "choice" not in v.reason and not v.dispatch_changed
    assert choice_change({"choice": {"backend": "c", "tactic": [1, 2]}}, {"choice": {"backend": "c", "tactic": (1, 2)}},
                         1.0, 1.0) is None


def _run(tuned_s, explicit: dict[str, float], choice=TUNED):
    run = {f"b::t[{t}]": ([[s] * 5], {"backend": "flashinfer-cutlass", "problem": "p1", "tactic": t})
           for t, s in explicit.items()}
    run["b::t[other-problem]"] = ([[1e-6] * 5], {"backend": "flashinfer-cutlass", "problem": "p2", "tactic": "t00"})
    run["b::t[tuned]"] = ([[tuned_s] * 5], {**AUTO, "choice": choice})
    return run


def test_a_tuned_pick_slower_than_the_best_explicit_tactic_beyond_the_floor_is_a_mispick():
    run = _run(40e-6, {"default": 20e-6, "t01": 40e-6, "t02": 22e-6})
    (v,) = mispick_verdicts(run, 0.05)
    assert v.status is Status.FAIL and v.kind == MISPICK and v.name == "b::t[tuned]"
    assert "the autotuner chose cutlass tactic 7 (tuned), 40.00 us" in v.reason
    assert "flashinfer-cutlass tactic default of the same run takes 20.00 us (+100%, floor 5%)" in v.reason
    assert verdict_message(v).startswith("FAIL (autotuner mis-pick) b::t[tuned]: autotuner mis-pick")


def test_no_mispick_within_the_floor_untuned_or_without_explicit_rows():
    assert mispick_verdicts(_run(20.9e-6, {"default": 20e-6}), 0.05) == []  # +4.5 %: within the floor
    assert mispick_verdicts(_run(40e-6, {"default": 20e-6}, choice=CUTLASS), 0.05) == []  # not tuned
    assert mispick("x", {**AUTO, "choice": TUNED}, 40e-6, {}, 0.05) is None  # nothing to hold it to


def test_compare_adds_the_mispicks_of_the_current_run():
    run = _run(40e-6, {"default": 20e-6})
    data = bench_json([bench_entry(n, s[0], x) for n, (s, x) in run.items()])
    res = compare(parse_baseline(data), run, policy=Policy())
    assert [v.name for v in res.verdicts if v.kind == MISPICK] == ["b::t[tuned]"] and res.exit_code == 1
