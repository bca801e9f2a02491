"""``fp4bench ab`` on CPU with two fake environments: the same interpreter twice, made
different by environment variables read by the ``ab-spin`` backend (tests/fakes/ab_env.py), or
by the test-only slowdown wrapper loaded on one side."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from fp4bench.ab.judge import judge, report, to_json
from fp4bench.ab.run import AbConfig, AbRunner, Side
from fp4bench.ab.schedule import abba
from fp4bench.cli_ab import ab_main
from fp4bench.gate.verdict import Policy, Status
from fp4bench.report import verdict_message
from fp4bench.sweep import SweepOptions

pytest_plugins = ["pytester"]

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
    """Same speed on both sides, two tactics; B reports another version. 10 ms calls, as in the
    tests below: with the 2 ms default one preempted round on a loaded 2-core machine moved a
    median by more than the 18 % this test allows (floor 20 % less the 2 % allowance)."""
    return _run({"FAKE_VERSION": "2.0", "FAKE_TACTICS": "t0,t1", "FAKE_SPIN_S": "0.01"},
                {"FAKE_TACTICS": "t0,t1", "FAKE_SPIN_S": "0.01"})


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
    assert js["telemetry"] == {"A": None, "B": None}  # CPU: none, not zeros
    assert "telemetry: none (NVML is read around GPU timing rounds only" in text
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
# --- NVML telemetry per side and round ----------------------------------------------------------


def test_worker_round_carries_nvml_telemetry_only_where_it_is_read():
    from fp4bench.problems import GemmProblem
    from fp4bench.worker import protocol
    from fp4bench.worker.child import Child
    from test_telemetry import FakeNVML

    child = Child({"device": "cpu", "seed": 0})
    req = {"case": protocol.encode_case("torch-bf16", GemmProblem(4, 64, 64), "default"), "samples": 3}
    assert child.telemetry is False and "telemetry" not in child.time(req)  # CPU: no GPU state to read
    child.telemetry, child.nvml = True, FakeNVML(sm=(1800,), power=(600_000,), reasons=(0x4,))
    tel = child.time(req)["telemetry"]
    assert tel["sm_clock_mhz"] == 1800 and tel["power_w"] == 600 and tel["throttled"] is True
    assert tel["throttle_reasons"] == ["SwPowerCap"] and tel["telemetry_samples"] >= 1


def _round(sm: float, watts: float, temp: float, throttled: bool) -> dict:
    return {"sm_clock_mhz": sm, "power_w": watts, "temp_c": temp, "throttled": throttled,
            "throttle_reasons": ["SwPowerCap"] if throttled else [], "telemetry_samples": 20}


def test_telemetry_is_summarized_per_side_in_the_report_and_json():
    from _benchjson import H200
    from fp4bench.ab.judge import report
    from fp4bench.ab.judge import telemetry_summary as report_telemetry
    from fp4bench.ab.run import AbRun, Paired, SideResult

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
    assert js["telemetry"]["B"] == {"rounds": 8, "sm_clock_mhz_median": 1800, "power_w_median": 700,
                                    "temp_c_max": 71, "throttled_rounds": 8, "errors": []}
    assert js["benchmarks"][0]["a_telemetry"] == [_round(1980, 650, 60, False)] * 8
    # a round whose NVML window could not be read: its error is named in the header, not averaged in
    run.pairs[0].b.telemetry[0] = {**_round(1800, 700, 71, True), "telemetry_error": "NVML: GPU is lost"}
    assert report_telemetry(run)["B"]["errors"] == ["NVML: GPU is lost"]
    text = " ".join(report(run, judge(run, Policy())).split())  # the header line wraps at 160 characters
    assert "8/8 rounds throttled (NVML: NVML: GPU is lost)" in text


# --- pytest bench --fp4-ab-against --------------------------------------------------------------


AB_PYTEST = ["-p", "fp4bench.plugin", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:hypothesispytest",
             "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-kinds", "dense", "--fp4-plugin", "ab_env",
             # one token: pytest takes rootdir hints from path-like arguments, an option's value too
             "--fp4-backends", "ab-spin", f"--fp4-ab-against={sys.executable}", "--fp4-ab-rounds", "4",
             "--fp4-ab-round-samples", "5", "--fp4-floor", "20"]


@pytest.fixture
def ab_bench(pytester, monkeypatch):
    from test_plugin import BENCH_FILE

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
    res = ab_bench.runpytest(*AB_PYTEST, "--fp4-ab-env", "FAKE_SLOWDOWN=0", "-rf",  # ... than side A
                             "--fp4-verdict-json", "ab.json")
    out = res.stdout.str()
    assert res.ret == 1, out
    assert res.parseoutcomes()["failed"] == 1 and "passed" not in res.parseoutcomes()
    assert f"fp4bench ab: the 2 selected cases run as one A/B comparison: A = {sys.executable}" in out
    assert f"FAILED test_fp4_gemm.py::fp4bench-ab[{Path(sys.executable).name}] - 2 FAIL → regression (exit 1)\n" in out
    assert "telemetry: none (NVML is read around GPU timing rounds only; this run timed on CPU)" in out
    assert out.count("summary: 2 FAIL → regression (exit 1)") == 1  # the table once: as the failure text
    data = json.loads((ab_bench.path / "ab.json").read_text())
    assert data["counts"]["FAIL"] == 2 and data["telemetry"] == {"A": None, "B": None}
    assert {r["round_order"] for r in data["benchmarks"]} == {"ABBAABBA"}


def test_pytest_ab_against_passes_on_the_same_stack_and_honours_k(ab_bench):
    res = ab_bench.runpytest(*AB_PYTEST, "-k", "shared_down")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "fp4bench ab: the 1 selected cases run as one A/B comparison" in out
    assert "fp4bench ab: this environment (B) vs" in out  # a passing comparison: its table in the summary
    assert "shared_down" in out and "shared_gate_up" not in out.split("fp4bench ab: this environment")[1]
    res = ab_bench.runpytest(*AB_PYTEST, "--benchmark-compare")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "does not take a baseline" in res.stderr.str()
