"""pytest-benchmark's conventions around fp4bench cases (``fp4bench.plugin.compat``): ignored
calibration flags warn once each, pytest-benchmark's own table leaves out what fp4bench prints;
``pytest -n`` over plain tests is pytest-xdist's own (``-n`` over benchmark cases:
test_xdist_gpus.py)."""

from __future__ import annotations

import json
import re

import pytest

from fp4bench.backends import registry
from fp4bench.cli.compare import compare_main
from fp4bench.gate.approve import approve
from fakes.pytest_run import TINY, GATE, outcomes_of

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry")

BF16 = [*TINY, "--fp4-backends", "torch-bf16"]


def test_ignored_calibration_flags_warn_once_each_naming_the_fp4_option(bench):
    res = bench.runpytest(*BF16, "--benchmark-min-rounds", "20", "--benchmark-max-time", "3",
                          "--benchmark-warmup", "on", "--benchmark-timer", "time.process_time")
    out = res.stdout.str()
    assert res.ret == 0, out
    for flag, fp4 in (("--benchmark-min-rounds=20", "use --fp4-min-samples"),
                      ("--benchmark-max-time=3", "use --fp4-time-budget"),
                      ("--benchmark-warmup", "no such setting: every case runs its correctness check"),
                      ("--benchmark-timer=time.process_time", "set by --fp4-device")):
        assert out.count(f"PytestConfigWarning: {flag} is ignored by fp4bench's 2 cases") == 1, flag
        assert re.search(rf"{re.escape(flag)} is ignored by fp4bench's 2 cases \(fp4bench times them itself\): "
                         rf"{re.escape(fp4)}", out), flag
    # the defaults, given explicitly, are not a change: no warning
    res = bench.runpytest(*BF16, "--benchmark-min-rounds", "5", "--benchmark-warmup", "off")
    assert "is ignored by fp4bench" not in res.stdout.str()


PLAIN = '''
def test_plain(benchmark):
    benchmark(sum, range(10))
'''


def test_pytest_benchmark_table_only_for_other_benchmarks(bench):
    res = bench.runpytest(*BF16, "--fp4-benchmark-table")
    assert "benchmark 'dense glm-5 shared_down': 1 tests" in res.stdout.str()  # asked for: kept
    # by default, a session with a plain pytest-benchmark test too: its table stays, with that test only
    bench.makepyfile(test_plain=PLAIN)
    res = bench.runpytest(*BF16, "--benchmark-min-rounds", "7")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "fp4bench results (CPU)" in out
    assert "test_plain " in out and "Name (time in" in out and "dense glm-5" not in out.split("Name (time in")[1]
    assert "benchmark 'dense glm-5" not in out  # no second table of fp4 cases


def test_plain_pytest_benchmark_session_is_left_alone(pytester):
    pytester.makepyfile(test_plain=PLAIN)
    res = pytester.runpytest("-p", "fp4bench.plugin", "-p", "no:cacheprovider", "--benchmark-min-rounds", "7")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "Name (time in" in out and "test_plain" in out
    assert "is ignored by fp4bench" not in out and "fp4bench results" not in out


def test_xdist_over_plain_tests_still_runs(pytester, monkeypatch):
    """A plain xdist worker session (no GPU of its own), recorded in this process and replayed to
    a controller session with pytest-xdist's own scheduling (tests/fakes/xdist_nodes.py)."""
    from fakes.xdist_nodes import KEEP_XDIST, NO_XDIST, replaying, run_controller, run_worker

    monkeypatch.delenv("FP4BENCH_FAKE_GPUS", raising=False)  # no GPU needed: plain tests
    pytester.makepyfile(test_plain="def test_a():\n    assert 1\n\ndef test_b():\n    assert 1\n")
    args = ["-p", "fp4bench.plugin", *KEEP_XDIST]
    worker = run_worker(pytester, monkeypatch, "gw0", *args, *NO_XDIST)
    assert worker.result.ret == 0 and len(worker.ids) == 2
    replaying(monkeypatch, {None: worker})  # both workers: the same plain session
    res = run_controller(pytester, *args, "-n", "2")
    assert res.ret == 0, res.stdout.str() + res.stderr.str()
    res.assert_outcomes(passed=2)
    assert "2 workers [2 items]" in res.stdout.str()


# pytest-benchmark's output and calibration flags: they change what is written, never what is judged
PB_FLAGS = ["--benchmark-json", "r.json", "--benchmark-autosave", "--benchmark-min-rounds", "20",
            "--benchmark-max-time", "3", "--benchmark-warmup", "on", "--benchmark-disable-gc",
            "--benchmark-sort", "name", "--benchmark-columns", "min,median"]


@pytest.mark.filterwarnings("ignore:Benchmark machine_info is different")  # the slim baseline records none
def test_the_gate_judges_the_same_with_and_without_pytest_benchmarks_flags(bench, monkeypatch, capsys, sim_clock):
    both = [*GATE, "--fp4-backends", "steady-spin,steady-spin-2", "--fp4-baselines", "store"]
    res = bench.runpytest(*both, "--fp4-save-baseline", "plain.json")
    assert res.ret == 0, res.stdout.str()
    approve(bench.path / "plain.json", bench.path / "store")  # store/cpu/approved.json, slim
    # one backend 2x slower, the other unchanged: a mixed verdict that both runs must reproduce
    monkeypatch.setenv("FP4BENCH_SLOWDOWN", "steady-spin=1.0")
    slowed = [*both, "--fp4-plugin", "fp4bench.testing.slowdown", "--benchmark-compare"]
    judged, registered = {}, dict(registry._registry)
    for name, extra in (("bare", []), ("flags", PB_FLAGS)):
        monkeypatch.setattr(registry, "_registry", dict(registered))  # each run registers the wrapper anew
        res = bench.runpytest(*slowed, *extra)
        out = res.stdout.str()
        assert res.ret == 1, out
        assert "fp4bench verdict vs store/cpu/approved.json" in out
        judged[name] = (outcomes_of(res), sorted(re.findall(r"^ *FAIL (\S+): ", out, re.M)))
    assert judged["bare"] == judged["flags"]
    outcomes, failed = judged["bare"]
    assert outcomes == {"passed": 2, "failed": 2} and len(failed) == 2, failed
    assert all("steady-spin-default" in f for f in failed), failed
    # what the flags wrote: the --benchmark-json file and the autosaved run, both with raw samples
    # and gateable by `fp4bench compare` to the same two FAILs
    saved = json.loads((bench.path / "r.json").read_text())
    assert len(saved["benchmarks"]) == 4 and all(len(b["stats"]["data"]) >= 15 for b in saved["benchmarks"])
    autosaved = list((bench.path / ".benchmarks").rglob("0001_*.json"))
    assert len(autosaved) == 1, autosaved
    for run in (bench.path / "r.json", autosaved[0]):
        capsys.readouterr()
        assert compare_main([str(bench.path / "store/cpu/approved.json"), str(run), "--floor", "20"]) == 1
        table = capsys.readouterr().out
        assert sorted(re.findall(r"^FAIL +(\S+) ", table, re.M)) == [f.split("::")[1] for f in failed], table
