"""``fp4bench ab`` when the GPU cannot hold every process's copy of a benchmark: the slots take
turns (``ab.schedule.turns``), the turn-structured rounds are estimated per slot
(``ab.estimate.ab_estimate_paired``), idle processes release their memory, and a benchmark that
failed on both sides (e.g. out of memory) is not judged instead of failing B."""

from __future__ import annotations

import dataclasses
import math
import sys

import numpy as np
import pytest

from fp4bench.ab.estimate import ab_estimate, ab_estimate_paired
from fp4bench.ab.judge import FAILED_ON_BOTH, judge, outcome
from fp4bench.ab.report import report
from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.records import AbRun, Paired, SideResult
from fp4bench.ab.run import AbRunner
from fp4bench.ab.schedule import HEADROOM_MIN_BYTES, fits, resident_capacity, round_order, turns
from fp4bench.cli.ab import ab_main
from fp4bench.cli.command import EXIT_INCOMPLETE, EXIT_USAGE
from fp4bench.gate.policy import Policy
from fp4bench.gate.rule import Decision, RuleSettings
from fp4bench.gate.verdict import Status
from fp4bench.run.sweep import SweepOptions
from fakes import inproc_worker as inproc
from fakes.paths import FAKES as FAKES_PATH

FAKES = str(FAKES_PATH)
#: every worker is an in-process fake on a simulated clock (tests/conftest.py); the ab_env
#: backend reads each fake process's own environment, so a side's variables act as in a real worker
pytestmark = pytest.mark.usefixtures("sim_workers")
GIB = 1 << 30
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=("ab-spin",),
                     tactics="all")


# --- how many processes fit, and the turns ------------------------------------------------------

def test_resident_capacity_is_the_first_process_plus_what_fits_beside_it():
    # 140 GiB GPU, the first process peaked at 30 GiB, 100 GiB free after its capture; the
    # headroom is 5 % of the GPU (7 GiB): 93 // 30 = 3 more
    assert resident_capacity({"peak": 30 * GIB, "free": 100 * GIB, "total": 140 * GIB}) == 4
    assert resident_capacity({"peak": 30 * GIB, "free": 36 * GIB, "total": 140 * GIB}) == 1  # none beside it
    small = {"peak": 1 * GIB, "free": 20 * GIB, "total": 24 * GIB}  # headroom: the 2 GiB minimum
    assert resident_capacity(small) == 1 + (20 * GIB - HEADROOM_MIN_BYTES) // GIB
    assert resident_capacity(small, limit=2) == 2  # --max-resident caps it
    assert resident_capacity(None) is None and resident_capacity(None, limit=3) == 3  # CPU: no report


def _procs(groups, slots):
    """Turns as process ids."""
    return [[slots[i]["AB".index(side)] for i, side in turn] for turn in groups]


def test_turns_are_whole_slots_while_a_slot_fits_and_one_turn_when_everything_fits():
    slots = [("A1", "B1"), ("A2", "B2"), ("A3", "B3")]
    everyone = [["A1", "B1", "A2", "B2", "A3", "B3"]]
    assert _procs(turns(slots, None), slots) == everyone and _procs(turns(slots, 6), slots) == everyone
    assert _procs(turns(slots, 5), slots) == [["A1", "B1", "A2", "B2"], ["A3", "B3"]]  # 2 slots = 4 processes
    assert _procs(turns(slots, 2), slots) == _procs(turns(slots, 3), slots) == [["A1", "B1"], ["A2", "B2"], ["A3", "B3"]]
    two = [("A1", "B1"), (None, None), ("A3", None)]
    assert _procs(turns(two, 2), two) == [["A1", "B1"], ["A3"]]  # empty slots are skipped


def test_when_one_process_fits_the_sides_take_turns_one_process_at_a_time():
    """The 80 GB case: 48 GiB a process, one fits. A slot (one process of each side) never
    shares the GPU; the sides alternate A B, B A, A B (the start pattern), B opening when B's
    process captured first."""
    slots = [("A1", "B1"), ("A2", "B2"), ("A3", "B3")]
    assert _procs(turns(slots, 1), slots) == [["A1"], ["B1"], ["B2"], ["A2"], ["A3"], ["B3"]]
    assert _procs(turns(slots, 1, first="B"), slots) == [["B1"], ["A1"], ["A2"], ["B2"], ["B3"], ["A3"]]
    assert all(len(t) <= 1 for t in turns(slots, 1))


def test_a_turn_starts_only_when_the_free_memory_holds_it():
    report = {"peak": 48 * GIB, "free": 49 * GIB, "total": 80 * GIB}  # another process still holds 30 GiB
    assert not fits(report, 48 * GIB, 1)
    assert fits({**report, "free": 79 * GIB}, 48 * GIB, 1) and not fits({**report, "free": 79 * GIB}, 48 * GIB, 2)
    assert fits(None, 48 * GIB, 2)  # CPU: no report


# --- the estimator of turn-structured rounds ----------------------------------------------------

def _turn_rounds(rng, effect: float, process_sigma: float = 0.005, turn_sigma: float = 0.05,
                 noise: float = 0.002, slots: int = 3, rounds: int = 6):
    """Rounds of ``slots`` turns, each with its own rounds and its own GPU state (``turn_sigma``:
    5 % between turns, far more than any process offset), B ``effect`` (log) slower."""
    out, side_of, slot_of = {}, {}, {}
    for i in range(slots):
        level = rng.normal(0, turn_sigma)
        for s in "AB":
            p = f"{s}{i + 1}"
            off = rng.normal(0, process_sigma) + (effect if s == "B" else 0.0)
            out[p] = {i * rounds + r: 1e-3 * math.exp(level + off + rng.normal(0, noise)) for r in range(rounds)}
            side_of[p], slot_of[p] = s, i
    return out, side_of, slot_of


def test_paired_estimate_is_the_mean_slot_log_ratio_whatever_each_turn_shares():
    rng = np.random.default_rng(0)
    rounds, side_of, slot_of = _turn_rounds(rng, math.log(1.05), process_sigma=0.0, noise=0.0)
    e = ab_estimate_paired(rounds, side_of, slot_of, RuleSettings(floor=0.03), budget_left=True)
    assert e.est.pct == pytest.approx(5.0, abs=1e-9)  # 5 % turn-to-turn shifts cancel exactly
    assert e.decision is Decision.FAIL and e.est.n_base == e.est.n_new == 3


def test_paired_estimate_keeps_its_error_rate_where_round_centring_would_not():
    """Centring a round of two processes makes A's and B's offsets mirror images, so the
    unpaired estimate over the turns takes one slot's difference for two independent replicates
    and halves its variance. On unchanged stacks with N(0, 0.5 %) process offsets (the noise
    model's PROCESS_SIGMA) the paired estimate keeps its FAIL rate within the rule's 0.5 % a
    look; the same data through the unpaired estimate is over-confident."""
    rng = np.random.default_rng(1)
    settings = RuleSettings(floor=0.03, prior_df=0.0, min_sigma=0.0)  # the data alone decides
    paired_se, unpaired_se, fails = [], [], 0
    n = 2000
    for _ in range(n):
        rounds, side_of, slot_of = _turn_rounds(rng, 0.0)
        p = ab_estimate_paired(rounds, side_of, slot_of, settings, budget_left=False)
        u = ab_estimate(rounds, side_of, settings, budget_left=False)
        paired_se.append(p.est.se)
        unpaired_se.append(u.est.se)
        # a one-sided look at the 0.995 bound: is the interval's lower end above 0?
        fails += p.est.lo > 0
    assert np.median(np.array(paired_se) / np.array(unpaired_se)) == pytest.approx(math.sqrt(2), rel=0.15)
    assert fails / n <= 0.01


# --- runs on CPU with the fake environment ------------------------------------------------------

def _cfg(**kw) -> AbConfig:
    base = dict(sweep=SWEEP, device="cpu", replicates=3, rounds=4, max_rounds=4, round_samples=4, timeout_s=60,
                plugins=("ab_env",), settings=RuleSettings(floor=0.2), extra_pairs=0)
    return AbConfig(**{**base, **kw})


def _holds_two(sent: list[tuple[str, dict]]):
    """``AbRunner._ask`` that records every request in ``sent`` and reports, for every capture
    with a memory report, a GPU that holds two processes of the case (30 GiB peak, 50 GiB free
    beside the first of 140 GiB)."""
    ask = AbRunner._ask

    def with_memory(self, pid, msg, what):
        sent.append((pid, dict(msg)))
        reply = ask(self, pid, msg, what)
        if msg.get("memory"):
            reply["memory"] = {"peak": 30 * GIB, "free": 50 * GIB, "total": 140 * GIB}
        return reply

    return with_memory


@pytest.fixture(scope="module")
def in_turns():
    """B 4x slower; every capture reports a GPU that holds only two processes of this case at a
    time (30 GiB peak, 50 GiB free beside the first of 140 GiB): the three slots take turns."""
    sent: list[tuple[str, dict]] = []
    mp = pytest.MonkeyPatch()
    mp.setattr(AbRunner, "_ask", _holds_two(sent))
    mp.syspath_prepend(FAKES)
    try:
        a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_SPIN_S": "0.01", "FAKE_TACTICS": "t0"})
        b = Side(a.python, {**a.env, "FAKE_SLOWDOWN": "3.0"})
        lines: list[str] = []
        with inproc.workers():
            run = AbRunner(a, b, _cfg(), progress=lines.append).run()
    finally:
        mp.undo()
    return run, sent, lines


def test_slots_take_turns_when_the_gpu_holds_two_processes(in_turns):
    run, sent, lines = in_turns
    assert run.pairs and all(p.capacity == 2 for p in run.pairs)
    for p in run.pairs:
        assert [sorted(t) for t in p.turns] == [["A1", "B1"], ["A2", "B2"], ["A3", "B3"]]
        # every round visits the processes of one turn only, each turn its 4 base rounds
        assert len(p.order) == 12 and all(len(o) == 2 and o[0][1] == o[1][1] for o in p.order)
        assert {x.proc: len(x.rounds) for x in p.parts} == {f"{s}{i}": 4 for s in "AB" for i in (1, 2, 3)}
    assert any("memory: 30.0 GiB per process, 50.0 of 140.0 GiB free beside the first; 3 turns of 1 slot" in line
               for line in lines)
    # a process releases its copy at the end of its turn, before the next turn captures
    first = run.pairs[0].name
    log = [(pid, m["op"], m.get("release")) for pid, m in sent if m.get("op") in ("time", "drop", "check")]
    a1_drop = log.index(("A1", "drop", True))
    assert all(pid in ("A1", "B1") for pid, op, _ in log[:a1_drop] if op == "check"), first
    assert ("A2", "check", None) in log[a1_drop:]


def test_a_run_in_turns_is_judged_per_slot_and_fails_a_slower_b(in_turns):
    run, _, _ = in_turns
    result = judge(run, Policy(floor=0.2))
    assert [v.status for v in result.verdicts] == [Status.FAIL] * len(run.pairs)
    for p in run.pairs:  # the per-slot estimate: one log-ratio per slot, three slots
        assert p.estimate.est.n_base == p.estimate.est.n_new == 3
        assert 200 < p.estimate.est.pct < 500
    assert outcome(run, result)[0] == 1


def _most_holding(sent: list[tuple[str, dict]]) -> int:
    """The most processes holding a case at once (from its check or capture to its release)."""
    holding: set[str] = set()
    most = 0
    for pid, m in sent:
        if m.get("op") in ("check", "time"):
            holding.add(pid)
        elif m.get("op") == "drop" and m.get("release"):
            holding.discard(pid)
        most = max(most, len(holding))
    return most


def test_an_added_process_pair_takes_its_own_turn_and_never_sits_beside_another(monkeypatch):
    """The processes disagree (forced): a pair joins after the first pass, as a fourth turn; at
    no time do more processes hold the case than the GPU holds (two, from the memory report)."""
    sent: list[tuple[str, dict]] = []
    estimate = AbRunner._estimate
    calls = {"n": 0}

    def disagree_once(self, parts, *, budget_left, **kw):
        est = estimate(self, parts, budget_left=budget_left, **kw)
        calls["n"] += 1
        if est is not None and calls["n"] == 1:
            return dataclasses.replace(est, decision=Decision.MORE, between_var=1.0, within_var_of_mean=0.0)
        return est

    monkeypatch.setattr(AbRunner, "_ask", _holds_two(sent))
    monkeypatch.setattr(AbRunner, "_estimate", disagree_once)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_SPIN_S": "0.002", "FAKE_TACTICS": "t0"})
    lines: list[str] = []
    run = AbRunner(a, a, _cfg(extra_pairs=1, max_rounds=8), progress=lines.append).run()
    first = run.pairs[0]
    assert any("added" in line for line in lines), lines
    assert [sorted(t) for t in first.turns] == [["A1", "B1"], ["A2", "B2"], ["A3", "B3"]]
    extra = {x.proc for x in first.parts} - {"A1", "A2", "A3", "B1", "B2", "B3"}
    assert len(extra) == 2 and all(len(x.rounds) >= 4 for x in first.parts if x.proc in extra)
    assert _most_holding(sent) <= 2


def test_max_resident_below_a_pair_is_a_usage_error_before_any_worker(capsys):
    code = ab_main(["--a", sys.executable, "--b", sys.executable, "--max-resident", "1"])
    assert code == EXIT_USAGE and "--max-resident" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--max-resident"):
        AbConfig(sweep=SWEEP, max_resident=1)


def test_a_process_that_keeps_memory_after_a_release_is_replaced(monkeypatch):
    """A process whose allocator still holds gigabytes after releasing a benchmark (seen on an
    H200 after a failed case) would shrink every later benchmark's turns: it is replaced."""
    ask = AbRunner._ask
    leaked: list[str] = []

    def leaky(self, pid, msg, what):
        reply = ask(self, pid, msg, what)
        if msg.get("op") == "drop" and msg.get("release") and pid == "B1" and not leaked:
            leaked.append(pid)
            reply["held_bytes"] = 5 * GIB
        return reply

    monkeypatch.setattr(AbRunner, "_ask", leaky)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0"})
    lines: list[str] = []
    run = AbRunner(a, a, _cfg(replicates=2, rounds=2, max_rounds=2, settings=RuleSettings(floor=5.0)),
                   progress=lines.append).run()
    (new,) = [i for i in run.processes if i.replaces == "B1"]
    assert new.side == "B" and new.slot == 0
    assert any("[B1] still holds 5.0 GiB" in x for x in lines) and any("[B1] replaced by" in x for x in lines)
    assert all(p.a.status == p.b.status == "measured" for p in run.pairs)
    assert any(x.proc == new.proc for p in run.pairs[1:] for x in p.parts)  # the fresh one takes B1's place


# --- failed on both sides -----------------------------------------------------------------------

def _both_failed_run(b_reason: str) -> AbRun:
    from fakes.benchjson import H200

    oom = "raised OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB"
    pairs = [Paired("moe::t0", SideResult("failed", reason=oom), SideResult("failed", reason=b_reason)),
             Paired("dense::t0", SideResult("measured", samples=[1e-5] * 8, digest="d"),
                    SideResult("measured", samples=[1e-5] * 8, digest="d"))]
    rng = np.random.default_rng(2)
    rounds = {f"{s}{i}": {r: 1e-5 * math.exp(rng.normal(0, 0.002)) for r in range(4)} for s in "AB" for i in (1, 2, 3)}
    pairs[1].estimate = ab_estimate(rounds, {p: p[0] for p in rounds}, RuleSettings(floor=0.03), budget_left=False)
    return AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}}, pairs, {"A": 0, "B": 0},
                 settings=RuleSettings(floor=0.03))


def test_a_benchmark_that_failed_on_both_sides_is_not_judged_and_the_run_incomplete():
    run = _both_failed_run("raised OutOfMemoryError: CUDA out of memory. Tried to allocate 12.00 GiB")
    result = judge(run, Policy(floor=0.03))
    (v,) = [v for v in result.verdicts if v.name == "moe::t0"]
    assert v.status is Status.AMBIGUOUS and v.kind == FAILED_ON_BOTH and v.undecided
    assert "A: raised OutOfMemoryError" in v.reason and "B: raised OutOfMemoryError" in v.reason
    code, line = outcome(run, result)
    assert code == EXIT_INCOMPLETE and "1 not judged (1 failed on both)" in line, line
    assert "failed on both" in report(run, result)


def test_a_wrong_output_on_b_only_still_fails():
    run = _both_failed_run("")
    run.pairs[0].a = SideResult("measured", samples=[1e-5] * 8, digest="d")
    run.pairs[0].b = SideResult("failed", reason="mismatch: 12 of 4096 elements beyond the bound")
    result = judge(run, Policy(floor=0.03))
    (v,) = [v for v in result.verdicts if v.name == "moe::t0"]
    assert v.status is Status.FAIL and v.kind == "wrong output" and outcome(run, result)[0] == 1


def test_round_order_of_one_turn_alternates_which_side_opens():
    opens = [round_order([("A2", "B2")], r)[0][0] for r in range(4)]
    assert opens == list("ABBA")
