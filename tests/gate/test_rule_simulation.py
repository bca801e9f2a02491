"""The decision rule (gate/rule.py) of ``fp4bench ab`` on simulated H200 runs: tests/fakes/noise_model.py
says what the noise is and where each of its numbers comes from. The stored-baseline gate is
simulated through its own window loop in tests/gate/test_gate_simulation.py.

Each test runs the very code the gate runs (``rule.bounds`` + ``rule.decisions``, which
``rule.estimate``/``rule.decide`` are for one benchmark) over thousands of simulated runs at
once, with fixed seeds.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fakes.noise_model as nm
from fp4bench.ab.defaults import DEFAULTS as AB_DEFAULTS
from fp4bench.gate import rule

PASS, FAIL, MORE, AMBIGUOUS = 0, 1, 2, 3
AB = rule.RuleSettings(floor=0.03)  # fp4bench ab
AB_PROCESSES, AB_MAX_PROCESSES, AB_ROUNDS = 3, 3 + AB_DEFAULTS.extra_pairs, 8


@pytest.fixture(scope="module")
def suite():
    return nm.h200_suite()


def _process_sd(s: nm.Suite, process_sigma) -> np.ndarray:
    """A process's offset: the process term and its placement offset (one placement set per
    process and benchmark: ``fp4bench ab --placement process``)."""
    return np.sqrt(np.asarray(process_sigma) ** 2 + s.ab_place ** 2)


def ab(rng, s: nm.Suite, settings: rule.RuleSettings, effect: float = 0.0, process_sigma=nm.PROCESS_SIGMA,
       side_bias: np.ndarray | float = 0.0):
    """fp4bench ab: R processes a side, rounds interleaved; a process's value is the mean over
    rounds of its round-centred log time. ``process_sigma``/``side_bias`` broadcast over the
    benchmarks of ``s`` (runs, benchmarks). More processes while the rule says MORE, up to
    AB_MAX_PROCESSES."""
    sd = s.sd
    shape = sd.shape + (2 * AB_MAX_PROCESSES, AB_ROUNDS)
    x = rng.normal(0, 1, shape) * sd[..., None, None] + rng.normal(0, nm.WINDOW_SIGMA, shape)
    x += rng.normal(0, 1, shape) * s.drift[..., None, None]
    x += (rng.random(shape) < nm.JUMP_P) * rng.choice([-1.0, 1.0], shape) * rng.uniform(nm.JUMP_LO, nm.JUMP_HI, shape)
    x += rng.normal(0, nm.PASS_SIGMA, sd.shape + (1, AB_ROUNDS))  # a round's common state
    x += rng.normal(0, 1, sd.shape + (2 * AB_MAX_PROCESSES, 1)) * _process_sd(s, process_sigma)[..., None, None]
    side_b = np.arange(2 * AB_MAX_PROCESSES) % 2 == 1
    x[..., side_b, :] += effect + np.asarray(side_bias)[..., None, None]
    flat = x.reshape(-1, 2 * AB_MAX_PROCESSES, AB_ROUNDS)
    out = np.full(flat.shape[0], -1, dtype=np.int8)
    for r in range(AB_PROCESSES, AB_MAX_PROCESSES + 1):
        used = flat[:, : 2 * r, :]
        m = (used - used.mean(axis=1, keepdims=True)).mean(axis=2)  # round-centred, mean over rounds
        delta, lo, hi, _, _, sep = rule.bounds(m[:, 0::2], m[:, 1::2], settings)
        d = rule.decisions(delta, lo, hi, sep, r, settings, budget_left=r < AB_MAX_PROCESSES)
        now = (out < 0) & (d != MORE)
        out[now] = d[now]
    return out.reshape(sd.shape)


def test_the_noise_model_reproduces_the_measured_aa(suite):
    """One window a side, same unit, minutes apart: |Δ| of the medians as measured on the H200
    (run 11: median 0.17 %, p95 0.69 %, max 1.25 % over 406; sequential pytest A/A: median
    0.23 %, p95 1.47 %; largest back-to-back change on one unit 2.37 %)."""
    rng = np.random.default_rng(11)
    sd = np.broadcast_to(suite.sd, (200, suite.size))
    d = np.abs(nm.windows(rng, sd, 1)[..., 0] - nm.windows(rng, sd, 1)[..., 0])
    med, p95, top = np.median(d), np.percentile(d, 95), np.median(d.max(axis=1))
    assert 0.0015 <= med <= 0.0025 and 0.0069 <= p95 <= 0.0147 and 0.0125 <= top <= 0.035, (med, p95, top)


def ab_in_turns(rng, s: nm.Suite, settings: rule.RuleSettings, effect: float = 0.0,
                process_sigma=nm.PROCESS_SIGMA):
    """fp4bench ab when the slots take turns (device memory, ``ab.schedule.turns``): each slot
    has rounds of its own, shared by its A and B process only; a slot's replicate is the mean
    over its rounds of log(B) - log(A) (``ab.estimate.ab_estimate_paired``). More slots while
    the rule says MORE, up to AB_MAX_PROCESSES (the runner adds a pair while the processes
    disagree more than their rounds scatter, which the process offsets make the rule here)."""
    sd = s.sd
    shape = sd.shape + (AB_MAX_PROCESSES, 2, AB_ROUNDS)
    x = rng.normal(0, 1, shape) * sd[..., None, None, None] + rng.normal(0, nm.WINDOW_SIGMA, shape)
    x += rng.normal(0, 1, shape) * s.drift[..., None, None, None]
    x += (rng.random(shape) < nm.JUMP_P) * rng.choice([-1.0, 1.0], shape) * rng.uniform(nm.JUMP_LO, nm.JUMP_HI, shape)
    x += rng.normal(0, nm.PASS_SIGMA, sd.shape + (AB_MAX_PROCESSES, 1, AB_ROUNDS))  # a round's state: one slot's
    x += rng.normal(0, 1, sd.shape + (AB_MAX_PROCESSES, 2, 1)) * _process_sd(s, process_sigma)[..., None, None, None]
    x[..., 1, :] += effect
    d = (x[..., 1, :] - x[..., 0, :]).mean(axis=-1).reshape(-1, AB_MAX_PROCESSES)
    out = np.full(d.shape[0], -1, dtype=np.int8)
    for r in range(AB_PROCESSES, AB_MAX_PROCESSES + 1):
        delta, lo, hi, _, _, sep = rule.bounds_paired(d[:, :r], settings)
        dec = rule.decisions(delta, lo, hi, sep, r, settings, budget_left=r < AB_MAX_PROCESSES)
        now = (out < 0) & (dec != MORE)
        out[now] = dec[now]
    return out.reshape(sd.shape)


AB_BENCHMARKS = 78  # the default ab sweep over GLM-5 (docs/results-h200.md, run 11)


def test_ab_aa_false_fails_at_most_1pct_of_runs(suite):
    rng = np.random.default_rng(4)
    d = ab(rng, suite.pick(np.broadcast_to(rng.integers(0, suite.size, AB_BENCHMARKS), (1000, AB_BENCHMARKS))), AB)
    assert (d == FAIL).any(axis=1).mean() <= 0.01


def test_ab_three_percent_fails_at_least_95pct(suite):
    """The acceptance (>= 95 %). With one placement set per process (the default) each process
    carries its placement offset on top of PROCESS_SIGMA, so a benchmark may take up to 7
    processes a side (``AbDefaults.extra_pairs``)."""
    rng = np.random.default_rng(5)
    d = ab(rng, suite.pick(rng.integers(0, suite.size, (4000, 1))), AB, effect=math.log(1.03))
    assert (d == FAIL).mean() >= 0.95


def test_ab_in_turns_aa_false_fails_at_most_1pct_of_runs(suite):
    rng = np.random.default_rng(14)
    d = ab_in_turns(rng, suite.pick(np.broadcast_to(rng.integers(0, suite.size, AB_BENCHMARKS),
                                                    (1000, AB_BENCHMARKS))), AB)
    assert (d == FAIL).any(axis=1).mean() <= 0.01


def test_ab_in_turns_three_percent_fails_at_least_95pct(suite):
    """The acceptance (>= 95 %, none PASS), slots of one process per side up to 7."""
    rng = np.random.default_rng(15)
    d = ab_in_turns(rng, suite.pick(rng.integers(0, suite.size, (4000, 1))), AB, effect=math.log(1.03))
    print(f"ab in turns +3 %: FAIL {(d == FAIL).mean():.3f}, PASS {(d == PASS).mean():.3f}")
    assert (d == FAIL).mean() >= 0.95 and (d == PASS).mean() == 0


def test_ab_before_the_fix_is_not_rescued_by_the_rule(suite):
    """The measured pre-fix state (B faster by 3.1-5.5 % on two memory-bound rows, per-process
    offsets N(0, 2 %) on 9 more: tests/fakes/noise_model.py), reported in docs/measurement.md: the
    offset rows false-FAIL some A/A runs (more processes while MORE is a sequential look at
    noise that large), and the biased rows hide a +3 % slowdown. The rule does not replace the
    ab fix; these are not acceptance numbers."""
    rng = np.random.default_rng(6)
    runs = 500
    sd = np.broadcast_to(rng.choice(suite.sd, AB_BENCHMARKS), (runs, AB_BENCHMARKS))
    # the measured offsets below are the whole per-process term (one placement a side), no more
    pre = nm.Suite(sd, np.zeros_like(sd), np.zeros_like(sd), np.zeros_like(sd))
    sigma = np.full(AB_BENCHMARKS, nm.PROCESS_SIGMA)
    sigma[2:11] = 0.02
    bias = np.zeros((runs, AB_BENCHMARKS))
    bias[:, :2] = -rng.uniform(0.031, 0.055, (runs, 2))
    d = ab(rng, pre, AB, process_sigma=sigma, side_bias=bias)
    assert (d == FAIL).any(axis=1).mean() > 0.01
    offset_rows = d[:, 2:11]
    print(f"pre-fix A/A: FAIL runs {(d == FAIL).any(axis=1).mean():.3f}, offset rows PASS "
          f"{(offset_rows == PASS).mean():.3f} AMBIGUOUS {(offset_rows == AMBIGUOUS).mean():.3f}")
    slow = ab(rng, pre.pick(np.s_[:, :11]), AB, effect=math.log(1.03), process_sigma=sigma[:11],
              side_bias=bias[:, :11])
    print(f"pre-fix +3 %: biased rows FAIL {(slow[:, :2] == FAIL).mean():.3f}, "
          f"offset rows FAIL {(slow[:, 2:] == FAIL).mean():.3f}")
    assert (slow[:, :2] == FAIL).mean() < 0.5  # the bias hides the slowdown: why the fix was needed
