"""CPU side of the timing layer: config validation, the median CI, ``time_cpu``'s stop rule and
per-call samples, and sample injection into a real pytest-benchmark fixture."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from fp4bench import clock
from fp4bench.measure.timing import TimingConfig, TimingResult, median_rel_ci, time_cpu

pytest_plugins = ["pytester"]


@pytest.fixture
def sim():
    """The simulated clock: a call "takes" what it spins (``clock.spin``), exactly, whatever the load."""
    with clock.using(clock.SimClock()) as c:
        yield c


# --- TimingConfig --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"mode": "wall"}, "timing mode must be graph, events or cpu, got 'wall'"),
        ({"min_samples": 2}, "3 <= min_samples <= max_samples, got 2, 300"),
        ({"min_samples": 10, "max_samples": 9}, "got 10, 9"),
        ({"calls_per_sample": 0}, "calls_per_sample must be >= 1, got 0"),
        ({"max_calls_per_sample": 0}, "max_calls_per_sample must be >= 1, got 0"),
        ({"target_sample_s": 0.0}, "target_sample_s must be > 0 seconds, got 0.0"),
        ({"warmup_calls": -1}, "warmup_calls must be >= 0, got -1"),
        ({"time_budget_s": -1.0}, "time_budget_s must be >= 0 seconds, got -1.0"),
        ({"time_budget_s": math.nan}, "time_budget_s must be >= 0 seconds, got nan"),
        ({"target_rel_ci": 0.0}, r"target_rel_ci must be > 0 \(relative\) or None, got 0.0"),
    ],
)
def test_config_rejects_bad_values_by_name(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TimingConfig(**kwargs)


def test_config_defaults_and_edges_are_accepted():
    TimingConfig()
    TimingConfig(mode="cpu", min_samples=3, max_samples=3, target_rel_ci=None, time_budget_s=0.0)


# --- median_rel_ci -------------------------------------------------------------------------------


def test_median_ci_on_known_samples():
    # n = 10: P(B <= 1) = 11/1024 < 0.025 <= P(B <= 2) = 56/1024, so l = 2 and the interval is
    # [x_(2), x_(9)] (1-based), coverage 1 - 2*11/1024 = 97.9 %. On 1..10 that is [2, 9] around 5.5.
    assert median_rel_ci(np.arange(1.0, 11.0)) == pytest.approx(3.5 / 5.5)
    # order does not matter, and an asymmetric sample reports the wider side
    x = np.array([10.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0])
    assert median_rel_ci(x[::-1]) == median_rel_ci(x)
    y = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.5, 2.0])  # x_(9) = 1.5, median 1
    assert median_rel_ci(y) == pytest.approx(0.5)


@pytest.mark.parametrize("n", [6, 7, 10, 20, 31, 50, 200])
def test_median_ci_is_the_exact_95_percent_interval(n):
    """Same order statistics as scipy's exact binomial CI of the median (``quantile_test``)."""
    x = np.sort(np.random.default_rng(n).lognormal(0.0, 0.1, n))
    med = float(np.median(x))
    ci = stats.quantile_test(x, q=med, p=0.5).confidence_interval(0.95)
    assert median_rel_ci(x) == pytest.approx(max(med - ci.low, ci.high - med) / med)


def test_median_ci_coverage_is_at_least_95_percent():
    """Monte Carlo: median ± the reported half-width must cover the true median >= 95 % of the
    time. (An interval one order statistic too narrow covered 89 % at n = 10 and 20, and its
    symmetric half-width 93 % at n = 20.)"""
    rng = np.random.default_rng(1)
    for n in (10, 20, 50):
        x = rng.standard_normal((4000, n))
        med = np.median(x, axis=1)
        half = np.array([median_rel_ci(row + 10.0) for row in x]) * (med + 10.0)  # shift: median > 0
        covered = np.mean(np.abs(med) <= half + 1e-12)  # true median is 0 (10 after the shift)
        # binomial sd of the estimate at p = 0.95 over 4000 draws is 0.0034
        assert covered >= 0.95 - 3 * 0.0034, (n, covered)


def test_median_ci_shrinks_with_n_and_is_inf_when_undefined():
    x = np.random.default_rng(2).lognormal(0.0, 0.05, 2000)
    cis = [median_rel_ci(x[:n]) for n in (10, 40, 160, 640, 2000)]
    assert all(a > b for a, b in zip(cis, cis[1:])), cis
    assert cis[-1] < 0.01
    # fewer than 6 samples cannot give 95 % coverage: even [min, max] of 5 covers 1 - 2/32
    for n in range(6):
        assert median_rel_ci(x[:n]) == math.inf
    assert math.isfinite(median_rel_ci(x[:6]))
    assert median_rel_ci([0.0] * 10) == math.inf  # relative to a zero median: undefined


# --- time_cpu ------------------------------------------------------------------------------------


def test_time_cpu_stops_by_ci_on_a_stable_function(sim):
    cfg = TimingConfig(mode="cpu", min_samples=10, max_samples=300, target_rel_ci=0.02, time_budget_s=20.0)
    r = time_cpu([lambda: clock.spin(2e-4)], cfg)
    assert r.stopped_by == "ci"
    assert 10 <= len(r.samples_s) < 300
    assert r.rel_ci <= 0.02 and r.rel_ci == pytest.approx(median_rel_ci(r.samples_s))
    assert r.method == "cpu perf_counter" and "wall clock" in r.note


def _alternating(period_s: float):
    """A call that takes 0 or ``period_s`` alternately: samples too spread to meet any CI."""
    state = {"i": 0}

    def fn() -> None:
        state["i"] += 1
        if state["i"] % 2:
            clock.spin(period_s)

    return fn


def test_time_cpu_stops_by_budget_when_ci_is_not_reached(sim):
    cfg = TimingConfig(mode="cpu", calls_per_sample=1, min_samples=5, max_samples=100_000,
                       target_rel_ci=1e-9, time_budget_s=0.05)
    r = time_cpu([_alternating(5e-4)], cfg)
    assert r.stopped_by == "budget"
    assert r.wall_s >= 0.05
    assert len(r.samples_s) < 100_000


def test_time_cpu_stops_by_max_samples(sim):
    cfg = TimingConfig(mode="cpu", calls_per_sample=1, min_samples=5, max_samples=12,
                       target_rel_ci=None, time_budget_s=60.0)
    r = time_cpu([_alternating(1e-4)], cfg)
    assert r.stopped_by == "max_samples"
    assert len(r.samples_s) == 12


def test_time_cpu_samples_are_seconds_per_call(sim):
    cfg = TimingConfig(mode="cpu", min_samples=5, max_samples=5, target_rel_ci=None)
    auto = time_cpu([lambda: clock.spin(2e-3)], cfg)
    # a 2 ms call is longer than target_sample_s = 1 ms: one call per sample
    assert auto.calls_per_sample == 1
    five = time_cpu([lambda: clock.spin(2e-3)], TimingConfig(mode="cpu", calls_per_sample=5, min_samples=5,
                                                             max_samples=5, target_rel_ci=None))
    for r in (auto, five):  # per call: five calls per sample left undivided would be 1e-2
        assert r.samples_s == pytest.approx([2e-3] * 5, rel=1e-9)
    # fast calls are batched up to ~target_sample_s per sample
    fast = time_cpu([lambda: None], TimingConfig(mode="cpu", min_samples=3, max_samples=3, target_rel_ci=None,
                                                 max_calls_per_sample=64))
    assert fast.calls_per_sample == 64


def test_time_cpu_call_accounting_and_rotation():
    counts = [0, 0, 0]

    def make(i):
        def fn():
            counts[i] += 1
        return fn

    fns = [make(i) for i in range(3)]
    cfg = TimingConfig(mode="cpu", calls_per_sample=6, warmup_calls=3, min_samples=4, max_samples=4,
                       target_rel_ci=None)
    r = time_cpu(fns, cfg)
    # warm-up 3 (one each), one estimate call on fns[0], then 4 samples x 6 calls rotating
    assert counts == [1 + 1 + 8, 1 + 8, 1 + 8]
    assert r.rotating_copies == 3 and r.calls_per_sample == 6 and len(r.samples_s) == 4


def test_time_cpu_slow_calls_continue_the_rotation_across_samples(sim):
    """A slow call (2 ms > target_sample_s) with 3 copies: one call per sample, and sample k
    works on the copy after sample k-1's, never again on the one it just used."""
    order = []

    def make(i):
        def fn():
            order.append(i)
            clock.spin(2e-3)
        return fn

    r = time_cpu([make(i) for i in range(3)], TimingConfig(mode="cpu", warmup_calls=0, min_samples=5,
                                                            max_samples=5, target_rel_ci=None))
    assert r.calls_per_sample == 1 and len(r.samples_s) == 5
    assert order == [0, 1, 2, 0, 1, 2]  # the sizing call on copy 0, then the samples in turn


def test_rotation_and_the_calls_floor():
    """A captured graph restarts its sequence each replay, so it needs a call per copy; a
    continuing rotation does not."""
    from fp4bench.measure.timing import Rotation, _calls_for

    cfg = TimingConfig()
    assert _calls_for(0.1, cfg, copies=4) == 4
    assert _calls_for(0.1, cfg, copies=4, continuous=True) == 1
    assert _calls_for(1e-6, cfg, copies=4, continuous=True) == cfg.max_calls_per_sample
    seen = []
    rot = Rotation([lambda i=i: seen.append(i) for i in range(4)], 3)
    rot(), rot(), rot()
    assert seen == [0, 1, 2, 3, 0, 1, 2, 3, 0]


def test_time_cpu_needs_a_callable():
    with pytest.raises(ValueError, match="at least one callable"):
        time_cpu([], TimingConfig(mode="cpu"))


def test_timing_result_extra_info():
    r = TimingResult([3e-6, 1e-6, 2e-6], "cpu perf_counter", 7, 2, "budget", 0.1234567, note="n",
                     extra={"estimate_s": 1e-6})
    assert r.median_s == 2e-6
    assert r.to_extra_info() == {"timer": "cpu perf_counter", "calls_per_sample": 7, "rotating_copies": 2,
                                 "stopped_by": "budget", "rel_ci95": 0.123457, "timing_note": "n",
                                 "estimate_s": 1e-6}


# --- record_in_benchmark into a real pytest-benchmark fixture ------------------------------------

_INJECT = """
from fp4bench.measure.timing import TimingResult
from fp4bench.plugin.benchmark import record_in_benchmark

SAMPLES = [3e-3, 1e-3, 2e-3, 5e-3, 4e-3, 2.5e-3]


def result(samples):
    return TimingResult(list(samples), "cpu perf_counter", 1, 1, "budget", 0.1)


def test_inject(benchmark):
    benchmark.extra_info["tag"] = "x"
    record_in_benchmark(benchmark, result(SAMPLES))


def test_remeasure_replaces(benchmark):
    record_in_benchmark(benchmark, result([9.0, 9.0, 9.0]))
    record_in_benchmark(benchmark, result([7e-3, 8e-3, 6e-3]))


def test_fixture_counts_as_used(benchmark):
    import pytest
    from pytest_benchmark.fixture import FixtureAlreadyUsed

    record_in_benchmark(benchmark, result(SAMPLES))
    with pytest.raises(FixtureAlreadyUsed):
        benchmark(lambda: None)
"""


def test_record_in_benchmark_puts_exactly_our_samples_into_the_json(pytester):
    pytester.makepyfile(test_inject=_INJECT)
    res = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist",
                             "-p", "no:xdist.looponfail", "--benchmark-json=out.json",
                             "-W", "error::pytest_benchmark.logger.PytestBenchmarkWarning")
    res.assert_outcomes(passed=3)
    assert "was not used" not in res.stdout.str()
    data = json.loads((pytester.path / "out.json").read_text())
    by_name = {b["name"]: b for b in data["benchmarks"]}
    # the misuse in test_fixture_counts_as_used marks that fixture errored: pytest-benchmark drops it
    assert set(by_name) == {"test_inject", "test_remeasure_replaces"}
    s = by_name["test_inject"]["stats"]
    assert s["data"] == [3e-3, 1e-3, 2e-3, 5e-3, 4e-3, 2.5e-3]
    assert s["rounds"] == 6 and s["iterations"] == 1
    assert s["median"] == pytest.approx(2.75e-3) and s["min"] == 1e-3 and s["max"] == 5e-3
    assert by_name["test_inject"]["extra_info"] == {"tag": "x"}
    # a second recording replaces the first instead of adding a second entry
    assert by_name["test_remeasure_replaces"]["stats"]["data"] == [7e-3, 8e-3, 6e-3]
