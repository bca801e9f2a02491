"""Verdicts on synthetic, seeded windows (lognormal samples around each window's median)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.judge import judge
from fp4bench.gate.policy import Policy
from fp4bench.gate.verdict import DISPATCH, LOST_TACTIC, NEW_TACTIC, Status
from fp4bench.report.tables import verdict_message

MED = 23.1e-6  # a decode-sized FP4 GEMM, seconds


def make_baseline(entries, availability=None, windows=None, fingerprint=H200):
    data = bench_json(entries, availability=availability, fingerprint=fingerprint)
    if windows:
        data["fp4bench"]["windows"] = windows
    return parse_baseline(data)


def windows(rng, medians, sigma=0.002, n=30):
    """One window of ``n`` samples (spread ``sigma``) around each of ``medians`` (relative to MED)."""
    return [samples(rng, MED * m, sigma, n) for m in medians]


def windowed_baseline(rng, names_medians: dict, extra=None, fingerprint=H200):
    """A baseline with the given window medians per benchmark."""
    ws = {n: windows(rng, meds) for n, meds in names_medians.items()}
    return make_baseline([bench_entry(n, w[0], extra) for n, w in ws.items()],
                         windows={n: w for n, w in ws.items() if len(w) > 1}, fingerprint=fingerprint)


BASE = (1.0, 1.003, 0.997)  # three windows of an unchanged benchmark


def one(rng, new_medians, base_medians=BASE, base_extra=None, new_extra=None, policy=Policy(), **kw):
    """Compare a single benchmark with these window medians; return its verdict and the result."""
    base = windowed_baseline(rng, {"b::t[x]": base_medians}, base_extra)
    cur = {"b::t[x]": (windows(rng, new_medians), new_extra or {})}
    res = compare(base, cur, policy=policy, **kw)
    (v,) = res.verdicts
    return v, res


def shifted(rng, k, sigma):
    return 1 + rng.normal(0, sigma, k)


# --- the rule on window medians ---------------------------------------------------------------


def test_aa_50_benchmarks_no_false_alarm():
    rng = np.random.default_rng(1)
    names = [f"bench/test_gemm.py::test_fp4[case{i}]" for i in range(50)]
    base = windowed_baseline(rng, {n: (1 + i / 10) * shifted(rng, 3, 0.003) for i, n in enumerate(names)})
    cur = {n: (windows(rng, (1 + i / 10) * shifted(rng, 2, 0.003)), {}) for i, n in enumerate(names)}
    res = compare(base, cur)
    counts = res.counts()
    assert counts["FAIL"] == 0
    assert counts["PASS"] >= 45, counts  # a few AMBIGUOUS are allowed, FAIL is not
    assert res.exit_code == 0


def test_ten_percent_slower_in_two_windows_fails_with_message():
    v, res = one(np.random.default_rng(3), (1.10, 1.102), new_extra={"sm_clock_mhz": 1980, "throttle_reasons": []},
                 base_extra={"sm_clock_mhz": [1980, 1980, 1975], "throttle_reasons": []})
    assert v.status is Status.FAIL and v.kind == "timing"
    assert 0.09 < v.ratio - 1 < 0.11
    assert (v.windows_base, v.windows_new) == (3, 2) and v.interval[0] > 2.5
    msg = verdict_message(v)
    assert msg.startswith("FAIL b::t[x]: ")
    assert "µs → " in msg and "floor 5%" in msg and "interval [+" in msg and "windows 3+2" in msg
    assert "SM clock 1980→1980 MHz" in msg and "throttle: none→none" in msg
    assert res.exit_code == 1


def test_one_new_window_is_a_suspect_that_wants_another_window():
    rng = np.random.default_rng(4)
    base = windowed_baseline(rng, {"t": BASE})
    one_window = windows(rng, [1.08])
    v = judge("t", base.benchmarks["t"], one_window, {}, budget_left=True)
    assert v.status is Status.AMBIGUOUS and v.wants_more and "another window wanted" in v.reason
    # no window left: undecided, printed with its interval, not a FAIL and not a pass-by-default
    v = judge("t", base.benchmarks["t"], one_window, {}, budget_left=False)
    assert v.status is Status.AMBIGUOUS and not v.wants_more and v.interval[0] > 2.5
    assert "a FAIL needs 2 independent new windows" in v.reason
    # a huge change (>= 2x the floor, every new window slower) is never AMBIGUOUS
    v = judge("t", base.benchmarks["t"], windows(rng, [1.25]), {}, budget_left=False)
    assert v.status is Status.FAIL and "twice the floor" in v.reason
    # a flat sample list is one window
    assert judge("t", base.benchmarks["t"], one_window[0], {}).windows_new == 1


def test_four_percent_fails_on_the_same_unit_and_is_less_sensitive_on_another():
    """The same +4 % in 3+3 windows: FAIL on the baseline's own GPU; on another unit of the model
    (between units µs kernels moved up to 4.2 % on the H200) or an unknown one the unit offset
    widens the interval: AMBIGUOUS, and the header says so; its windows alone show it beyond the
    guard band, so the run is not a pass (exit 3) and the verdict names the smallest change such a
    comparison can show. The threshold itself is the same."""
    from dataclasses import replace

    from fp4bench.report.tables import OTHER_UNIT, verdict_table

    def run(base_uuid, cur_uuid, factor=1.04):
        rng = np.random.default_rng(4)
        base = windowed_baseline(rng, {"b::t[x]": BASE}, fingerprint=replace(H200, gpu_uuid=base_uuid))
        cur = {"b::t[x]": (windows(rng, (factor, factor * 1.001, factor * 0.999)), {})}
        return compare(base, cur, current_fingerprint=replace(H200, gpu_uuid=cur_uuid))

    same, other, unknown = run("GPU-a", "GPU-a"), run("GPU-a", "GPU-b"), run(None, "GPU-b")
    assert same.verdicts[0].status is Status.FAIL and not same.policy.less_sensitive
    for res in (other, unknown):
        assert res.verdicts[0].status is Status.AMBIGUOUS and res.exit_code == 3 and res.verdicts[0].remeasure
        assert "smallest change this can show is +" in res.verdicts[0].reason
        assert res.policy.other_unit
        assert res.policy.rule_settings().threshold == same.policy.rule_settings().threshold
        head = verdict_table(res).splitlines()[:9]
        assert "another or unknown GPU unit" in " ".join(" ".join(head).split()) and OTHER_UNIT in head
    assert "gpu_uuid GPU-a → GPU-b" in verdict_table(other).splitlines()[1]
    assert "another/unknown GPU unit" not in verdict_table(same)
    # a real 10 % slowdown still fails on another unit
    assert run("GPU-a", "GPU-b", 1.10).verdicts[0].status is Status.FAIL


def test_a_true_five_percent_slowdown_fails_despite_window_to_window_drift():
    """>= 95 % of benchmarks 5 % slower FAIL (3 base, 2 new windows) although every window's
    median moves by N(0, 0.3 %); an unchanged stack with the same drift never FAILs."""
    rng = np.random.default_rng(21)
    names = [f"t[{i}]" for i in range(60)]
    base = windowed_baseline(rng, {n: shifted(rng, 3, 0.003) for n in names})
    for factor, least, most in ((1.05, 0.95 * 60, 60), (1.0, 0, 0)):
        cur = {n: (windows(rng, factor * shifted(rng, 2, 0.003)), {}) for n in names}
        fails = compare(base, cur).counts()["FAIL"]
        assert least <= fails <= most, (factor, fails)


def test_noise_only_raises_the_evidence_needed():
    """A noisier baseline never fails at a lower threshold: the same +7 % FAILs against quiet
    windows and is undecided against windows that spread by ±3 %."""
    quiet, _ = one(np.random.default_rng(5), (1.07, 1.071))
    noisy, res = one(np.random.default_rng(5), (1.07, 1.071), base_medians=(1.0, 1.03, 0.97))
    assert quiet.status is Status.FAIL
    assert noisy.status is Status.AMBIGUOUS and not noisy.remeasure and res.exit_code == 0
    assert noisy.interval[1] - noisy.interval[0] > quiet.interval[1] - quiet.interval[0]
    assert res.suspects() == ["b::t[x]"]  # undecided: worth more windows
    # the same noise never turns an unchanged benchmark into a FAIL
    v, _ = one(np.random.default_rng(5), (1.0, 1.001), base_medians=(1.0, 1.03, 0.97))
    assert v.status is not Status.FAIL


def test_a_recorded_noise_floor_changes_nothing():
    v, _ = one(np.random.default_rng(6), (1.10, 1.1), base_extra={"noise_floor": 0.15})
    v2, _ = one(np.random.default_rng(6), (1.10, 1.1), base_extra={"noise_floor": 0.02})
    assert v.status is v2.status is Status.FAIL and v.interval == v2.interval


def test_faster_is_pass_and_improved():
    v, res = one(np.random.default_rng(7), (0.85, 0.851))
    assert v.status is Status.PASS and v.improved and v.reason == "improved"
    assert res.exit_code == 0
    v2, _ = one(np.random.default_rng(7), (0.99, 0.99))  # faster but within the guard band: plain PASS
    assert v2.status is Status.PASS and not v2.improved


def test_too_few_samples_is_ambiguous():
    rng = np.random.default_rng(8)
    base = make_baseline([bench_entry("b::t[x]", samples(rng, MED, 0.01, 3))])
    cur = {"b::t[x]": (samples(rng, MED * 1.5, 0.01, 3), {})}
    res = compare(base, cur, policy=Policy())
    v = res.verdicts[0]
    assert v.status is Status.AMBIGUOUS and "too few samples" in v.reason and v.undecided
    assert res.exit_code == 1  # no verdict could be reached: not a pass ...
    res = compare(base, cur, policy=Policy(allow_ambiguous=True))
    assert res.exit_code == 3  # accepted, but the only benchmark was not judged: nothing was
    base = make_baseline([bench_entry("b::t[x]", samples(rng, MED, 0.01, 3)),
                          bench_entry("b::t[y]", samples(rng, MED, 0.01, 30))])
    cur = {"b::t[x]": (samples(rng, MED * 1.5, 0.01, 3), {}), "b::t[y]": (samples(rng, MED, 0.01, 30), {})}
    res = compare(base, cur, policy=Policy(allow_ambiguous=True))
    assert res.exit_code == 0  # ... with something judged, explicitly accepted


def test_judge_and_compare_decide_every_benchmark_alike():
    """The in-test decision (``judge``, no window left) and the final table (``compare``) are one
    decision per benchmark: the pytest outcome and the table cannot disagree."""
    rng = np.random.default_rng(16)
    names = [f"t[{i}]" for i in range(40)]
    shifts = np.linspace(0.95, 1.12, 40)
    base = windowed_baseline(rng, {n: shifted(rng, 3, 0.004) for n in names})
    cur = {n: (windows(rng, f * shifted(rng, 1 + i % 3, 0.004)), {}) for i, (n, f) in enumerate(zip(names, shifts))}
    table = {v.name: v for v in compare(base, cur).verdicts}
    for n in names:
        assert judge(n, base.benchmarks[n], cur[n][0], {}) == table[n]
    assert {v.status for v in table.values()} >= {Status.FAIL, Status.PASS, Status.AMBIGUOUS}


def test_a_one_window_baseline_is_named_in_the_report():
    from fp4bench.report.tables import verdict_table

    rng = np.random.default_rng(17)
    single = make_baseline([bench_entry("t", samples(rng, MED, 0.01))])
    res = compare(single, {"t": (windows(rng, [1.0]), {})})
    assert any("baseline has 1 window: less sensitive, re-record it" in n for n in res.notes)
    assert "baseline has 1 window" in verdict_table(res)
    three = windowed_baseline(rng, {"t": BASE})
    assert compare(three, {"t": (windows(rng, [1.0]), {})}).notes == []


def test_missing_new_and_exit_codes():
    rng = np.random.default_rng(10)
    base = make_baseline([bench_entry(f"t[{i}]", samples(rng, MED, 0.01)) for i in range(3)])
    cur = {"t[0]": (samples(rng, MED, 0.01), {}), "t[1]": (samples(rng, MED, 0.01), {}),
           "t[9]": (samples(rng, MED, 0.01), {})}
    res = compare(base, cur)
    st_ = {v.name: v.status for v in res.verdicts}
    assert st_ == {"t[0]": Status.PASS, "t[1]": Status.PASS, "t[2]": Status.MISSING, "t[9]": Status.NEW}
    assert res.exit_code == 3  # fewer judged than expected: incomplete, its own code
    assert res.coverage.judged == ("t[0]", "t[1]") and res.coverage.missing == ("t[2]",)
    assert compare(base, cur, policy=Policy(allow_missing=True)).exit_code == 0


def test_renamed_benchmark_is_one_missing_plus_one_new():
    """pytest-benchmark silently passes a renamed 10x-slower test; we don't."""
    rng = np.random.default_rng(11)
    base = make_baseline([bench_entry("b::test_moe[m64]", samples(rng, MED, 0.01))])
    cur = {"b::test_moe_fp4[m64]": (samples(rng, MED * 10, 0.01), {})}
    res = compare(base, cur)
    assert [(v.name, v.status) for v in res.verdicts] == [
        ("b::test_moe[m64]", Status.MISSING),
        ("b::test_moe_fp4[m64]", Status.NEW),
    ]
    assert res.exit_code == 3  # nothing judged
    assert compare(base, cur, policy=Policy(allow_missing=True)).exit_code == 3  # never allowed when empty


def test_lost_tactic_fails_and_new_tactic_is_reported():
    rng = np.random.default_rng(12)
    base = make_baseline(
        [bench_entry("t[0]", samples(rng, MED, 0.01))],
        availability={"flashinfer-cutlass|p1|tile128": "ok", "flashinfer-cutlass|p1|tile256": "unsupported: smem",
                      "sgl|p1|default": "ok"},
    )
    now = {"flashinfer-cutlass|p1|tile128": "unsupported: init failed", "flashinfer-cutlass|p1|tile256": "ok",
           "sgl|p1|default": "ok"}
    res = compare(base, {"t[0]": (samples(rng, MED, 0.01), {})}, availability_now=now)
    by = {v.name: v for v in res.verdicts}
    lost = by["flashinfer-cutlass|p1|tile128"]
    assert lost.status is Status.FAIL and lost.kind == LOST_TACTIC
    assert "init failed" in verdict_message(lost)
    gained = by["flashinfer-cutlass|p1|tile256"]
    assert gained.status is Status.NEW and gained.kind == NEW_TACTIC and gained.improved
    assert "sgl|p1|default" not in by
    assert res.exit_code == 1
    assert res.suspects() == []  # re-timing cannot bring a tactic back


def test_throttled_run_is_invalid_under_the_invalid_policy():
    v, res = one(np.random.default_rng(13), (1.25, 1.25), new_extra={"throttled": True, "throttle_reasons": ["SwPowerCap"]},
                 policy=Policy(throttle="invalid"))
    assert v.status is Status.INVALID and "throttled" in v.reason
    assert "throttle: ?→SwPowerCap" in verdict_message(v)
    assert res.exit_code == 1  # INVALID fails unless accepted
    _, res = one(np.random.default_rng(13), (1.25, 1.25), new_extra={"throttled": True},
                 policy=Policy(throttle="invalid", allow_ambiguous=True))
    assert res.exit_code == 3  # accepted, but nothing was judged


def test_throttled_run_is_judged_and_reported_by_default():
    # a power-capped H200 is the steady state of heavy kernels: judge the timing, show the state
    v, res = one(np.random.default_rng(13), (1.25, 1.25), new_extra={"throttled": True, "throttle_reasons": ["SwPowerCap"]})
    assert v.status is Status.FAIL
    assert "throttle: ?→SwPowerCap" in verdict_message(v)
    assert res.exit_code == 1
    v, _ = one(np.random.default_rng(14), (1.0, 1.0), base_extra={"throttled": True}, new_extra={"throttled": True})
    assert v.status is Status.PASS


def test_unknown_throttle_policy_is_rejected():
    with pytest.raises(ValueError, match="throttle"):
        Policy(throttle="ignore")


def test_clock_anomaly_is_invalid_and_a_suspect():
    v, res = one(np.random.default_rng(13), (1.25, 1.25), new_extra={"clock_anomaly": True})
    assert v.status is Status.INVALID
    assert res.suspects() == ["b::t[x]"]  # slow and void: re-measure after cool-down
    v2, _ = one(np.random.default_rng(13), (1.0, 1.0), base_extra={"clock_anomaly": "SM clock 1470 MHz < 75% of max"})
    assert v2.status is Status.INVALID and "1470" in v2.reason and "baseline" in v2.reason


def test_dispatch_change_flagged_and_policy_can_fail_it():
    base_k = {"kernels": ["cutlass_fp4_gemm_128x128", "quantize"]}
    new_k = {"kernels": ["cutlass_fp4_gemm_256x128", "quantize"]}
    v, res = one(np.random.default_rng(14), (1.0, 1.0), base_extra=base_k, new_extra=new_k)
    assert v.status is Status.PASS and v.dispatch_changed
    assert v.kernels_added == ("cutlass_fp4_gemm_256x128",) and v.kernels_removed == ("cutlass_fp4_gemm_128x128",)
    assert "kernels changed" in v.reason and res.exit_code == 0
    v2, res2 = one(np.random.default_rng(14), (1.0, 1.0), base_extra=base_k, new_extra=new_k, policy=Policy(dispatch="fail"))
    assert v2.status is Status.FAIL and v2.kind == DISPATCH and res2.exit_code == 1
    reordered = {"kernels": ["quantize", "cutlass_fp4_gemm_128x128"]}
    v3, _ = one(np.random.default_rng(14), (1.0, 1.0), base_extra=base_k, new_extra=reordered)
    assert not v3.dispatch_changed  # same set, other order


def test_compare_checks_gpu_model():
    from dataclasses import replace

    from fp4bench.gate.compatibility import IncompatibleBaseline

    rng = np.random.default_rng(15)
    base = make_baseline([bench_entry("t[0]", samples(rng, MED, 0.01))])
    cur = {"t[0]": (samples(rng, MED, 0.01), {})}
    res = compare(base, cur, current_fingerprint=replace(H200, driver="590.2", torch="2.12.0"))
    assert ("driver", "580.1", "590.2") in res.changes and ("torch", "2.11.0", "2.12.0") in res.changes
    with pytest.raises(IncompatibleBaseline):
        compare(base, cur, current_fingerprint=replace(H200, gpu_name="NVIDIA B200", gpu_slug="nvidia-b200"))


def test_judge_new():
    rng = np.random.default_rng(17)
    new = samples(rng, MED * 1.1, 0.01)
    nv = judge("t[new]", None, new, {"sm_clock_mhz": 1980})
    assert nv.status is Status.NEW and nv.new_clock == "1980" and math.isclose(nv.new_median, float(np.median(new)))


def test_policy_rejects_bad_values():
    for kw, word in (({"floor": -0.1}, "floor"), ({"min_samples": 1}, "min_samples"),
                     ({"dispatch": "ignore"}, "dispatch")):
        with pytest.raises(ValueError, match=word):
            Policy(**kw)


def test_bad_noise_floor_is_named():
    rng = np.random.default_rng(18)
    with pytest.raises(ValueError, match=r"t\[0\].*noise_floor"):
        make_baseline([bench_entry("t[0]", samples(rng, MED, 0.01), {"noise_floor": -1})])
