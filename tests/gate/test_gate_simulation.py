"""The stored-baseline gate on simulated H200 runs, through the code a run executes: the plugin's
window loop (``run.windows.settle``, which ``plugin.cases.gate`` runs) judging with
``gate.judge.judge`` under the gate's ``Policy``, on the heavier-tailed noise model of
``fakes.noise_tails`` (each window its own placement set, a run term shared by a run's windows,
odd placements in 1 % of placement sets). docs/measurement.md quotes the rates asserted here.

The rates need thousands of 420-benchmark runs; ``vectorised`` decides them with the rule's array
functions (``rule.bounds``/``rule.decisions`` under ``Policy.rule_settings`` of each benchmark
class), and ``test_the_vectorised_model_decides_as_the_real_loop`` shows it reaches the same
decision, re-measure flag and window count as the real loop for every benchmark of whole runs
(unchanged, slowed, doubled spread, another unit). Fixed seeds throughout.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

import fakes.noise_tails as nt
from fp4bench.gate import rule
from fp4bench.gate.judge import judge
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import BenchmarkRecord
from fp4bench.gate.verdict import Status
from fp4bench.options.registry import option
from fp4bench.run.windows import settle

PASS, FAIL, MORE, AMBIGUOUS = 0, 1, 2, 3
BASE_WINDOWS = 3  # --fp4-windows when a baseline is saved
MAX_WINDOWS = option("max-windows").default  # --fp4-max-windows
SAMPLES = 5  # samples per simulated window (Policy.min_samples)
SAME_UNIT = Policy()
OTHER_UNIT = Policy(other_unit=True)
CODES = {Status.PASS: PASS, Status.FAIL: FAIL, Status.AMBIGUOUS: AMBIGUOUS}


@pytest.fixture(scope="module")
def bench():
    return nt.h200_benchmarks()


def simulate(rng, b: nt.Bench, runs: int, effect=0.0, spread: float = 1.0, other_unit: bool = False):
    """(base, new) log window medians: the baseline's 3 windows and up to 4 new ones, each side
    one process on its own placement draws; ``effect`` (runs, benchmarks) or scalar is added to
    the new side, and with ``other_unit`` the new run's unit offset."""
    place = nt.place_sd(rng, b)
    base = nt.run_windows(rng, b, runs, BASE_WINDOWS, place, spread)
    new = nt.run_windows(rng, b, runs, MAX_WINDOWS, place, spread) + np.asarray(effect)[..., None]
    if other_unit:
        new += nt.unit_offsets(rng, b, runs)
    return base, new


def vectorised(base: np.ndarray, new: np.ndarray, classes: np.ndarray, policy: Policy):
    """The window loop's outcome for every (run, benchmark): status code, re-measure flag and
    new windows judged. Windows are judged 1, 2, ... up to MAX_WINDOWS while the rule says MORE
    (each window over the benchmarks still undecided: the rule's arrays are row by row)."""
    runs, n_bench = base.shape[:2]
    code = np.full((runs, n_bench), -1, dtype=np.int8)
    remeasure = np.zeros((runs, n_bench), dtype=bool)
    taken = np.zeros((runs, n_bench), dtype=np.int8)
    for cls in np.unique(classes):
        cols = classes == cls
        s = policy.rule_settings(str(cls))
        b, n = base[:, cols].reshape(-1, base.shape[2]), new[:, cols].reshape(-1, new.shape[2])
        out = np.full(b.shape[0], -1, dtype=np.int8)
        again = np.zeros(b.shape[0], dtype=bool)
        k_at = np.zeros(b.shape[0], dtype=np.int8)
        for k in range(1, MAX_WINDOWS + 1):
            rows = np.flatnonzero(out < 0)
            delta, lo, hi, _, _, sep = rule.bounds(b[rows], n[rows, :k], s)
            d = rule.decisions(delta, lo, hi, sep, k, s, budget_left=k < MAX_WINDOWS)
            now = d != MORE
            out[rows[now]], k_at[rows[now]] = d[now], k
            shown = lo >= s.threshold
            if s.unit_sigma > 0:  # or the windows' own bound, without the unit term
                shown |= rule.bounds(b[rows], n[rows, :k], replace(s, unit_sigma=0.0))[1] >= s.threshold
            again[rows[now]] = (d[now] == AMBIGUOUS) & shown[now]
        code[:, cols], remeasure[:, cols], taken[:, cols] = (x.reshape(runs, -1) for x in (out, again, k_at))
    return code, remeasure, taken


def real_loop(base: np.ndarray, new: np.ndarray, b: nt.Bench, policy: Policy):
    """One whole run through ``settle`` and ``judge``: base (benchmarks, 3) and new (benchmarks, 4)
    log window medians; each window a list of SAMPLES equal samples (its median is the value)."""
    code = np.zeros(b.size, dtype=np.int8)
    remeasure = np.zeros(b.size, dtype=bool)
    taken = np.zeros(b.size, dtype=np.int8)
    for i, name in enumerate(b.names):
        extra = {"kind": str(b.classes[i])}
        wins = tuple((math.exp(v),) * SAMPLES for v in base[i])
        rec = BenchmarkRecord(name, name, tuple(x for w in wins for x in w), extra, wins)
        ws = [[math.exp(new[i, 0])] * SAMPLES]
        v = settle(lambda w, budget_left: judge(name, rec, w, extra, policy, budget_left=budget_left),
                   lambda k: ([math.exp(new[i, k])] * SAMPLES, ""), ws, MAX_WINDOWS)
        code[i], remeasure[i], taken[i] = CODES[v.status], v.remeasure, len(ws)
    return code, remeasure, taken


def test_the_model_is_at_least_as_noisy_as_the_measured_aa(bench):
    """One window a side, same unit, two processes: |Δ| of the medians against the measured A/A
    (run 11: median 0.17 %, p95 0.69 %, max 1.25 % over 406; the sequential pytest A/A: median
    0.23 %, p95 1.47 %; the largest back-to-back change on one unit 2.37 %). The model is on the
    noisy side of every one, within twice the median."""
    rng = np.random.default_rng(11)
    base, new = simulate(rng, bench, 200)
    d = np.abs(new[..., 0] - base[..., 0])
    med, p95, top = np.median(d), np.percentile(d, 95), np.median(d.max(axis=1))
    print(f"model A/A |Δ|: median {med:.4f}, p95 {p95:.4f}, median max per run {top:.4f}")
    assert 0.0017 <= med <= 0.0034 and 0.0069 <= p95 and 0.0125 <= top, (med, p95, top)


def test_the_vectorised_model_decides_as_the_real_loop(bench):
    """Decision for decision, re-measure flag and windows judged: every benchmark of whole
    420-benchmark runs, unchanged, one benchmark of each class +5 %, per-process spread x2; and
    every third benchmark (140, of every class) of runs where each benchmark is a suspect that
    takes up to all its windows through the real loop: every benchmark +3 %, +4 % against another
    unit."""
    rng = np.random.default_rng(7)
    cases = []
    effect = np.zeros((1, bench.size))
    for cls in ("dense", "grouped", "moe"):
        effect[0, np.flatnonzero(bench.classes == cls)[0]] = math.log(1.05)
    third = nt.Bench(bench.names[::3], bench.classes[::3], bench.sd[::3], bench.drift[::3])
    assert set(third.classes) == set(bench.classes)

    def every_third(sim):
        return tuple(x[:, ::3] for x in sim)

    cases.append((simulate(rng, bench, 1), SAME_UNIT, bench))
    cases.append((simulate(rng, bench, 1, effect), SAME_UNIT, bench))
    cases.append((every_third(simulate(rng, bench, 1, math.log(1.03))), SAME_UNIT, third))
    cases.append((simulate(rng, bench, 1, spread=2.0), SAME_UNIT, bench))
    cases.append((every_third(simulate(rng, bench, 1, math.log(1.04), other_unit=True)), OTHER_UNIT, third))
    seen = set()
    for (base, new), policy, b in cases:
        want = vectorised(base, new, b.classes, policy)
        got = real_loop(base[0], new[0], b, policy)
        for w, g in zip(want, got):
            np.testing.assert_array_equal(w[0], g)
        seen |= {(int(c), bool(r)) for c, r in zip(want[0][0], want[1][0])}
    # the sample covers every outcome the rates below count
    assert {(PASS, False), (FAIL, False), (AMBIGUOUS, False), (AMBIGUOUS, True)} <= seen, seen


@pytest.mark.parametrize("spread", [1.0, 2.0])
def test_unchanged_same_unit_runs_fail_at_most_1pct(bench, spread):
    rng = np.random.default_rng(1)
    code, again, taken = vectorised(*simulate(rng, bench, 1000, spread=spread), bench.classes, SAME_UNIT)
    failed = (code == FAIL).any(axis=1).mean()
    remeasured = again.any(axis=1).mean()
    print(f"unchanged, spread x{spread:g}: runs with a FAIL {failed:.4f}, runs asked to re-measure {remeasured:.3f}, "
          f"further windows p99 {np.percentile((taken - 1).sum(axis=1), 99):.0f}")
    assert failed <= 0.01, failed
    if spread == 1.0:
        # --fp4-window-budget 120 s at ~1.5 s a window is 80 windows: not what decides such a run
        assert np.percentile((taken - 1).sum(axis=1), 99) <= 80


def test_five_percent_on_one_benchmark_fails_at_least_99pct(bench):
    """+5 % on one benchmark of the 420 (drawn at random, 4000 times), same unit: >= 99 % FAIL.
    Per class (printed): the torch-fp8 grouped rows, whose windows drift by 1.3 %, are the ones
    a 3-window baseline cannot always resolve at 5 %."""
    rng = np.random.default_rng(2)
    idx = rng.integers(0, bench.size, 4000)
    pick = nt.Bench(tuple(bench.names[i] for i in idx), bench.classes[idx], bench.sd[idx], bench.drift[idx])
    code, _, _ = vectorised(*simulate(rng, pick, 1, math.log(1.05)), pick.classes, SAME_UNIT)
    rate = (code == FAIL).mean()
    per = {c: (code[0][pick.classes == c] == FAIL).mean() for c in ("dense", "grouped", "moe")}
    print(f"+5 % on one benchmark, same unit: FAIL {rate:.4f} (" + ", ".join(f"{c} {r:.3f}" for c, r in per.items())
          + ")")
    assert rate >= 0.99, rate


def bench_of(b: nt.Bench, cls: str) -> nt.Bench:
    idx = np.flatnonzero(b.classes == cls)
    return nt.Bench(tuple(b.names[i] for i in idx), b.classes[idx], b.sd[idx], b.drift[idx])


def test_unchanged_other_unit_runs_fail_at_most_1pct_and_the_gap_is_stated(bench):
    """Against another unit's baseline: <= 1 % of unchanged runs FAIL, and each class's smallest
    change such a comparison can show (3 base windows, 4 new) is printed and above the floor for
    the µs dense rows: there the gate says so instead of passing (``gate.judge``)."""
    rng = np.random.default_rng(3)
    code, again, _ = vectorised(*simulate(rng, bench, 1000, other_unit=True), bench.classes, OTHER_UNIT)
    failed = (code == FAIL).any(axis=1).mean()
    gap = {c: rule.smallest_fail(OTHER_UNIT.rule_settings(c), OTHER_UNIT.rule_settings(c).prior_sigma,
                                 BASE_WINDOWS, MAX_WINDOWS) for c in ("dense", "grouped", "moe")}
    same = {c: rule.smallest_fail(SAME_UNIT.rule_settings(c), SAME_UNIT.rule_settings(c).prior_sigma,
                                  BASE_WINDOWS, MAX_WINDOWS) for c in ("dense", "grouped", "moe")}
    print(f"another unit, unchanged: runs with a FAIL {failed:.4f}, re-measure {again.any(axis=1).mean():.3f}; "
          "smallest change shown (other unit / same unit): "
          + ", ".join(f"{c} {gap[c] * 100:+.1f}% / {same[c] * 100:+.1f}%" for c in gap))
    assert failed <= 0.01, failed
    assert gap["dense"] > OTHER_UNIT.floor > same["dense"]
    assert all(gap[c] > same[c] for c in gap)
