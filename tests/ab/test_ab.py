"""``fp4bench ab`` on CPU with two fake environments: the same interpreter twice, made
different by environment variables read by the ``ab-spin`` backend (tests/fakes/ab_env.py), or
by the test-only slowdown wrapper loaded on one side."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from fp4bench.ab.estimate import ab_estimate, offsets
from fp4bench.ab.judge import WRONG_OUTPUT, judge, outcome
from fp4bench.ab.report import report, to_json
from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.records import AbRun, Paired, ProcInfo, SideResult
from fp4bench.ab.run import AbRunner
from fp4bench.ab.schedule import alloc_order, round_order, start_order
from fp4bench.cli.ab import ab_main
from fp4bench.cli.command import EXIT_INCOMPLETE
from fp4bench.gate.policy import Policy
from fp4bench.gate.rule import Decision, RuleSettings
from fp4bench.gate.verdict import Status
from fp4bench.gate.verdict_json import validate
from fp4bench.report.tables import verdict_message
from fp4bench.run.sweep import SweepOptions
from fakes import inproc_worker as inproc
from fakes.pytest_run import BENCH_FILE
from fakes.paths import FAKES as FAKES_PATH

pytest_plugins = ["pytester"]
#: every worker is an in-process fake on a simulated clock (tests/conftest.py); the ab_env
#: backend reads each fake process's own environment, so a side's variables act as in a real worker
pytestmark = pytest.mark.usefixtures("sim_workers")

FAKES = str(FAKES_PATH)
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=("ab-spin",),
                     tactics="all")
#: CPU runs: a 20 % floor, far above what a loaded shared 2-core machine does to 10 ms spins
WIDE = RuleSettings(floor=0.2)


# --- the schedule -------------------------------------------------------------------------------


def test_start_order_alternates_which_side_starts_first():
    assert start_order(3) == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2)]
    with pytest.raises(ValueError, match="at least one replicate"):
        start_order(0)


@pytest.mark.parametrize("replicates", [2, 3, 4])
def test_allocation_order_gives_each_side_first_place_equally_over_two_benchmarks(replicates):
    slots = [(f"A{i}", f"B{i}") for i in range(replicates)]
    firsts = []
    for bench in (0, 1):
        order = alloc_order(slots, bench)
        assert sorted(order) == sorted(p for s in slots for p in s)
        firsts += [min(s, key=order.index)[0] for s in slots]  # who of each slot allocated first
    assert firsts.count("A") == firsts.count("B") == replicates


@pytest.mark.parametrize("replicates", [2, 3, 4, 5])
def test_every_round_visits_every_process_and_each_side_opens_half_the_rounds(replicates):
    slots = [(f"A{i}", f"B{i}") for i in range(replicates)]
    everyone = sorted(p for s in slots for p in s)
    rounds = [round_order(slots, r) for r in range(8)]
    assert all(sorted(o) == everyone for o in rounds)
    assert [o[0][0] for o in rounds] == list("ABBAABBA")  # ABBA at the opening slot
    for k in range(4):  # each round pair is a sequence and its reverse: every process in the middle on average
        pos = {p: rounds[2 * k].index(p) + rounds[2 * k + 1].index(p) for p in everyone}
        assert set(pos.values()) == {len(everyone) - 1}
    # a lost process (its slot half-empty) is left out, the others still visited
    assert "B1" not in round_order([("A0", "B0"), ("A1", None)], 0)


# --- the estimator ------------------------------------------------------------------------------


def _rounds(offset: dict[str, float], n_rounds: int = 8, drift: float = 0.02, noise: float = 0.002,
            seed: int = 0) -> dict[str, dict[int, float]]:
    """Round medians: a per-process offset, a drift common to each round, a little noise."""
    rng = np.random.default_rng(seed)
    out: dict[str, dict[int, float]] = {p: {} for p in offset}
    for r in range(n_rounds):
        common = 1e-5 * (1 + drift * r)
        for p, off in offset.items():
            out[p][r] = common * (1 + off) * float(np.exp(rng.normal(0, noise)))
    return out


SIDE = {f"{s}{i}": s for s in "AB" for i in (1, 2, 3)}


def test_round_centring_removes_what_a_round_shares():
    m = offsets(_rounds({p: 0.0 for p in SIDE}, drift=0.5, noise=0.0))
    assert max(abs(v) for v in m.values()) < 1e-12  # a 50 % drift per round: gone


def test_a_side_independent_offset_pattern_gives_no_change():
    """Offsets that follow the slot (placement, start order), the same for A and B: no change."""
    by_slot = {"1": 0.02, "2": -0.01, "3": 0.0}
    e = ab_estimate(_rounds({p: by_slot[p[1]] for p in SIDE}), SIDE, RuleSettings(floor=0.03), budget_left=True)
    assert abs(e.est.pct) < 0.2 and e.decision is not Decision.FAIL
    assert e.offsets["A1"] - e.offsets["A2"] == pytest.approx(0.03, abs=0.005)  # visible per process
    assert e.spread_dominates  # the processes disagree: another pair, not more rounds, would help
    small = {"1": 0.002, "2": -0.001, "3": 0.0}
    e = ab_estimate(_rounds({p: small[p[1]] for p in SIDE}), SIDE, RuleSettings(floor=0.03), budget_left=True)
    assert abs(e.est.pct) < 0.2 and e.decision is Decision.PASS


def test_b_only_five_percent_fails():
    e = ab_estimate(_rounds({p: (0.05 if s == "B" else 0.0) for p, s in SIDE.items()}), SIDE,
                    RuleSettings(floor=0.03), budget_left=True)
    assert e.decision is Decision.FAIL and 4.5 < e.est.pct < 5.5
    lo, hi = e.est.interval_pct
    assert lo < e.est.pct < hi


def test_a_process_with_too_few_rounds_is_no_replicate():
    r = _rounds({p: 0.0 for p in SIDE})
    r["A2"] = {0: r["A2"][0]}
    r["A3"] = {}
    assert ab_estimate(r, SIDE, RuleSettings(), budget_left=True) is None  # one usable A process


# --- runs with fake environments ----------------------------------------------------------------


def _cfg(**kw) -> AbConfig:
    base = dict(sweep=SWEEP, device="cpu", replicates=2, rounds=4, max_rounds=4, round_samples=4, timeout_s=60,
                plugins=("ab_env",), settings=WIDE)
    return AbConfig(**{**base, **kw})


def _run(env_b: dict, env_a: dict | None = None, **kw):
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_SPIN_S": "0.01", **(env_a or {})})
    b = Side(a.python, {"PYTHONPATH": FAKES, "FAKE_SPIN_S": "0.01", **env_b})
    lines: list[str] = []
    runner = AbRunner(a, b, _cfg(**kw), progress=lines.append)
    return runner.run(), lines


SIM = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=(inproc.BACKEND,),
                   tactics="all")


def _sim_run(sides: dict[str, inproc.Behaviour], **kw):
    """``AbRunner.run`` with in-process fake workers (fakes.inproc_worker) on a simulated clock:
    ``sides`` says what each side's processes do."""
    a, b = (Side(sys.executable, {inproc.SIDE_ENV: s}) for s in "AB")
    lines: list[str] = []
    with inproc.workers(sides) as world:
        run = AbRunner(a, b, _cfg(sweep=SIM, plugins=(inproc.PLUGIN,), **kw), progress=lines.append).run()
    return run, lines, world


@pytest.fixture(scope="module")
def slow_b():
    """B 4x slower on every call, 1 % noise per call and 2 % per process, and another version."""
    run, lines, _ = _sim_run({"A": inproc.Behaviour(call_sd=0.01, process_sd=0.02),
                              "B": inproc.Behaviour(call_sd=0.01, process_sd=0.02, slowdown=3.0, version="2.0")})
    return run, lines


def test_replicates_alternate_and_every_process_is_timed_every_round(slow_b):
    run, lines = slow_b
    assert [(i.proc, i.start_index) for i in run.processes] == [("A1", 0), ("B1", 1), ("B2", 2), ("A2", 3)]
    assert len({i.pid for i in run.processes}) == 4  # four processes: four CUDA contexts / allocations
    for p in run.pairs:
        assert len(p.order) == 4 and all(sorted(o) == ["A1", "A2", "B1", "B2"] for o in p.order)
        assert [o[0][0] for o in p.order] == list("ABBA")
        assert {x.proc: len(x.rounds) for x in p.parts} == {"A1": 4, "A2": 4, "B1": 4, "B2": 4}
        assert not p.digest_mismatch and p.a.digest
    first = [[x.proc for x in sorted(p.parts, key=lambda x: x.alloc_index)][0] for p in run.pairs]
    assert first == ["A1", "B1"]  # the second benchmark allocates in the flipped order
    assert any("prepared + checked" in line for line in lines)


def test_workers_import_together_and_start_one_at_a_time_in_start_order(monkeypatch):
    """Every process is launched (it imports torch and the harness) before the first handshake;
    the handshakes (CUDA context, backends) then go one at a time in ``start_order``."""
    from fakes.inproc_worker import InprocWorker

    events: list[tuple[str, str]] = []
    launch, start = InprocWorker.launch, InprocWorker.start

    def logged_launch(self):
        events.append(("launch", self.spec.env.get("SIDE", "")))
        launch(self)

    def logged_start(self):
        events.append(("start", self.spec.env.get("SIDE", "")))
        return start(self)

    monkeypatch.setattr(InprocWorker, "launch", logged_launch)
    monkeypatch.setattr(InprocWorker, "start", logged_start)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "SIDE": "A"})
    runner = AbRunner(a, Side(a.python, {**a.env, "SIDE": "B"}), _cfg(replicates=2), progress=lambda line: None)
    try:
        runner.start()
    finally:
        runner.close()
    sides = [side for side, _ in start_order(2)]
    assert events == [("launch", s) for s in sides] + [("start", s) for s in sides]
    assert [i.proc for i in runner.info.values()] == ["A1", "B1", "B2", "A2"]


def test_close_hangs_up_every_process_before_waiting_for_any(sim_workers):
    """The processes exit at once (each tears down its CUDA context and libraries), not one after
    the other: every stdin is closed before the first wait."""
    a, b = (Side(sys.executable, {inproc.SIDE_ENV: s}) for s in "AB")
    runner = AbRunner(a, b, _cfg(sweep=SIM, plugins=(inproc.PLUGIN,)))
    runner.start()
    pids = {p.pid for p in sim_workers.processes}
    assert len(pids) == 4 and sim_workers.exits == []
    runner.close()
    exits = sim_workers.exits
    assert [what for what, _ in exits] == ["hang up"] * 4 + ["wait"] * 4
    assert {pid for _, pid in exits[:4]} == {pid for _, pid in exits[4:]} == pids
    assert all(p.exit_status == 0 for p in sim_workers.processes) and runner.workers == {}


@pytest.mark.parametrize("timer", ["span", "cupti"])
def test_every_worker_is_told_the_timer_of_its_samples(timer):
    """``$FP4BENCH_TIMER`` in both sides' workers: test-only code sized in the timer's unit
    (fp4bench.testing.slowdown) reads it; a side's own variables stay."""
    a = Side(sys.executable, {"X": "1"})
    runner = AbRunner(a, Side(sys.executable), _cfg(timer=timer), progress=lambda line: None)
    assert runner.specs["A"].env == {"X": "1", "FP4BENCH_TIMER": timer}
    assert runner.specs["B"].env == {"FP4BENCH_TIMER": timer}


def test_replays_per_round_fit_the_round_time_between_3_and_the_cap():
    from fp4bench.ab.benchmark import replays_per_round

    cfg = _cfg(round_samples=10, round_s=0.25)
    assert replays_per_round({"samples_s": [1e-6, 1e-6, 1e-6], "calls_per_sample": 256}, cfg) == 10
    assert replays_per_round({"samples_s": [0.04, 0.05, 0.06], "calls_per_sample": 1}, cfg) == 5
    assert replays_per_round({"samples_s": [0.176] * 3, "calls_per_sample": 1}, cfg) == 3  # never below 3
    assert replays_per_round({"samples_s": [0.02] * 3, "calls_per_sample": 4}, cfg) == 3  # 80 ms replays
    assert replays_per_round({"samples_s": [], "calls_per_sample": 1}, cfg) == 10  # nothing to size on
    with pytest.raises(ValueError, match="round_s: must be > 0 seconds, got 0"):
        _cfg(round_s=0)


def test_every_round_of_a_benchmark_has_the_same_replay_count(slow_b):
    run, _ = slow_b
    js = to_json(run, judge(run, Policy(floor=0.2)))
    for p, row in zip(run.pairs, js["benchmarks"]):
        assert p.round_samples == 4 and row["evidence"]["round_samples"] == 4 and row["evidence"]["wall_s"] > 0
        assert all(len(x.samples) == 4 * len(x.rounds) for x in p.parts)


def test_a_slower_b_fails_with_its_interval_and_per_process_offsets(slow_b):
    run, _ = slow_b
    result = judge(run, Policy(floor=0.2))
    assert [v.status for v in result.verdicts] == [Status.FAIL, Status.FAIL], [verdict_message(v) for v in result.verdicts]
    assert outcome(run, result)[0] == 1
    text = report(run, result)
    assert re.search(r"FAIL .*\+\d+\.\d% \[\+\d+\.\d, \+\d+\.\d\]", text), text
    js = to_json(run, result)
    assert {(r["evidence"]["a_version"], r["evidence"]["b_version"]) for r in js["benchmarks"]} == {("1.0", "2.0")}
    row = js["benchmarks"][0]
    lo, hi = row["interval_pct"]
    assert lo > 20 and lo < row["delta_pct"] < hi
    assert {(x["process"], x["side"], x["start_index"]) for x in row["evidence"]["processes"]} == {
        ("A1", "A", 0), ("B1", "B", 1), ("B2", "B", 2), ("A2", "A", 3)}
    procs = {p["process"]: p for p in js["evidence"]["processes"]}
    assert procs["A1"]["allocated_first_in_slot"] == 1 and procs["B1"]["allocated_first_in_slot"] == 1
    assert all(len(p["offset_pct"]) == 2 for p in procs.values())


def test_a_worker_that_dies_partway_is_named_dropped_and_replaced():
    dies = inproc.Behaviour(call_sd=0.01, kernel_s=inproc.at_call(40, "crash", once=True))
    run, lines, world = _sim_run({"A": dies, "B": dies})
    assert len(run.crashes) == 1 and [p.calls for p in world.processes if p.exit_status == inproc.ABORTED] == [40]
    crash = run.crashes[0]
    assert "died during" in crash.reason and "killed by SIGABRT (abort)" in crash.reason
    (hit,) = [p for p in run.pairs if p.name == crash.benchmark]
    (dead,) = [x for x in hit.parts if x.proc == crash.proc]
    assert dead.status == "lost" and dead.rounds == {}  # its partial replicate is dropped
    (repl,) = [i for i in run.processes if i.replaces == crash.proc]
    assert repl.side == crash.side and any(x.proc == repl.proc and x.rounds for x in hit.parts)
    assert crash.proc not in hit.estimate.offsets
    live = [x for x in hit.parts if x.status == "measured"]
    assert len(hit.a.samples) + len(hit.b.samples) == sum(len(x.samples) for x in live)  # not the dead one's
    result = judge(run, Policy(floor=0.2))
    text = report(run, result)
    assert f"CRASH: process {crash.proc} (side {crash.side}) lost during" in text
    assert f"crashed: {crash.proc} (dropped)" in " ".join(text.split())


@pytest.mark.parametrize("timer", ["span", "cupti"])
def test_timer_choice_keeps_the_profiler_out_of_span_rounds(monkeypatch, timer):
    """span: the capture step of one process per side is profiled for the kernel names (3 samples,
    not used) and the rounds are not; cupti: every round profiled, no capture profiled."""
    sent: list[tuple[str, dict]] = []
    ask = AbRunner._ask

    def recording(self, pid, msg, what):
        sent.append((pid, dict(msg)))
        return ask(self, pid, msg, what)

    monkeypatch.setattr(AbRunner, "_ask", recording)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0"})
    run = AbRunner(a, a, _cfg(rounds=2, max_rounds=2, timer=timer, settings=RuleSettings(floor=5.0))).run()
    assert len(run.pairs) == 2 and all(p.a.status == p.b.status == "measured" for p in run.pairs)
    timed = [(pid, m) for pid, m in sent if m.get("op") == "time"]
    rounds = [pid for pid, m in timed if m["samples"] == 4]
    captures = [(pid, m["kernel_time"]) for pid, m in timed if m["samples"] == 3]
    assert sorted(rounds) == sorted(["A1", "A2", "B1", "B2"] * 2 * 2)  # 2 rounds x 2 benchmarks
    assert all(m["kernel_time"] is (timer == "cupti") for _, m in timed if m["samples"] == 4)
    assert len(captures) == 4 * 2  # every process captures every benchmark once
    profiled = sorted(pid[0] for pid, k in captures if k)
    # span: every process profiles its capture once, so no process carries the profiler's after-effect
    # alone (docs/results-h200.md run 16); cupti: the rounds are profiled instead
    assert profiled == (["A"] * 4 + ["B"] * 4 if timer == "span" else [])
    for p in run.pairs:  # the capture step adds no samples
        assert len(p.a.samples) == len(p.b.samples) == 2 * 2 * 4


def test_interrupted_run_judges_what_finished_and_lists_the_rest():
    """SIGINT (a time limit via ``timeout -s INT``, Ctrl-C) during the second benchmark: the first
    is judged, the others are listed as not reached, the workers are gone, the run is incomplete."""
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0,t1"})
    seen: list[str] = []

    def progress(line: str) -> None:
        seen.append(line)
        if "2/4 prepared + checked" in line:
            raise KeyboardInterrupt

    runner = AbRunner(a, a, _cfg(rounds=2, max_rounds=2, settings=RuleSettings(floor=5.0)), progress=progress)
    run = runner.run()
    assert len(run.pairs) == 1 and len(run.not_reached) == 3
    assert not runner.workers
    result = judge(run, Policy(floor=0.2))
    assert "INCOMPLETE: interrupted, 3 benchmarks not reached" in report(run, result)
    assert to_json(run, result)["evidence"]["not_reached"] == run.not_reached
    assert outcome(run, result)[0] == EXIT_INCOMPLETE
    # --allow-missing (fp4bench ab, like compare and pytest): what was not reached does not fail
    assert outcome(run, judge(run, Policy(floor=0.2, allow_missing=True)))[0] == 0


def _lost_run() -> AbRun:
    """A benchmark whose B side kept a single process (a worker died, no budget for a replacement)."""
    from fakes.benchjson import H200

    a = SideResult("measured", samples=[1e-5] * 8, digest="d")
    pair = Paired("b::lost", a, SideResult("measured", samples=[1e-5] * 4, digest="d"), [["A1", "B1"]])
    from fp4bench.ab.records import Crash

    pair.crashes = [Crash("B2", "B", "b::lost", "round 2 of", "process B2 died: killed by SIGABRT (abort)")]
    return AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}}, [pair], {"A": 0, "B": 0},
                 processes=[ProcInfo("A1", "A", 0, 0), ProcInfo("B2", "B", 1, 2, crash="died")],
                 crashes=list(pair.crashes), settings=WIDE)


def test_a_benchmark_left_with_too_few_replicates_is_not_judged_and_incomplete():
    run = _lost_run()
    result = judge(run, Policy())
    (v,) = result.verdicts
    assert v.status is Status.AMBIGUOUS and v.kind == "worker lost" and "not judged" in v.reason
    assert outcome(run, result) == (EXIT_INCOMPLETE, "1 AMBIGUOUS; nothing judged: no benchmark was timed on both "
                                                     "sides (1 not judged: 1 worker lost) → incomplete (exit 3)")
    assert "CRASH: process B2 (side B) lost during round 2 of b::lost" in report(run, result)


def test_cases_skipped_on_both_sides_are_listed_collapsed():
    run = _lost_run()
    run.pairs += [Paired(f"b::skip{i}", SideResult("skipped", reason="needs SM100"),
                         SideResult("skipped", reason="needs SM100")) for i in range(5)]
    result = judge(run, Policy())
    text = " ".join(report(run, result).split())
    assert "skipped on both sides (5): b::skip0 (needs SM100), b::skip1 (needs SM100), b::skip2 (needs SM100) ..." in text
    assert len(to_json(run, result)["evidence"]["skipped_on_both"]) == 5


def _cli(*extra: str) -> list[str]:
    return ["--a", sys.executable, "--b", sys.executable, "--plugin", "ab_env", "--kinds", "dense", "--batches",
            "1", "--tp", "8", "--device", "cpu", "--replicates", "2", "--rounds", "4", "--max-rounds", "4",
            "--round-samples", "4", "--floor", "20", *extra]


def test_cli_usage_errors_come_before_any_worker_starts(capsys, monkeypatch):
    from fp4bench.run.worker.pool import Worker

    monkeypatch.setattr(Worker, "start", lambda self: pytest.fail("a worker started"))
    monkeypatch.syspath_prepend(FAKES)  # the --plugin module is importable here: its names are known up front
    assert ab_main(_cli("--backends", "torch-bf16,no-such-backend")) == 2
    err = capsys.readouterr().err
    assert "--backends: unknown backend no-such-backend; known: " in err and "torch-bf16" in err
    for bad, what in ((["--replicates", "1"], "--replicates"), (["--run-budget", "nan"], "--run-budget"),
                      (["--case-timeout", "0"], "--case-timeout"), (["--rounds", "1"], "--rounds")):
        assert ab_main(_cli(*bad)) == 2
        assert what in capsys.readouterr().err


def test_cli_selection_nothing_runs_is_incomplete_and_lists_skips(tmp_path, capsys, monkeypatch):
    """ab-spin has no MoE kind: the selection lists nothing, nothing is judged (exit 3, not 0)."""
    monkeypatch.setenv("PYTHONPATH", FAKES)
    out = tmp_path / "ab.json"
    code = ab_main(_cli("--backends", "ab-spin", "--kinds", "moe", "--verdict-json", str(out)))
    text = capsys.readouterr().out
    assert code == EXIT_INCOMPLETE, text
    assert "nothing judged" in text and json.loads(out.read_text())["exit_code"] == 3


def test_cli_slowdown_wrapper_on_b_fails_with_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_SPIN_S", "0.01")  # every worker inherits it
    out = tmp_path / "ab.json"
    # B alone loads the test-only slowdown wrapper: same benchmark names, every call +300 %
    assert ab_main(_cli("--backends", "ab-spin", "--b-plugin", "fp4bench.testing.slowdown",
                        "--b-env", "FP4BENCH_SLOWDOWN=ab-spin=3", "--verdict-json", str(out))) == 1
    text = capsys.readouterr().out
    assert "side B ran TEST-ONLY backends: ab-spin (" in text and "side A ran" not in text
    js = validate(json.loads(out.read_text()))
    assert js["source"] == "ab" and js["counts"]["FAIL"] == 2 and js["exit_code"] == 1
    assert js["evidence"]["test_only"]["A"] == {} and list(js["evidence"]["test_only"]["B"]) == ["ab-spin"]
    assert js["evidence"]["telemetry"] == {"A": None, "B": None}  # CPU: none, not zeros
    assert "telemetry: none (NVML is read around GPU timing rounds only" in text
    assert all(r["interval_pct"][0] > 20 for r in js["benchmarks"])


# --- NVML telemetry per side and round ----------------------------------------------------------


def test_worker_round_carries_nvml_telemetry_only_where_it_is_read(monkeypatch):
    from fp4bench.gpus import devices
    from fp4bench.workload.problems import GemmProblem
    from fp4bench.run.worker import protocol
    from fp4bench.run.worker.child import Child
    from fakes.nvml import GPU0, FakeNVML

    child = Child({"device": "cpu", "seed": 0})
    req = {"case": protocol.encode_case("torch-bf16", GemmProblem(4, 64, 64), "default"), "samples": 3}
    assert child.telemetry is False and "telemetry" not in child.time(req)  # CPU: no GPU state to read
    child.telemetry, child.nvml = True, FakeNVML(sm=(1800,), power=(600_000,), reasons=(0x4,))
    monkeypatch.setattr(devices, "device_uuid", lambda device: GPU0)  # the CPU child stands in for a GPU
    tel = child.time(req)["telemetry"]
    assert tel["sm_clock_mhz"] == 1800 and tel["power_w"] == 600 and tel["throttled"] is True
    assert tel["throttle_reasons"] == ["SwPowerCap"] and tel["telemetry_samples"] >= 1


def _round(sm: float, watts: float, temp: float, throttled: bool) -> dict:
    return {"sm_clock_mhz": sm, "power_w": watts, "temp_c": temp, "throttled": throttled,
            "throttle_reasons": ["SwPowerCap"] if throttled else [], "telemetry_samples": 20}


def test_telemetry_is_summarized_per_side_in_the_report_and_json():
    from fakes.benchjson import H200
    from fp4bench.ab.report import report
    from fp4bench.ab.report import telemetry_summary as report_telemetry
    from fp4bench.ab.records import AbRun, Paired, SideResult

    rng = np.random.default_rng(0)

    def side(factor: float, tel: dict) -> SideResult:
        return SideResult("measured", samples=list(1e-5 * factor * np.exp(rng.normal(0, 0.01, 40))), digest="d",
                          telemetry=[tel] * 8)

    run = AbRun({"A": H200.to_dict(), "B": H200.to_dict()}, {"A": {}, "B": {}},
                [Paired("b::t[0]", side(1.0, _round(1980, 650, 60, False)), side(1.0, _round(1800, 700, 71, True)),
                        list("ABBAABBAABBAABBA"))], {"A": 1.0, "B": 1.0})
    result = judge(run, Policy())
    text = report(run, result)
    assert ("telemetry, medians over timing rounds: A SM 1980 MHz, 650 W, max 60 °C, 0/8 rounds throttled; "
            "B SM 1800 MHz, 700 W, max 71 °C, 8/8 rounds throttled") in text
    (v,) = result.verdicts
    assert (v.base_clock, v.new_clock, v.new_throttle) == ("1980", "1800", "SwPowerCap")  # the gate sees them
    js = to_json(run, result)
    assert js["evidence"]["telemetry"]["B"] == {"rounds": 8, "sm_clock_mhz_median": 1800, "power_w_median": 700,
                                    "temp_c_max": 71, "throttled_rounds": 8, "errors": []}
    assert js["benchmarks"][0]["evidence"]["a_telemetry"] == [_round(1980, 650, 60, False)] * 8
    # a round whose NVML window could not be read: its error is named in the header, not averaged in
    run.pairs[0].b.telemetry[0] = {**_round(1800, 700, 71, True), "telemetry_error": "NVML: GPU is lost"}
    assert report_telemetry(run)["B"]["errors"] == ["NVML: GPU is lost"]
    text = " ".join(report(run, judge(run, Policy())).split())  # the header line wraps at 160 characters
    assert "8/8 rounds throttled (NVML: NVML: GPU is lost)" in text


# --- pytest bench --fp4-ab-against --------------------------------------------------------------


AB_PYTEST = ["-p", "fp4bench.plugin", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest",
             "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-kinds", "dense", "--fp4-plugin", "ab_env",
             # one token: pytest takes rootdir hints from path-like arguments, an option's value too
             "--fp4-backends", "ab-spin", f"--fp4-ab-against={sys.executable}", "--fp4-rounds", "4", "--fp4-replicates", "2",
             "--fp4-round-samples", "5", "--fp4-floor", "20"]


@pytest.fixture
def ab_bench(pytester, monkeypatch):

    from fp4bench.backends import registry

    registry.all_backends()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.syspath_prepend(FAKES)  # the in-process run lists the sweep with ab_env too
    monkeypatch.setenv("PYTHONPATH", FAKES)  # both workers load it
    monkeypatch.setenv("FAKE_SPIN_S", "0.01")
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    return pytester


def test_pytest_ab_against_fails_like_a_test_with_the_ab_table(ab_bench, monkeypatch):
    monkeypatch.setenv("FAKE_SLOWDOWN", "3")  # this environment (B) is 4x slower ...
    monkeypatch.setenv("CI", "true")  # pytest then prints -rf's crash message untrimmed: it must be one line
    res = ab_bench.runpytest(*AB_PYTEST, "--fp4-a-env", "FAKE_SLOWDOWN=0", "-rf",  # ... than side A
                             "--fp4-verdict-json", "ab.json")
    out = res.stdout.str()
    assert res.ret == 1, out
    assert res.parseoutcomes()["failed"] == 1 and "passed" not in res.parseoutcomes()
    assert f"fp4bench ab: the 2 selected cases run as one A/B comparison: A = {sys.executable}" in out
    assert f"FAILED test_fp4_gemm.py::fp4bench-ab[{Path(sys.executable).name}] - 2 FAIL → regression (exit 1)\n" in out
    assert "telemetry: none (NVML is read around GPU timing rounds only; this run timed on CPU)" in out
    assert out.count("summary: 2 FAIL → regression (exit 1)") == 1  # the table once: as the failure text
    data = validate(json.loads((ab_bench.path / "ab.json").read_text()))
    assert data["source"] == "ab" and data["counts"]["FAIL"] == 2 and data["evidence"]["telemetry"] == {"A": None, "B": None}
    assert all("".join(o[0][0] for o in r["evidence"]["round_order"]) == "ABBA" for r in data["benchmarks"])
    assert all(len(r["evidence"]["processes"]) == 4 for r in data["benchmarks"])  # 2 replicates per side


def test_pytest_ab_against_passes_on_the_same_stack_and_honours_k(ab_bench):
    res = ab_bench.runpytest(*AB_PYTEST, "-k", "shared_down")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "fp4bench ab: the 1 selected cases run as one A/B comparison" in out
    assert "fp4bench ab: this environment (B) vs" in out  # a passing comparison: its table in the summary
    assert "shared_down" in out and "shared_gate_up" not in out.split("fp4bench ab: this environment")[1]
    res = ab_bench.runpytest(*AB_PYTEST, "--benchmark-compare")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "it takes no baseline" in res.stderr.str()


def test_a_side_whose_replays_go_wrong_fails_as_wrong_output_never_as_timing():
    """B returns the result of its first input whatever the input holds later: right on the
    check's two launches, wrong on every replay of the second operand set. The workers replay as
    the pytest gate does (``measure.replays.replays_for``): a 10 ms call gets fewer than the 16
    requested, as many as fit 5 % of the case's time budget (the check's time, so the machine's
    load, sets how many), never fewer than 4; every second one is of set B, so half are wrong."""
    from fp4bench.measure.replays import DEFAULT_REPLAYS, MIN_REPLAYS

    run, lines = _run({"FAKE_STALE": "1"}, rounds=2, max_rounds=2)
    assert run.pairs and all(p.b.status == "failed" and p.a.status == "measured" for p in run.pairs)
    for p in run.pairs:
        m = re.match(r"replay mismatch: (\d+) of (\d+) replays; first bad: replay 2 \(operand set B\): ", p.b.reason)
        assert m and MIN_REPLAYS <= int(m[2]) <= DEFAULT_REPLAYS and 2 * int(m[1]) == int(m[2]), p.b.reason
    assert all(p.stopped == "a check failed" and not any(x.rounds for x in p.parts) for p in run.pairs)
    verdicts = [v for v in judge(run, Policy(floor=0.2)).verdicts]
    assert len(verdicts) == len(run.pairs) and all(
        v.status == Status.FAIL and v.kind == WRONG_OUTPUT and v.reason.startswith("B: replay mismatch")
        for v in verdicts), verdicts
