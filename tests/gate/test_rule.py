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


def test_no_gate_module_imports_scipy_until_the_rule_computes():
    """A pytest session or command that only builds a ``Policy`` or reads a baseline never pays
    for scipy; the rule imports it the first time it bounds an estimate."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    import fp4bench.gate

    src = str(Path(fp4bench.gate.__file__).resolve().parents[2])
    code = ("import importlib, json, pkgutil, sys\nimport fp4bench.gate as g\n"
            "for m in pkgutil.iter_modules(g.__path__):\n    importlib.import_module('fp4bench.gate.' + m.name)\n"
            "before = 'scipy' in sys.modules\n"
            "from fp4bench.gate.rule import RuleSettings, estimate\nestimate([1e-5, 1.1e-5], [1e-5], RuleSettings())\n"
            "print(json.dumps([before, 'scipy' in sys.modules]))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout.splitlines()[-1]) == [False, True]
