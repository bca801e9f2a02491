"""The shared decision rule (gate/rule.py) on hand-made replicates."""

import math

import pytest

from fp4bench.gate.rule import Decision, RuleSettings, decide, estimate, estimate_paired, improved

S = RuleSettings()


def times(rel: list[float], base: float = 1e-5) -> list[float]:
    return [base * (1 + r) for r in rel]


def test_unchanged_replicates_pass():
    est = estimate(times([0.0, 0.004, -0.003]), times([0.002, -0.001]), S)
    assert decide(est, S, budget_left=True) is Decision.PASS


def test_a_clear_slowdown_fails_with_two_new_replicates():
    est = estimate(times([0.0, 0.004, -0.003]), times([0.08, 0.083]), S)
    assert est.lo >= S.threshold
    assert decide(est, S, budget_left=True) is Decision.FAIL


def test_one_new_replicate_is_a_suspect_not_a_fail():
    est = estimate(times([0.0, 0.004, -0.003]), times([0.08]), S)
    assert decide(est, S, budget_left=True) is Decision.MORE


def test_a_huge_separated_change_is_never_ambiguous_when_the_budget_is_spent():
    est = estimate(times([0.0, 0.004, -0.003]), times([0.25]), S)
    assert decide(est, S, budget_left=False) is Decision.FAIL


def test_undecided_at_the_end_of_the_budget_is_ambiguous():
    est = estimate(times([0.0, 0.03, -0.03]), times([0.02, 0.05]), S)
    assert decide(est, S, budget_left=True) is Decision.MORE
    assert decide(est, S, budget_left=False) is Decision.AMBIGUOUS


def test_noise_only_widens_the_interval():
    quiet = estimate(times([0.0, 0.001, -0.001]), times([0.03, 0.031]), S)
    noisy = estimate(times([0.0, 0.02, -0.02]), times([0.01, 0.05]), S)
    assert abs(quiet.delta - noisy.delta) < 1e-3
    assert noisy.hi - noisy.lo > quiet.hi - quiet.lo


def test_paired_replicates_and_improvement():
    est = estimate_paired([math.log(0.9), math.log(0.91), math.log(0.905)], S)
    assert decide(est, S, budget_left=True) is Decision.PASS and improved(est, S)


@pytest.mark.parametrize("bad", [[0.0], [-1.0], [math.nan], [math.inf]])
def test_impossible_replicate_times_are_refused(bad):
    with pytest.raises(ValueError, match="finite and > 0"):
        estimate(bad, [1e-5], S)


def test_settings_are_validated():
    with pytest.raises(ValueError, match="margin"):
        RuleSettings(margin=1.0)
