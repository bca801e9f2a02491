"""What ``fp4bench ab`` detects, measured on the runner's own loop.

The noise and costs are ``fakes.ab_noise`` (H200-like, heavier-tailed than ``noise_model``: the
audit's variant). ``test_the_loop_model_agrees_with_the_runner`` drives the real
``AbRunner.run`` on in-process fake workers on the simulated clock over whole runs (every
process at once, turns of one slot, turns of one process) and checks that ``fakes.ab_loop``
reaches the same decision on every benchmark, with the same number of processes and the same
estimate; the rates below then come from ``fakes.ab_loop`` over thousands of benchmarks, with
fixed seeds. The sweep is the default one on an H200 (docs/ab.md: 12 dense, 12 grouped and 3
fused-MoE rows), its 4 b512 grouped rows taking turns: of one slot (the H200) or of one process
(an 80 GB H100). docs/ab.md quotes these numbers.
"""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest

from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.estimate import decide
from fp4bench.ab.run import AbRunner
from fp4bench.gate.rule import Decision, Estimate, RuleSettings
from fp4bench.run.sweep import SweepOptions
from fakes import ab_loop, ab_noise, gpu_memory
from fakes import inproc_worker as inproc
from fakes.gpu_memory import GIB, GpuMemory

#: the benchmarks of the runner's runs (its fake workers' times are ``fakes.ab_noise``'s draws, not
#: the problem's): the smallest dense GEMMs of the catalog, so each process's checks are cheap
SWEEP = SweepOptions(models=("glm-4.5-air",), batches=(1,), tps=(8,), kinds=("dense",), backends=(inproc.BACKEND,),
                     tactics="all")
#: the defaults of ``fp4bench ab`` (its 3 % floor)
CFG = AbConfig(sweep=SWEEP, device="cpu", plugins=(inproc.PLUGIN, gpu_memory.__name__),
               settings=RuleSettings(floor=0.03))
#: a GPU memory that holds two processes of a row (one slot: the H200's b512 grouped rows) or one (an 80 GB H100)
CARDS = {2: lambda: GpuMemory(140 * GIB, {"A": 45 * GIB, "B": 45 * GIB}),
         1: lambda: GpuMemory(int(79.2 * GIB), {"A": 48 * GIB, "B": 48 * GIB})}


def _sweep_rows(rng: np.random.Generator, turns: int) -> list[ab_noise.Row]:
    grouped = ab_noise.suite_rows("grouped", 12, rng)
    return (ab_noise.suite_rows("dense", 12, rng) + grouped[:8]
            + [dataclasses.replace(r, capacity=turns) for r in grouped[8:]] + ab_noise.suite_rows("moe", 3, rng))


def _kind(row: ab_noise.Row) -> str:
    return row.kind if row.capacity is None else f"turns of {row.capacity}"


def _rates(runs: int, effect: float, seed: int, **noise) -> tuple[dict[str, list[Decision | None]], list[float]]:
    """Decisions per row kind and each run's simulated seconds over ``runs`` default sweeps per turn size."""
    out: dict[str, list[Decision | None]] = {}
    walls = []
    for turns in (2, 1):
        for i in range(runs):
            rng = np.random.default_rng([seed, turns, i])
            rows = ab_noise.Rows(_sweep_rows(rng, turns), effect=effect, seed=seed * 7919 + 100 * turns + i, **noise)
            ests, wall = ab_loop.run(rows, CFG)
            walls.append(wall)
            for row, e in zip(rows.rows, ests):
                out.setdefault(_kind(row), []).append(e.decision if e is not None else None)
    return out, walls


# --- the model is the runner --------------------------------------------------------------------

@pytest.mark.parametrize(("turns", "kinds", "effect"), [
    (None, ("dense", "grouped", "moe"), 0.03),
    (2, ("grouped", "grouped"), 0.03),
    (1, ("grouped", "grouped"), 0.03),
    (None, ("dense", "grouped"), 0.0),
])
def test_the_loop_model_agrees_with_the_runner(turns, kinds, effect):
    """Whole runs (process starts, checks, captures, rounds, pairs that join, turns, budgets)
    through ``AbRunner.run``: the same decision, processes and estimate as ``fakes.ab_loop``.
    Seconds each (every request of 12 to 28 workers through the real protocol): the evidence
    that the rates below are the runner's. The runs take 3 replays a round, not the default 10:
    every call of a fake round takes that round's drawn time, so a round's median is the draw
    whatever the count (``fakes.ab_loop`` has no count), and the count only multiplies the
    calls (256 a replay at the fake's nanosecond calls) that these runs spend most of their time on."""
    rng = np.random.default_rng([len(kinds), turns or 0])
    rows = [dataclasses.replace(ab_noise.suite_rows(k, 1, rng)[0], capacity=turns) for k in kinds]
    sim = ab_noise.Rows(rows, effect=math.log1p(effect), seed=11 + (turns or 0))
    gpu = CARDS[turns]() if turns else None
    backend = gpu_memory.BACKEND if turns else inproc.BACKEND  # the one whose prepare holds the card's memory
    cfg = dataclasses.replace(CFG, sweep=dataclasses.replace(SWEEP, backends=(backend,)), round_samples=3)
    fake = ab_noise.Fake(sim, cfg, solo=turns == 1, gpu=gpu)
    # one problem of the sweep per row: each tactic of the fake backend is a benchmark
    tactics = tuple(f"t{i}" for i in range((len(rows) + 1) // 2))
    with inproc.workers({s: dataclasses.replace(fake.behaviour(s), tactics=tactics) for s in "AB"}) as world:
        run = AbRunner(Side(sys.executable, {inproc.SIDE_ENV: "A"}), Side(sys.executable, {inproc.SIDE_ENV: "B"}),
                       cfg, progress=lambda line: None).run(select=lambda names, _: names[:len(rows)])
    model, wall = ab_loop.run(sim, cfg)
    assert len(run.pairs) == len(rows)
    for p, m in zip(run.pairs, model):
        e = p.estimate
        assert (e.decision, e.est.n_base, e.est.n_new) == (m.decision, m.est.n_base, m.est.n_new), p.name
        assert e.est.pct == pytest.approx(m.est.pct, abs=1e-3) and e.est.se == pytest.approx(m.est.se, rel=1e-3)
        assert [len(t) for t in p.turns] == ([turns] * len(p.turns) if turns else [])  # 2 = one slot
    assert world.clock.now() == pytest.approx(wall, abs=0.01)
    if gpu is not None:
        assert gpu.out_of_memory == [] and gpu.most <= turns


# --- the rates ----------------------------------------------------------------------------------

def test_three_percent_on_one_side_fails_at_least_95pct_of_every_row_kind():
    """+3 % on every row of side B (``fp4bench.testing.slowdown`` on B), the default sweep, the
    default budgets: FAIL in >= 95 % of the benchmarks of each row kind, and never PASS."""
    got, walls = _rates(40, math.log(1.03), seed=5)
    rates = {k: sum(d is Decision.FAIL for d in v) / len(v) for k, v in got.items()}
    print(f"+3 %: {rates}; simulated wall median {np.median(walls):.0f} s, p90 {np.percentile(walls, 90):.0f} s")
    assert all(r >= 0.95 for r in rates.values()), rates
    assert not any(d is Decision.PASS for v in got.values() for d in v)


def test_aa_never_fails_and_says_how_long_the_default_sweep_takes():
    """Unchanged stacks: no FAIL over 80 default sweeps (2160 benchmarks), and what the sweep
    costs on the simulated clock (process starts, checks, captures, rounds)."""
    got, walls = _rates(40, 0.0, seed=6)
    decisions = [d for v in got.values() for d in v]
    print(f"A/A: FAIL {sum(d is Decision.FAIL for d in decisions)} of {len(decisions)}, PASS "
          f"{sum(d is Decision.PASS for d in decisions) / len(decisions):.3f}; simulated wall median "
          f"{np.median(walls):.0f} s, p90 {np.percentile(walls, 90):.0f} s")
    assert Decision.FAIL not in decisions
    assert sum(d is Decision.PASS for d in decisions) / len(decisions) >= 0.99
    assert np.percentile(walls, 90) < CFG.time_budget_s


def test_the_documented_aa_ends_without_a_fail_in_20_repeats_with_cpu_like_noise():
    """docs/ab.md's A/A of one venv against itself on a loaded CPU: rounds scattering 1 %,
    processes 1 % apart (heavy-tailed), 20 default sweeps: 0 FAIL."""
    rng = np.random.default_rng(20)
    cpu = [ab_noise.Row("dense", 0.01, 0.01) for _ in range(27)]
    fails = 0
    for i in range(20):
        ests, _ = ab_loop.run(ab_noise.Rows(cpu, seed=int(rng.integers(1 << 30))), CFG)
        fails += sum(e is not None and e.decision is Decision.FAIL for e in ests)
    assert fails == 0


def test_a_huge_change_is_no_fail_without_its_lower_bound():
    """The stored gate's huge-change exception (Δ >= 2 x floor and every B process slower than
    every A process: by chance 1 in 20 with 3 processes a side) is not ab's: at the end of the
    budget an interval that reaches below the guard band is AMBIGUOUS, whatever the ordering."""
    s = RuleSettings(floor=0.03)
    est = Estimate(delta=math.log(1.08), lo=0.005, hi=0.15, se=0.02, df=8.0, n_base=3, n_new=3, separated=True)
    assert decide(est, s, budget_left=False) is Decision.AMBIGUOUS
    assert decide(est, s, budget_left=True) is Decision.MORE
    assert decide(dataclasses.replace(est, lo=s.threshold), s, budget_left=False) is Decision.FAIL
    assert decide(dataclasses.replace(est, delta=0.0, lo=-0.01, hi=0.0), s, budget_left=False) is Decision.PASS


def test_the_a_and_b_columns_are_the_estimate_delta_is_computed_from():
    """A process with many more samples (a replacement, a process that joined) weighs the pooled
    medians, and rounds that drifted make them disagree with the round-centred Δ: the columns
    show side A's geometric-mean round time and A x exp(Δ), never the pooled medians."""
    from fakes.benchjson import H200
    from fp4bench.ab.estimate import ab_estimate
    from fp4bench.ab.judge import judge
    from fp4bench.ab.records import AbRun, Paired, ProcPart, SideResult
    from fp4bench.gate.policy import Policy

    # B 2 % slower in every round; the GPU 10 % faster in rounds 2-3, where B1 took 10x its samples
    drift = [1.0, 1.0, 0.9, 0.9]
    parts, samples = [], {"A": [], "B": []}
    for i, side in enumerate(["A", "A", "A", "B", "B", "B"]):
        rounds = {r: 1e-4 * (1.02 if side == "B" else 1.0) * drift[r] * (1 + 0.001 * i) for r in range(4)}
        proc = f"{side}{i % 3 + 1}"
        parts.append(ProcPart(proc, side, i % 3, i, status="measured", rounds=rounds))
        samples[side] += list(rounds.values()) + (10 * [rounds[2], rounds[3]] if proc == "B1" else [])
    est = ab_estimate({p.proc: p.rounds for p in parts}, {p.proc: p.side for p in parts}, RuleSettings(floor=0.03),
                      budget_left=False)
    pair = Paired("dense::t0", SideResult("measured", samples=samples["A"], digest="d"),
                  SideResult("measured", samples=samples["B"], digest="d"), parts=parts, estimate=est)
    run = AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}}, [pair], {"A": 0, "B": 0},
                settings=RuleSettings(floor=0.03))
    (v,) = judge(run, Policy(floor=0.03)).verdicts
    assert np.median(samples["B"]) < np.median(samples["A"]) and est.est.delta > 0  # the pooled medians disagree
    assert v.new_median / v.base_median == pytest.approx(math.exp(est.est.delta), rel=1e-12)
    a_logs = [np.mean(np.log(list(p.rounds.values()))) for p in parts if p.side == "A"]
    assert v.base_median == pytest.approx(math.exp(np.mean(a_logs)), rel=1e-12)
