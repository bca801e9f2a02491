"""Noise-aware verdicts on synthetic, seeded sample sets (lognormal noise around a median)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from _benchjson import H200, bench_entry, bench_json, samples
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.verdict import (
    DISPATCH,
    LOST_TACTIC,
    NEW_TACTIC,
    Policy,
    Status,
    bonferroni,
    compare,
    holm,
    judge,
    min_attainable_p,
)
from fp4bench.report import verdict_message

MED = 23.1e-6  # a decode-sized FP4 GEMM, seconds


def make_baseline(entries, availability=None):
    return parse_baseline(bench_json(entries, availability=availability))


def one(rng, factor, base_sigma=0.01, new_sigma=None, n=30, base_extra=None, new_extra=None, policy=Policy()):
    """Compare a single benchmark whose median moved by ``factor``; return its verdict."""
    base = make_baseline([bench_entry("b::t[x]", samples(rng, MED, base_sigma, n), base_extra)])
    cur = {"b::t[x]": (samples(rng, MED * factor, base_sigma if new_sigma is None else new_sigma, n), new_extra or {})}
    res = compare(base, cur, policy=policy)
    (v,) = res.verdicts
    return v, res


# --- the core rule ----------------------------------------------------------------------------


def test_aa_50_benchmarks_no_false_alarm():
    rng = np.random.default_rng(1)
    names = [f"bench/test_gemm.py::test_fp4[case{i}]" for i in range(50)]
    base = make_baseline([bench_entry(n, samples(rng, MED * (1 + i / 10), 0.02)) for i, n in enumerate(names)])
    cur = {n: (samples(rng, MED * (1 + i / 10), 0.02), {}) for i, n in enumerate(names)}
    res = compare(base, cur)
    counts = res.counts()
    assert counts["FAIL"] == 0
    assert counts["PASS"] >= 45, counts  # a few AMBIGUOUS are allowed, FAIL is not
    assert res.exit_code == 0


def test_holm_controls_family_wise_false_alarms():
    """With floor and noise switched off the gate is MWU alone: unadjusted, ~5 % of A/A benchmarks
    would fail (so about every run has a false alarm); Holm keeps whole-run false alarms rare."""
    rng = np.random.default_rng(2)
    policy = Policy(floor=0.0, noise_k=0.0)
    runs, m, raw_hits, runs_with_fail = 20, 50, 0, 0
    for _ in range(runs):
        names = [f"t[{i}]" for i in range(m)]
        base = make_baseline([bench_entry(n, samples(rng, MED, 0.02, 20)) for n in names])
        cur = {n: (samples(rng, MED, 0.02, 20), {}) for n in names}
        res = compare(base, cur, policy=policy)
        raw_hits += sum(v.p_value < policy.alpha for v in res.verdicts)
        runs_with_fail += res.counts()["FAIL"] > 0
    assert 0.02 < raw_hits / (runs * m) < 0.09  # the raw test really is at ~alpha per benchmark
    assert runs_with_fail <= 3  # FWER ~ alpha = 5 % of 20 runs -> expect ~1


def test_ten_percent_slower_fails_with_message():
    v, res = one(np.random.default_rng(3), 1.10, new_extra={"sm_clock_mhz": 1980, "throttle_reasons": []},
                 base_extra={"sm_clock_mhz": [1980, 1980, 1975], "throttle_reasons": []})
    assert v.status is Status.FAIL and v.kind == "timing"
    assert 0.07 < v.ratio - 1 < 0.13
    assert v.p_adjusted < 1e-6
    msg = verdict_message(v)
    assert msg.startswith("FAIL b::t[x]: ")
    assert "µs → " in msg and "floor 5%" in msg and "noise ±" in msg
    assert "SM clock 1980→1980 MHz" in msg and "throttle: none→none" in msg
    assert res.exit_code == 1
    assert res.suspects() == ["b::t[x]"]


def test_two_percent_slower_tight_noise_is_ambiguous_under_floor():
    v, res = one(np.random.default_rng(4), 1.02, base_sigma=0.003)
    assert v.status is Status.AMBIGUOUS
    assert "under the 5% floor less the 2.0% allowance" in v.reason
    assert res.exit_code == 0
    assert res.suspects() == []  # under the floor: not worth a re-measure
    assert Policy(fail_on_ambiguous=True) and compare(
        make_baseline([bench_entry("b::t[x]", samples(np.random.default_rng(4), MED, 0.003))]),
        {"b::t[x]": (samples(np.random.default_rng(5), MED * 1.02, 0.003), {})},
        policy=Policy(fail_on_ambiguous=True),
    ).exit_code == 1


def test_four_percent_slower_is_within_the_allowance_of_the_floor_and_fails():
    v, res = one(np.random.default_rng(4), 1.04, base_sigma=0.003)
    assert v.status is Status.FAIL and 0.035 < v.ratio - 1 < 0.045
    assert "within the run-to-run allowance (±2.0%) of the 5% floor" in v.reason
    # without a guard band the same samples are only "significantly slower under the floor"
    v0, res0 = one(np.random.default_rng(4), 1.04, base_sigma=0.003, policy=Policy(drift=0.0))
    assert v0.status is Status.AMBIGUOUS and res0.exit_code == 0


def test_allowance_is_not_applied_against_another_gpu_unit():
    """Same 4 % shift: FAIL on the baseline's own GPU, AMBIGUOUS on another unit of the model
    (between units µs kernels moved up to 4.2 % on the H200) or an unknown one (a baseline that
    did not record its UUID), and the header says so."""
    from dataclasses import replace

    from fp4bench.report import verdict_table

    def run(base_uuid, cur_uuid):
        rng = np.random.default_rng(4)
        fp = replace(H200, gpu_uuid=base_uuid)
        base = parse_baseline(bench_json([bench_entry("b::t[x]", samples(rng, MED, 0.003, 30))], fingerprint=fp))
        cur = {"b::t[x]": (samples(rng, MED * 1.04, 0.003, 30), {})}
        return compare(base, cur, current_fingerprint=replace(H200, gpu_uuid=cur_uuid))

    same, other, unknown = run("GPU-a", "GPU-a"), run("GPU-a", "GPU-b"), run(None, "GPU-b")
    assert same.verdicts[0].status is Status.FAIL
    for res in (other, unknown):
        assert res.verdicts[0].status is Status.AMBIGUOUS and res.exit_code == 0 and res.policy.drift == 0
        head = verdict_table(res).splitlines()[:4]
        assert "run-to-run allowance 2% not applied: another or unknown GPU unit" in head[2]
        assert head[3] == "baseline from another/unknown GPU unit: re-approve on this runner for full sensitivity"
    assert "gpu_uuid GPU-a → GPU-b" in verdict_table(other).splitlines()[1]
    assert same.policy.drift == 0.02
    assert "run-to-run allowance 2%)" in verdict_table(same).splitlines()[2]
    assert "another/unknown GPU unit" not in verdict_table(same)
    # a real 10 % slowdown still fails on another unit
    rng = np.random.default_rng(5)
    base = parse_baseline(bench_json([bench_entry("b::t[x]", samples(rng, MED, 0.003, 30))],
                                     fingerprint=replace(H200, gpu_uuid="GPU-a")))
    res = compare(base, {"b::t[x]": (samples(rng, MED * 1.10, 0.003, 30), {})},
                  current_fingerprint=replace(H200, gpu_uuid="GPU-b"))
    assert res.verdicts[0].status is Status.FAIL


def _runs_with_drift(rng, factor: float, policy: Policy, m: int = 60, drift: float = 0.01):
    """m benchmarks; each run's median is shifted by up to ±drift (what an unchanged stack does
    between runs), samples spread 0.5 %; the new run is ``factor`` slower on top."""
    names = [f"t[{i}]" for i in range(m)]
    shift = lambda: 1 + rng.uniform(-drift, drift)  # noqa: E731
    base = make_baseline([bench_entry(n, samples(rng, MED * shift(), 0.005, 30)) for n in names])
    cur = {n: (samples(rng, MED * factor * shift(), 0.005, 30), {}) for n in names}
    return compare(base, cur, policy=policy).counts()


def test_a_true_five_percent_slowdown_fails_despite_run_to_run_drift():
    """The acceptance property: >= 95 % of benchmarks 5 % slower FAIL although each run's median
    drifts by up to ±1 % (±2 % between two runs); an unchanged stack with the same drift never
    FAILs. A floor-only rule (no drift allowance, no noise term) misses about half of them."""
    rng = np.random.default_rng(21)
    slow = _runs_with_drift(rng, 1.05, Policy())
    assert slow["FAIL"] >= 0.95 * 60, slow
    assert _runs_with_drift(rng, 1.00, Policy())["FAIL"] == 0
    floor_only = _runs_with_drift(rng, 1.05, Policy(drift=0.0, noise_k=0.0))
    assert 0.25 * 60 < floor_only["FAIL"] < 0.75 * 60, floor_only


def test_noisy_baseline_seven_percent_is_not_a_fail():
    v, res = one(np.random.default_rng(5), 1.07, base_sigma=0.10, n=60)
    assert v.status is Status.AMBIGUOUS
    assert v.noise > 0.07  # 2 * robust sigma of a 10 % lognormal
    assert res.exit_code == 0
    assert res.suspects() == ["b::t[x]"]  # over the floor, unconfirmed: re-measure


def test_same_shift_fails_when_baseline_is_quiet():
    """Control for the test above: the 7 % shift itself is caught when the noise is small."""
    v, _ = one(np.random.default_rng(5), 1.07, base_sigma=0.01, n=60)
    assert v.status is Status.FAIL


def test_a_a_noise_floor_from_extra_info_overrides_sample_spread():
    v, _ = one(np.random.default_rng(6), 1.10, base_extra={"noise_floor": 0.15})
    assert v.status is Status.AMBIGUOUS and v.noise == pytest.approx(0.15)
    v2, _ = one(np.random.default_rng(6), 1.10, base_extra={"noise_floor": 0.02})
    assert v2.status is Status.FAIL and v2.noise == pytest.approx(0.02)


def test_faster_is_pass_and_improved():
    v, res = one(np.random.default_rng(7), 0.85)
    assert v.status is Status.PASS and v.improved and v.reason == "improved"
    assert res.exit_code == 0
    v2, _ = one(np.random.default_rng(7), 0.98)  # faster but under the floor: plain PASS
    assert v2.status is Status.PASS and not v2.improved


def test_too_few_samples_is_ambiguous():
    v, res = one(np.random.default_rng(8), 1.5, n=3)
    assert v.status is Status.AMBIGUOUS and "too few samples" in v.reason and v.undecided
    assert res.exit_code == 1  # no verdict could be reached: not a pass ...
    _, res = one(np.random.default_rng(8), 1.5, n=3, policy=Policy(allow_ambiguous=True))
    assert res.exit_code == 3  # accepted, but the only benchmark was not judged: nothing was
    rng = np.random.default_rng(8)
    base = make_baseline([bench_entry("b::t[x]", samples(rng, MED, 0.01, 3)),
                          bench_entry("b::t[y]", samples(rng, MED, 0.01, 30))])
    cur = {"b::t[x]": (samples(rng, MED * 1.5, 0.01, 3), {}), "b::t[y]": (samples(rng, MED, 0.01, 30), {})}
    res = compare(base, cur, policy=Policy(allow_ambiguous=True))
    assert res.exit_code == 0  # ... with something judged, explicitly accepted


def test_sample_count_that_can_never_reach_significance_is_explained():
    """5+5 samples: smallest exact one-sided MWU p is 1/252 ~ 0.004 > 0.05/50 — say so."""
    rng = np.random.default_rng(9)
    names = [f"t[{i}]" for i in range(50)]
    base = make_baseline([bench_entry(n, samples(rng, MED, 0.01, 5)) for n in names])
    cur = {n: (samples(rng, MED * (1.3 if n == "t[0]" else 1.0), 0.01, 5), {}) for n in names}
    v = compare(base, cur).verdicts[0]
    assert v.status is Status.AMBIGUOUS
    assert "take more samples" in v.reason
    assert min_attainable_p(5, 5) == pytest.approx(1 / 252)


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
    v, res = one(np.random.default_rng(13), 1.25, new_extra={"throttled": True, "throttle_reasons": ["SwPowerCap"]},
                 policy=Policy(throttle="invalid"))
    assert v.status is Status.INVALID and "throttled" in v.reason
    assert "throttle: ?→SwPowerCap" in verdict_message(v)
    assert res.exit_code == 1  # INVALID fails unless accepted
    _, res = one(np.random.default_rng(13), 1.25, new_extra={"throttled": True},
                 policy=Policy(throttle="invalid", allow_ambiguous=True))
    assert res.exit_code == 3  # accepted, but nothing was judged


def test_throttled_run_is_judged_and_reported_by_default():
    # a power-capped H200 is the steady state of heavy kernels: judge the timing, show the state
    v, res = one(np.random.default_rng(13), 1.25, new_extra={"throttled": True, "throttle_reasons": ["SwPowerCap"]})
    assert v.status is Status.FAIL
    assert "throttle: ?→SwPowerCap" in verdict_message(v)
    assert res.exit_code == 1
    v, _ = one(np.random.default_rng(14), 1.0, base_extra={"throttled": True}, new_extra={"throttled": True})
    assert v.status is Status.PASS


def test_unknown_throttle_policy_is_rejected():
    with pytest.raises(ValueError, match="throttle"):
        Policy(throttle="ignore")


def test_clock_anomaly_is_invalid_and_a_suspect():
    v, res = one(np.random.default_rng(13), 1.25, new_extra={"clock_anomaly": True})
    assert v.status is Status.INVALID
    assert res.suspects() == ["b::t[x]"]  # slow and void: re-measure after cool-down
    v2, _ = one(np.random.default_rng(13), 1.0, base_extra={"clock_anomaly": "SM clock 1470 MHz < 75% of max"})
    assert v2.status is Status.INVALID and "1470" in v2.reason and "baseline" in v2.reason


def test_dispatch_change_flagged_and_policy_can_fail_it():
    base_k = {"kernels": ["cutlass_fp4_gemm_128x128", "quantize"]}
    new_k = {"kernels": ["cutlass_fp4_gemm_256x128", "quantize"]}
    v, res = one(np.random.default_rng(14), 1.0, base_extra=base_k, new_extra=new_k)
    assert v.status is Status.PASS and v.dispatch_changed
    assert v.kernels_added == ("cutlass_fp4_gemm_256x128",) and v.kernels_removed == ("cutlass_fp4_gemm_128x128",)
    assert "kernels changed" in v.reason and res.exit_code == 0
    v2, res2 = one(np.random.default_rng(14), 1.0, base_extra=base_k, new_extra=new_k, policy=Policy(dispatch="fail"))
    assert v2.status is Status.FAIL and v2.kind == DISPATCH and res2.exit_code == 1
    reordered = {"kernels": ["quantize", "cutlass_fp4_gemm_128x128"]}
    v3, _ = one(np.random.default_rng(14), 1.0, base_extra=base_k, new_extra=reordered)
    assert not v3.dispatch_changed  # same set, other order


def test_compare_checks_gpu_model():
    from dataclasses import replace

    from fp4bench.gate.baseline import IncompatibleBaseline

    rng = np.random.default_rng(15)
    base = make_baseline([bench_entry("t[0]", samples(rng, MED, 0.01))])
    cur = {"t[0]": (samples(rng, MED, 0.01), {})}
    res = compare(base, cur, current_fingerprint=replace(H200, driver="590.2", torch="2.12.0"))
    assert ("driver", "580.1", "590.2") in res.changes and ("torch", "2.11.0", "2.12.0") in res.changes
    with pytest.raises(IncompatibleBaseline):
        compare(base, cur, current_fingerprint=replace(H200, gpu_name="NVIDIA B200", gpu_slug="nvidia-b200"))


# --- multiple comparisons -----------------------------------------------------------------------


def test_holm_hand_example():
    adj = holm([0.01, 0.04, 0.03, 0.005])
    # sorted 0.005,0.01,0.03,0.04 -> x4,x3,x2,x1 = .02,.03,.06,.04 -> running max .02,.03,.06,.06
    np.testing.assert_allclose(adj, [0.03, 0.06, 0.06, 0.02])
    assert holm([]).size == 0
    assert bonferroni(0.2, 10) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_holm_between_raw_and_bonferroni(ps):
    adj = holm(ps)
    m = len(ps)
    for p, a in zip(ps, adj):
        assert p - 1e-12 <= a <= min(1.0, p * m) + 1e-12
    order = np.argsort(ps, kind="stable")
    assert np.all(np.diff(adj[order]) >= -1e-12)  # monotone in the raw p order


def test_judge_bonferroni_is_conservative_vs_holm():
    """Per-test Bonferroni (the plugin's in-flight decision) never fails what Holm would pass."""
    rng = np.random.default_rng(16)
    names = [f"t[{i}]" for i in range(20)]
    shifts = np.linspace(1.0, 1.08, 20)
    base = make_baseline([bench_entry(n, samples(rng, MED, 0.02, 12)) for n in names])
    cur = {n: (samples(rng, MED * f, 0.02, 12), {}) for n, f in zip(names, shifts)}
    holm_res = {v.name: v for v in compare(base, cur).verdicts}
    for n in names:
        v = judge(n, base.benchmarks[n], cur[n][0], {}, m=len(base.benchmarks))
        assert v.p_adjusted == pytest.approx(bonferroni(v.p_value, 20))
        assert v.p_adjusted >= holm_res[n].p_adjusted - 1e-15
        if v.status is Status.FAIL:
            assert holm_res[n].status is Status.FAIL
    assert any(v.status is Status.FAIL for v in holm_res.values())  # the set does contain regressions


def test_judge_new_and_p_matches_scipy():
    rng = np.random.default_rng(17)
    base = make_baseline([bench_entry("t[0]", samples(rng, MED, 0.01))])
    new = samples(rng, MED * 1.1, 0.01)
    v = judge("t[0]", base.benchmarks["t[0]"], new, {}, m=1)
    expected = stats.mannwhitneyu(new, base.benchmarks["t[0]"].samples, alternative="greater").pvalue
    assert v.p_value == pytest.approx(expected) and v.status is Status.FAIL
    nv = judge("t[new]", None, new, {"sm_clock_mhz": 1980})
    assert nv.status is Status.NEW and nv.new_clock == "1980" and math.isclose(nv.new_median, float(np.median(new)))


def test_policy_rejects_bad_values():
    for kw, word in (({"alpha": 0}, "alpha"), ({"floor": -0.1}, "floor"), ({"min_samples": 1}, "min_samples"),
                     ({"dispatch": "ignore"}, "dispatch"), ({"noise_k": -1}, "noise_k"),
                     ({"drift": -0.01}, "drift")):
        with pytest.raises(ValueError, match=word):
            Policy(**kw)


def test_bad_noise_floor_is_named():
    rng = np.random.default_rng(18)
    with pytest.raises(ValueError, match=r"t\[0\].*noise_floor"):
        make_baseline([bench_entry("t[0]", samples(rng, MED, 0.01), {"noise_floor": -1})])
