"""``fp4bench ab`` on CPU with two fake environments: the same interpreter twice, made
different by environment variables read by the ``ab-spin`` backend (tests/fakes/ab_env.py), or
by the test-only slowdown wrapper loaded on one side."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fp4bench.ab.judge import judge, report, to_json
from fp4bench.ab.run import AbConfig, AbRunner, Side
from fp4bench.ab.schedule import abba
from fp4bench.cli_ab import ab_main
from fp4bench.gate.verdict import Policy, Status
from fp4bench.report import verdict_message
from fp4bench.sweep import SweepOptions

FAKES = str(Path(__file__).parent / "fakes")
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=("ab-spin",),
                     tactics="all")


def test_abba_puts_each_side_first_in_half_the_pairs():
    assert abba(1) == ["A", "B"]
    assert abba(4) == ["A", "B", "B", "A", "A", "B", "B", "A"]
    with pytest.raises(ValueError, match="at least one round"):
        abba(0)


def _run(env_b: dict, env_a: dict | None = None, pairs: int = 4, samples: int = 4):
    a = Side(sys.executable, {"PYTHONPATH": FAKES, **(env_a or {})})
    b = Side(a.python, {"PYTHONPATH": FAKES, **env_b})
    lines: list[str] = []
    runner = AbRunner(a, b, AbConfig(sweep=SWEEP, device="cpu", pairs=pairs, round_samples=samples,
                                     timeout_s=60, plugins=("ab_env",)), progress=lines.append)
    return runner.run(), lines


@pytest.fixture(scope="module")
def slow_b():
    """Same speed on both sides, two tactics; B reports another version."""
    return _run({"FAKE_VERSION": "2.0", "FAKE_TACTICS": "t0,t1"}, {"FAKE_TACTICS": "t0,t1"})


def test_rounds_alternate_abba_and_both_sides_get_equal_samples(slow_b):
    run, lines = slow_b
    assert len(run.pairs) == 4  # 2 problems x 2 tactics
    for p in run.pairs:
        assert "".join(p.order) == "ABBAABBA"
        assert len(p.a.samples) == len(p.b.samples) == 16
        assert p.a.digest == p.b.digest and p.a.digest
    assert any("prepared + checked" in line for line in lines)


def test_same_speed_passes_and_versions_that_differ_are_reported(slow_b):
    run, _ = slow_b
    result = judge(run, Policy(floor=0.2))
    assert result.exit_code == 0, [verdict_message(v) for v in result.verdicts]
    js = to_json(run, result)
    assert {(r["a_version"], r["b_version"]) for r in js["benchmarks"]} == {("1.0", "2.0")}


def test_a_slower_b_fails_only_where_it_is_slower():
    # 4x: a margin far beyond what a loaded shared 2-core CI machine does to the samples
    # 10 ms calls: preemption slices on a loaded machine are small next to them
    run, _ = _run({"FAKE_SLOWDOWN": "3.0", "FAKE_SPIN_S": "0.01"}, {"FAKE_SPIN_S": "0.01"}, pairs=4, samples=5)
    result = judge(run, Policy(floor=0.2))
    assert [v.status for v in result.verdicts] == [Status.FAIL, Status.FAIL], [verdict_message(v) for v in result.verdicts]
    assert all(v.pct > 20 for v in result.verdicts)  # +300 % spin; CPU contention can add more


def test_a_tactic_missing_on_b_is_a_lost_tactic_not_missing():
    run, _ = _run({"FAKE_TACTICS": "t0"}, {"FAKE_TACTICS": "t0,t1"}, pairs=1, samples=3)
    result = judge(run, Policy(floor=0.5, min_samples=3))
    lost = [v for v in result.verdicts if v.kind == "lost tactic"]
    assert len(lost) == 2 and all(v.status is Status.FAIL and "-t1-" in v.name for v in lost)
    assert not result.by_status(Status.MISSING)


def test_cli_ab_exit_codes_and_json(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_SPIN_S", "0.01")  # both workers inherit it
    out = tmp_path / "ab.json"
    common = ["--a", sys.executable, "--b", sys.executable, "--plugin", "ab_env",
              "--kinds", "dense", "--batches", "1", "--tp", "8", "--backends", "ab-spin", "--device", "cpu",
              "--rounds", "4", "--round-samples", "5", "--floor", "20"]
    # B alone loads the test-only slowdown wrapper: same benchmark names, every call +300 %
    assert ab_main(common + ["--b-plugin", "fp4bench.testing.slowdown", "--b-env", "FP4BENCH_SLOWDOWN=ab-spin=3",
                             "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "FAIL" in text and "ABBA" in out.read_text()
    assert "side B ran TEST-ONLY backends: ab-spin (" in text and "side A ran" not in text
    js = json.loads(out.read_text())
    assert js["counts"]["FAIL"] == 2 and js["counts"]["MISSING"] == js["counts"]["NEW"] == 0
    assert js["test_only"]["A"] == {} and list(js["test_only"]["B"]) == ["ab-spin"]
    assert ab_main(common + ["--rounds", "0"]) == 2
    assert "need --rounds >= 1" in capsys.readouterr().err



@pytest.mark.parametrize("timer", ["span", "cupti"])
def test_timer_choice_keeps_the_profiler_out_of_span_rounds(monkeypatch, timer):
    """span: one profiled 3-sample request per side for the kernel names (not a sample) and
    unprofiled rounds; cupti: every round profiled, no extra request."""
    sent: list[tuple[str, dict]] = []
    ask = AbRunner._ask

    def recording(self, side, msg, what):
        sent.append((side, dict(msg)))
        return ask(self, side, msg, what)

    monkeypatch.setattr(AbRunner, "_ask", recording)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0"})
    run = AbRunner(a, a, AbConfig(sweep=SWEEP, device="cpu", pairs=2, round_samples=4, timeout_s=60,
                                  plugins=("ab_env",), timer=timer)).run()
    cases = len(run.pairs)
    assert cases == 2 and all(p.a.status == p.b.status == "measured" for p in run.pairs)
    timed = [(side, m) for side, m in sent if m.get("op") == "time"]
    rounds = [side for side, m in timed if m["samples"] == 4]
    names = [side for side, m in timed if m["samples"] == 3]
    assert sorted(rounds) == ["A"] * 2 * cases + ["B"] * 2 * cases  # ABBA: two rounds per side
    assert all(m["kernel_time"] is (timer == "cupti") for _, m in timed if m["samples"] == 4)
    assert sorted(names) == (["A"] * cases + ["B"] * cases if timer == "span" else [])
    for p in run.pairs:  # the names round adds no samples
        assert len(p.a.samples) == len(p.b.samples) == 2 * 4


def test_interrupted_run_judges_what_finished_and_lists_the_rest():
    """SIGINT (a time limit via ``timeout -s INT``, Ctrl-C) during the second benchmark: the first
    is judged, the others are listed as not reached, the workers are gone, the report says so."""
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0,t1"})
    seen: list[str] = []

    def progress(line: str) -> None:
        seen.append(line)
        if "2/4 prepared + checked" in line:
            raise KeyboardInterrupt

    runner = AbRunner(a, a, AbConfig(sweep=SWEEP, device="cpu", pairs=1, round_samples=3, timeout_s=60,
                                     plugins=("ab_env",)), progress=progress)
    run = runner.run()
    assert len(run.pairs) == 1 and len(run.not_reached) == 3
    assert all(w.proc is None for w in runner.workers.values())
    result = judge(run, Policy(floor=0.2))
    text = report(run, result)
    assert "INCOMPLETE: interrupted, 3 benchmarks not reached" in text
    assert to_json(run, result)["not_reached"] == run.not_reached
