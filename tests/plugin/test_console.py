"""What a pytest run of fp4bench cases prints for a CI log (``fp4bench.plugin.console``): progress
and ETA lines, the results table fitted to 160 characters, skips that name the backend and the
problem, and a run stopped early (-x, --maxfail, Ctrl-C) reported as "not run", not MISSING."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from fp4bench.gate.verdict_json import validate
from fp4bench.plugin.console import Tracker, duration, progress_line, results_lines, skipped_lines
from fp4bench.report.textfit import WIDTH
from fakes.pytest_run import GATE, GATE_IDS, STEADY_RUN, TINY, faster_baseline, steady_baseline, write_json
from fakes.paths import ROOT

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry", "quick_runs")
#: a test whose runs time the steady backend of tests/fakes/pytest_run.py on the simulated clock
steady = pytest.mark.usefixtures("sim_clock")


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


# --- progress / ETA ---------------------------------------------------------------------------


def test_progress_line_and_durations():
    assert [duration(s) for s in (0, 42.4, 192, 3 * 3600 + 5 * 60)] == ["0s", "42s", "3m12s", "3h05m"]
    assert progress_line(120, 418, 192) == "fp4bench: 120/418 cases, 3m12s elapsed, ETA 7m57s"
    assert progress_line(2, 4, 10, failed=1, skipped=1) == "fp4bench: 2/4 cases (1 failed, 1 skipped), 10s elapsed, ETA 10s"


def test_tracker_prints_at_most_every_interval_and_never_after_the_last_case():
    now = [0.0]
    t = Tracker(interval_s=30, clock=lambda: now[0], planned=["a", "b", "c"], t0=0.0)
    lines = []
    for name, at in (("a", 10.0), ("b", 31.0), ("c", 40.0)):
        now[0] = at
        t.finished[name] = "passed"
        lines.append(t.due())
    assert lines == [None, "fp4bench: 2/3 cases, 31s elapsed, ETA 16s", None]  # 10 s: too soon; c: the last
    t.finished.pop("c")
    now[0] = 50.0
    assert t.due() is None  # 19 s since the last line
    now[0] = 61.0
    assert t.due() == "fp4bench: 2/3 cases, 1m01s elapsed, ETA 30s"
    assert Tracker(interval_s=0, planned=["a"], t0=0.0).due() is None  # --fp4-progress 0: off


@steady
def test_progress_lines_in_a_run(bench):
    res = bench.runpytest(*STEADY_RUN, "-q", "--fp4-progress", "1e-9")
    out = res.stdout.str()
    assert res.ret == 0, out
    # two cases: one line after the first, none after the last (the summary follows)
    assert re.findall(r"^fp4bench: (\d)/2 cases, \d+s elapsed, ETA \d+s$", out, re.M) == ["1"]
    res = bench.runpytest(*STEADY_RUN, "-q")  # default: every 30 s, so a quick run prints none
    assert "fp4bench: 1/2 cases" not in res.stdout.str()
    res = bench.runpytest(*STEADY_RUN, "--fp4-progress", "-1")
    assert res.ret == pytest.ExitCode.USAGE_ERROR and "--fp4-progress: must be a finite number of seconds >= 0" in res.stderr.str()


# --- tables of at most 160 characters -----------------------------------------------------------


def test_results_table_says_shared_values_once_and_fits_160():
    tactic = "g1-000:64x16x128B_c1x1_pingpong_swapab+g2-default"
    rows = [{"backend": "flashinfer-cutlass-moe", "tactic": f"{tactic}-{i}", "problem": f"glm-5 b{b} moe",
             "size": f"{b} tok x top8 H6144 I2048", "median_s": 1.2e-4 * (i + 1), "tflops": 812.3, "gbps": 2100.0,
             "pct_peak": None, "pct_peak_bw": 44.0, "noise": 0.004, "sqnr_db": 55.1,
             "notes": "cupti kernel time, cuda-graph x12; cold" + ("; THROTTLED SwPowerCap" if i == 1 else "")}
            for i, b in enumerate((1, 64, 512))]
    lines = results_lines(rows)
    assert max(map(len, lines)) <= WIDTH
    assert lines[0] == "every row: backend flashinfer-cutlass-moe"
    assert lines[1] == "notes of every row: cupti kernel time, cuda-graph x12; cold"
    assert not re.search(r"% peak(?! BW)", lines[2]) and "% peak BW" in lines[2]  # a column empty in every row is left out
    assert sum("THROTTLED SwPowerCap" in ln for ln in lines) == 1  # only the row it belongs to


# --- skips and empty benchmarks ---------------------------------------------------------------------


@steady
def test_no_selected_backend_for_a_kind_is_one_named_skip(bench):
    res = bench.runpytest(*STEADY_RUN, "--fp4-kinds", "dense,moe")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "SKIPPED [1] test_fp4_gemm.py:20: no selected backend runs moe (--fp4-backends steady-spin)" in out
    assert "SKIPPED [1] test_fp4_gemm.py:15: grouped not selected (--fp4-kinds dense,moe)" in out
    assert "empty parameter set" not in out


# --- the whole CPU run within 160 characters, without profiler log lines --------------------------


#: torch's profiler (Kineto) logs its start and stop on stderr: "USDT:<time> ... profiler_start"
PROFILER_LOG = re.compile(r"USDT:|STAGE:|profiler_st(art|op)|Kineto|ActivityProfiler")
#: the fault backends that fail at M = 32 on a CPU (the others abort or hang on purpose)
FAULTS = ("fault-zero-band", "fault-bitflip")


@pytest.mark.e2e
def test_a_cpu_run_with_skips_and_failures_prints_no_line_over_160_and_no_profiler_log():
    """``pytest bench`` as the README runs it, on CPU, in a CI log (``CI`` set: pytest prints each
    failure's whole message in the short summary) and with ``-s`` (nothing captured): every
    GPU backend's skip, the fault backends' failures (at M = 32 the zero band and the bit flip
    fail) and the measured CPU rows (whose kernel names the CPU run does not profile). The
    smallest such run: the two dense GEMMs of one batch at TP 8 (the grouped and MoE ones are
    skipped on a CPU), each timed for the fewest samples."""
    from fp4bench.backends import registry

    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    env.update(PYTHONPATH=str(ROOT / "src"), CI="1")
    backends = [b.name for b in registry.all_backends() if not b.test_only]  # every real backend
    cmd = [sys.executable, "-m", "pytest", "bench", "-p", "no:cacheprovider", "-q", "-rA", "-s",
           "--fp4-plugin", "fp4bench.testing.faults", "--fp4-backends", ",".join([*backends, *FAULTS]),
           "--fp4-batches", "32", "--fp4-tp", "8", "--fp4-kinds", "dense,grouped,moe", "--fp4-time-budget", "0.02",
           "--fp4-min-samples", "3"]
    # from the checkout's root, as the README runs it: pytest names the tests bench/test_fp4_gemm.py::...
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out[-3000:]
    summary = out.split("short test summary info")[1]
    assert "\nSKIPPED [1] " in summary and "\nFAILED " in summary and "\nPASSED " in summary, summary
    assert "all-zero output" in summary and "mismatch" in summary
    long = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not long, "\n".join(f"{len(line)}: {line}" for line in long)
    assert not PROFILER_LOG.search(out), PROFILER_LOG.search(out).group(0)


# --- a run stopped early: "not run", not MISSING --------------------------------------------------


@steady
def test_after_x_the_cases_not_run_are_not_reached_not_missing(bench):
    write_json(bench, "fast.json", faster_baseline(steady_baseline(bench), 0.6))  # the first case fails ...
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "fast.json", "--fp4-no-confirm", "-x",
                          "--fp4-verdict-json", "v.json")
    out = res.stdout.str()
    assert res.ret == 1
    assert res.parseoutcomes()["failed"] == 1  # ... and -x stops the run there
    assert "MISSING" not in out
    assert "run INCOMPLETE: 1 of 2 cases not run" in out
    assert "NOT REACHED (1, 1 of them in the baseline) — not run, neither renamed nor removed; not judged:" in out
    assert f"\n  {GATE_IDS[1]}\n" in out
    data = validate(json.loads((bench.path / "v.json").read_text()))
    assert data["source"] == "gate" and data["coverage"]["not_reached"] == [GATE_IDS[1]]
    assert data["exit_code"] == 1  # the FAIL wins
    assert "cannot pass the gate (exit 3)" not in out  # the exit is the regression's


# a stop with exit status 0 and no failure (as a plugin or a conftest calling pytest.exit may do):
# pytest's own status cannot tell the gate that half of it never ran
STOP_AFTER_FIRST = '''
import pytest

def pytest_runtest_logfinish(nodeid, location):
    pytest.exit("stopped by conftest", returncode=0)
'''


@steady
def test_a_stop_without_failures_still_fails_the_gate_unless_allowed(bench):
    steady_baseline(bench)
    bench.makeconftest(STOP_AFTER_FIRST)
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json")
    out = res.stdout.str()
    assert res.parseoutcomes().get("passed") == 1 and "failed" not in res.parseoutcomes()
    assert res.ret == 3, out  # every case that ran passed, but half the gate was never run: incomplete
    assert "an incomplete run cannot pass the gate; --fp4-allow-missing judges only what ran" in out
    assert "→ INCOMPLETE: judged 1 of 2 expected benchmarks (1 not reached) (exit 3)" in out
    assert "MISSING" not in out
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json", "--fp4-allow-missing")
    assert res.ret == 0, res.stdout.str()
    assert "--fp4-allow-missing: the gate judged only the cases that ran" in res.stdout.str()


@steady
def test_an_incomplete_run_is_not_a_clean_candidate(bench):
    bench.makeconftest(STOP_AFTER_FIRST)
    res = bench.runpytest(*STEADY_RUN, "--fp4-save-baseline", "cand.json")
    assert res.ret == 0, res.stdout.str()  # no gate: nothing to fail
    assert "run INCOMPLETE: 1 of 2 cases not run" in res.stdout.str()
    assert json.loads((bench.path / "cand.json").read_text())["fp4bench"]["clean"] is False


# --- the main job without timing: what was checked, and why each backend was skipped --------------


def test_a_run_without_timing_prints_its_checks_and_one_line_per_skipped_backend(bench):
    """The README's main job (``--benchmark-disable``) on a CPU: a table of the cases it checked
    (row, shape, time, check) and one line per skipped backend, with the count and the reason."""
    res = bench.runpytest(*TINY, "--fp4-backends", "torch-bf16,flashinfer-cutlass", "--benchmark-disable")
    out = res.stdout.str()
    assert res.ret == 0, out
    checks = out.split("fp4bench checks (CPU)")[1].split("fp4bench skipped backends")[0]
    assert "time: not measured (--benchmark-disable" in checks
    header = next(line for line in checks.splitlines() if line.startswith("problem"))
    assert header.split() == ["problem", "size", "time", "check"]  # the backend is shared: said above
    assert "every row: backend torch-bf16, tactic default" in checks
    rows = [line for line in checks.splitlines() if line.startswith("glm-5 b1 ")]
    assert len(rows) == 2 and all(re.search(r"\s-\s+ok: 0\.\d+ of its error bound, SQNR \d+\.\d dB$", r) for r in rows)
    assert any("M1 N512 K6144" in r for r in rows)
    skipped = out.split("fp4bench skipped backends (-rs: every case)")[1].splitlines()[1:3]
    assert skipped[0] == "flashinfer-cutlass: 2 skipped: no CUDA device", skipped
    long = [line for line in out.split("fp4bench checks (CPU)")[1].splitlines() if len(line) > WIDTH]
    assert not long, long


def test_skipped_lines_count_each_backend_once_with_its_commonest_reason():
    skipped = {"a": "x-lib: no CUDA device", "b": "x-lib: no CUDA device", "c": "needs 36 GiB", "d": "needs 18 GiB",
               "e": "needs 36 GiB", "f": "empty"}
    backend_of = {"a": "x-lib", "b": "x-lib", "c": "torch-bf16", "d": "torch-bf16", "e": "torch-bf16"}
    lines = skipped_lines(skipped, backend_of, [{"backend": "torch-bf16"}])
    assert lines == ["torch-bf16: 3 skipped, 1 ran: needs 36 GiB (and 1 other reason)", "x-lib: 2 skipped: no CUDA device"]
    assert skipped_lines({}, {}, []) == []


def test_progress_eta_counts_the_further_windows_and_they_report_their_own():
    """``--fp4-windows 3``: the ETA during the tests includes the two passes after them, and those
    passes print their own progress with an ETA (they were silent)."""
    from fp4bench.plugin.console import Tracker
    from fp4bench.run.windows import extra_passes

    now = [0.0]
    t = Tracker(interval_s=30, clock=lambda: now[0], planned=["a", "b", "c", "d"], windows=3, t0=0.0)
    t.finished.update(a="passed", b="passed")
    now[0] = 60.0
    # 2 of 4 cases in 60 s: 2 cases and 2 x 4 further windows left, 30 s each
    assert t.due() == ("fp4bench: 2/4 cases, 1m00s elapsed, ETA 5m00s (with 2 further windows of each case "
                       "after them)")

    class Session:
        cases = {n: (None, None) for n in "abcd"}
        windows = {n: [] for n in "abcd"}
        window_errors: list = []
        runner = None

    seen = []

    def window(runner, backend, spec, index):
        now[0] += 15.0
        return [1.0], ""

    import fp4bench.run.windows as windows
    real, windows.take_window = windows.take_window, window
    try:
        started = now[0]
        assert extra_passes(Session(), 3, progress=lambda d, n: seen.append(t.windows_due(d, n, started))) == 8
    finally:
        windows.take_window = real
    lines = [s for s in seen if s]
    assert lines[0] == "fp4bench: 2/8 further windows, 30s elapsed, ETA 1m30s" and len(lines) == 3
