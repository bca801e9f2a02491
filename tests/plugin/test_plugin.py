"""The pytest plugin end to end, in-process with ``pytester`` on the real benchmark file.

Real CPU rows (torch-bf16, torch-reference) show the run / skip / save path, in one run that two
tests share. The timing gate is exercised with ``steady-spin`` (tests/fakes/pytest_run.py, loaded
with ``--fp4-plugin``) on the simulated clock (``sim_clock``): a bf16 backend whose call takes
exactly 1 ms, so its verdicts are the same however busy the machine is, and take no time to
measure. Its numbers are the gate's input; how the gate decides is tested in test_verdict.py.
"""

from __future__ import annotations

import json
import re
import statistics

import pytest
import torch

# Imported here, not first inside an inner run: pytester drops modules an inline run imported, so
# each run would re-import them (scipy.stats alone takes seconds), and the fault backends would be
# new objects every time.
import fp4bench.run.case  # noqa: F401
import fp4bench.env  # noqa: F401
import fp4bench.gate.compare  # noqa: F401
import fp4bench.measure.peaks  # noqa: F401
import fp4bench.report.tables  # noqa: F401
import fp4bench.run.sweep  # noqa: F401
import fp4bench.testing.faults  # noqa: F401
from fakes.benchjson import H200, bench_entry, bench_json
from fakes.wrapped import unwrapped
from fp4bench.backends import registry
from fp4bench.plugin.console import problem_label
from fp4bench.run.sweep import SweepOptions, problems_for
from fakes.pytest_run import TINY, GATE, GATE_IDS, STEADY, outcomes_of, shared_run, steady_baseline, write_json, faster_baseline

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry", "quick_runs")
steady = pytest.mark.usefixtures("sim_clock")

# --- (a) + (b): a CPU run, GPU rows skipped, a candidate baseline written ----------------------


#: the CPU run of (a) and (b): every CPU backend on the two GLM-5 shared-expert GEMMs, saved as a
#: candidate of one window (the default three when saving, and what the candidate keeps of them:
#: the test of pytest's outcomes and the final table below) and, as the user asked for it, as
#: pytest-benchmark's own JSON; without replays (what they check: tests/measure/test_replays.py)
CPU_RUN = (*TINY[:-2], "--fp4-kinds", "dense,grouped", "-v", "--fp4-save-baseline", "cand.json", "--fp4-windows", "1",
           "--benchmark-json", "r.json", "--fp4-replays", "0")


def test_cpu_run_skips_gpu_backends_and_saves_a_candidate(bench, shared_runs):
    res, path = shared_run(shared_runs, bench, *CPU_RUN)
    out = unwrapped(res.stdout.str())
    assert res.ret == 0, out
    cpu = torch.device("cpu")
    dense_rows = sorted(b.name for b in registry.all_backends() if "dense" in b.kinds and b.availability(cpu).ok)
    assert {"torch-bf16", "torch-reference"} <= set(dense_rows)
    # the CPU rows ran on both GLM-5 shared-expert GEMMs ...
    assert outcomes_of(res) == {"passed": 2 * len(dense_rows)}
    for backend in dense_rows:
        for shape in ("shared_gate_up-m1n512k6144", "shared_down-m1n6144k256"):
            assert f"test_dense[{backend}-default-glm-5-b1-tp8-uniform-{shape}] PASSED" in out
    # ... and every backend that cannot run here is skipped on each of its problems, with its reason,
    # the backend and the problem named, at the benchmark's own line (test_dense: 10, test_grouped: 15)
    labels = {k: [problem_label(p) for p in problems_for(SweepOptions(batches=(1,), tps=(8,), kinds=(k,)))]
              for k in ("dense", "grouped")}
    assert labels["dense"] == ["glm-5 b1 tp8 shared_gate_up M=1 N=512 K=6144", "glm-5 b1 tp8 shared_down M=1 N=6144 K=256"]
    skipped = 0
    for b in registry.all_backends():
        a = b.availability(cpu)
        if a.ok or not b.kinds & {"dense", "grouped"}:
            continue
        for kind, line in (("dense", 10), ("grouped", 15)):
            for label in labels[kind] if kind in b.kinds else []:
                why = a.reason.removeprefix(f"{b.name} ")
                assert f"\nSKIPPED [1] test_fp4_gemm.py:{line}: {b.name} on {label}: {why}\n" in out, (b.name, label)
        skipped += 1
    assert skipped >= 5  # cuBLASLt, FlashInfer, sgl-kernel (dense and grouped), torch-fp8
    assert ("SKIPPED [1] test_fp4_gemm.py:10: flashinfer-cutlass on glm-5 b1 tp8 shared_down M=1 N=6144 K=256: "
            "no CUDA device\n") in out
    assert "plugin/hooks.py" not in out  # no skip is reported at the line of the plugin that raised it
    # grouped GLM-5 layers are too big to draw on a CPU: skipped, with the size
    grouped_rows = [b for b in registry.all_backends() if "grouped" in b.kinds and b.availability(cpu).ok]
    sizes = re.findall(r"^SKIPPED \[1\] test_fp4_gemm.py:15: (\S+) on glm-5 b1 tp8 \w+ M=8 \(8 of 256 experts\) "
                       r"N=\d+ K=\d+: grouped operands need (\d+\.\d) GiB; not drawn on a CPU-only machine "
                       r"\(limit 2 GiB\)$", out, re.M)
    assert sorted(sizes) == sorted((b.name, s) for b in grouped_rows for s in ("2.3", "4.5"))  # gate_up, down
    # the moe benchmark has no case here: one skip that says why (not "got empty parameter set")
    assert "SKIPPED [1] test_fp4_gemm.py:20: moe not selected (--fp4-kinds dense,grouped)" in out
    assert "empty parameter set" not in out
    assert "fp4bench results (CPU)" in out and "candidate baseline written to cand.json" in out
    # pytest-benchmark names the file the user asked for, not a partial file it is written through
    # (the candidate alone: the test of pytest's outcomes and the final table below)
    logged = out + res.stderr.str()
    assert re.search(r"^Wrote benchmark data in: \S*r\.json$", logged, re.M) and ".partial-" not in logged, logged
    assert "was not used at all" not in out

    data = json.loads((path / "cand.json").read_text())
    sec = data["fp4bench"]
    assert sec["schema"] == 2 and sec["fingerprint"]["gpu_slug"] == "cpu" and sec["clean"] is True
    assert not sec.get("windows")  # one window of each benchmark: its samples are pytest-benchmark's data
    assert sec["sweep"]["kinds"] == ["dense", "grouped"] and sec["sweep"]["tps"] == [8]
    assert sec["availability"] == {
        f"{b}|glm-5-b1-tp8-uniform-{s}|default": "ok"
        for b in dense_rows for s in ("shared_gate_up-m1n512k6144", "shared_down-m1n6144k256")}
    benches = {b["fullname"]: b for b in data["benchmarks"]}
    assert len(benches) == 2 * len(dense_rows)
    for b in benches.values():
        raw = b["stats"]["data"]  # raw per-call seconds, as the gate needs them
        assert len(raw) >= 3 and all(isinstance(x, float) and 0 < x < 5 for x in raw)
        assert b["stats"]["median"] == pytest.approx(statistics.median(raw))
        x = b["extra_info"]
        assert x["check"] == "ok" and x["timer"] == "cpu perf_counter" and x["l2"] == "hot"
        assert b["group"].startswith("dense glm-5 shared_")


def test_save_baseline_with_the_users_benchmark_json_writes_both_as_json_data(bench, shared_runs):
    """README: ``--benchmark-json`` is kept with ``--fp4-save-baseline``; the candidate is a copy."""
    res, path = shared_run(shared_runs, bench, *CPU_RUN)
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "Traceback" not in out and "not JSON serializable" not in out
    from fp4bench.gate.baseline import load_baseline

    for name in ("r.json", "cand.json"):
        text = (path / name).read_text()
        assert "UNSERIALIZABLE" not in text, name
        data = json.loads(text)
        assert {b["params"]["fp4_case"] for b in data["benchmarks"]} == {
            b["param"] for b in data["benchmarks"]}  # the case id, as pytest names the test
        assert len(load_baseline(path / name).benchmarks) == 4  # torch-bf16 and torch-reference, two GEMMs each
    assert json.loads((path / "r.json").read_text())["benchmarks"] == \
        json.loads((path / "cand.json").read_text())["benchmarks"]


# --- (c) unchanged, (d) regressed ----------------------------------------------------------------


@steady
def test_unchanged_run_passes_the_gate(bench):
    steady_baseline(bench)
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert outcomes_of(res) == {"passed": 2}
    assert "fp4bench verdict vs base.json" in out
    assert "what changed: nothing (same software stack)" in out
    assert "benchmark names: test_fp4_gemm.py::<name> (the table and the notes below" in out  # said once
    verdict = out.split("fp4bench verdict vs base.json")[1]
    for name in GATE_IDS:  # the same 1 ms as the baseline's, exactly
        short = name.split("::")[1]
        row = next(ln for ln in verdict.splitlines() if short in ln and ln.split()[0] in ("PASS", "AMBIGUOUS", "FAIL"))
        assert row.split()[0] == "PASS" and " +0.0% " in row, row
    assert "summary: 2 PASS → no regression (exit 0)" in verdict


@steady
@pytest.mark.parametrize("confirm", [True, False])
def test_regression_fails_the_test_by_name(bench, confirm):
    # a baseline 40 % faster: the unchanged code now looks 1/0.6 = 1.67x slower
    base = write_json(bench, "fast.json", faster_baseline(steady_baseline(bench), 0.6))
    res = bench.runpytest(*GATE, "--fp4-baseline-file", base, *([] if confirm else ["--fp4-no-confirm"]))
    out = res.stdout.str()
    assert res.ret == 1
    assert outcomes_of(res) == {"failed": 2}
    for name in GATE_IDS:
        assert f"FAIL {name}: " in out
    assert "+6" in out  # +60..+70 % in the one-line message
    assert "fp4bench verdict vs fast.json" in out


@steady
def test_a_suspect_takes_further_windows_and_one_odd_window_never_fails(bench):
    steady_baseline(bench)
    STEADY.slow_first, STEADY.prepares = True, 0  # the first case's first window is 1.7x slow
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json", "--fp4-save-baseline", "now.json")
    assert res.ret == 0, res.stdout.str()
    now = json.loads((bench.path / "now.json").read_text())
    first = GATE_IDS[0]
    assert {b["fullname"]: b for b in now["benchmarks"]}[first]["extra_info"]["verdict"] in ("PASS", "AMBIGUOUS")
    # the candidate keeps every window: the slow one, those the suspect asked for, and passes 2 and 3
    ws = now["fp4bench"]["windows"][first]
    meds = [statistics.median(w) for w in ws]
    assert len(ws) >= 4 and meds[0] > 1.4 * statistics.median(meds[1:])
    assert len(now["fp4bench"]["windows"][GATE_IDS[1]]) >= 3
    # without further windows the same suspect (+70 %, over twice the 20 % floor) fails
    STEADY.prepares = 0
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "base.json", "--fp4-no-confirm")
    assert res.ret == 1 and outcomes_of(res) == {"passed": 1, "failed": 1}
    assert f"FAIL {first}: " in res.stdout.str()


@steady
def test_slowdown_wrapper_fails_only_the_slowed_benchmarks_under_their_own_names(bench, monkeypatch):
    """``fp4bench.testing.slowdown`` replaces steady-spin in place: the run's benchmark names are
    the plain run's, the slowed ones FAIL against the plain baseline, the other backend's do not."""
    both = [*GATE, "--fp4-backends", "steady-spin,steady-spin-2"]
    res = bench.runpytest(*both, "--fp4-save-baseline", "plain.json", "--fp4-windows", "1")
    assert res.ret == 0, res.stdout.str()
    monkeypatch.setenv("FP4BENCH_SLOWDOWN", "steady-spin=1.0")
    res = bench.runpytest(*both, "--fp4-plugin", "fp4bench.testing.slowdown", "--fp4-baseline-file", "plain.json",
                          "--fp4-save-baseline", "slowed.json", "--fp4-windows", "1")
    out = res.stdout.str()
    assert res.ret == 1 and outcomes_of(res) == {"passed": 2, "failed": 2}, out
    for name in GATE_IDS:
        assert f"FAIL {name}: " in out
        assert f"FAIL {name.replace('steady-spin-', 'steady-spin-2-')}" not in out
    assert "MISSING" not in out and "NEW (" not in out

    def names(path: str) -> set[str]:
        return {b["fullname"] for b in json.loads((bench.path / path).read_text())["benchmarks"]}

    assert names("slowed.json") == names("plain.json") and len(names("plain.json")) == 4
    sec = json.loads((bench.path / "slowed.json").read_text())["fp4bench"]
    assert list(sec["sweep"]["test_only"]) == ["steady-spin"] and sec["clean"] is False
    slowed = {b["fullname"]: b["stats"]["median"] for b in json.loads((bench.path / "slowed.json").read_text())["benchmarks"]}
    plain = {b["fullname"]: b["stats"]["median"] for b in json.loads((bench.path / "plain.json").read_text())["benchmarks"]}
    for name in GATE_IDS:  # +100 % of a 1 ms call, spent on the clock
        assert slowed[name] == pytest.approx(2 * plain[name])


# --- (e) MISSING ---------------------------------------------------------------------------------


@steady
def test_missing_benchmark_fails_the_session_unless_allowed(bench):
    data = steady_baseline(bench)
    ghost = json.loads(json.dumps(data["benchmarks"][0]))
    ghost["fullname"] = ghost["fullname"].replace("]", "-ghost]")
    ghost["name"] = ghost["fullname"].split("::")[1]
    data["benchmarks"].append(ghost)
    write_json(bench, "plus.json", data)
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "plus.json")
    out = res.stdout.str()
    assert outcomes_of(res) == {"passed": 2}  # every test passed ...
    assert res.ret == 3  # ... but the session is incomplete: a benchmark vanished
    assert "MISSING (1) — in the baseline, not measured now:" in out
    assert f"  {ghost['fullname']}" in out
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "plus.json", "--fp4-allow-missing")
    assert res.ret == 0 and "MISSING (1)" in res.stdout.str()


# --- (f) another GPU's baseline; (h) bare --benchmark-compare ----------------------------------


@steady
def test_baseline_of_another_gpu_is_a_usage_error(bench):
    name = write_json(bench, "h200.json", bench_json([bench_entry(GATE_IDS[0], [1e-3] * 10)], fingerprint=H200))
    res = bench.runpytest(*GATE, "--fp4-baseline-file", name)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "fp4bench baseline: baseline is for NVIDIA H200 (nvidia-h200, compute capability 9.0)" in err
    assert "but this run is on cpu (cpu" in err


@steady
def test_bad_baseline_file_is_a_usage_error(bench):
    res = bench.runpytest(*GATE, "--fp4-baseline-file", "nope.json")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert "baseline file nope.json does not exist" in res.stderr.str()


@steady
def test_bare_benchmark_compare_needs_an_approved_baseline_for_this_gpu(bench):
    # --fp4-save-baseline without a path: a candidate under <baselines>/<gpu>/candidates/
    res = bench.runpytest(*GATE, "--fp4-save-baseline", "--fp4-baselines", "store", "--fp4-windows", "1")
    assert res.ret == 0
    cands = list((bench.path / "store" / "cpu" / "candidates").glob("*.json"))
    assert len(cands) == 1 and re.fullmatch(r"\d{8}T\d{6}Z\.json", cands[0].name)
    assert f"candidate baseline written to store/cpu/candidates/{cands[0].name}" in res.stdout.str()
    # ... which is never picked up by --benchmark-compare: only an approved file counts
    res = bench.runpytest(*GATE, "--benchmark-compare", "--fp4-baselines", "store")
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    err = res.stderr.str()
    assert "ERROR: fp4bench baseline: no approved baseline for cpu" in err
    assert "expected store/cpu/approved.json" in err


@steady
def test_bare_benchmark_compare_uses_the_approved_baseline(bench):
    steady_baseline(bench, "store/cpu/approved.json")
    res = bench.runpytest(*GATE, "--benchmark-compare", "--fp4-baselines", "store")
    out = res.stdout.str()
    assert res.ret == 0, out
    assert "fp4bench verdict vs store/cpu/approved.json" in out
    assert "Comparing against benchmarks from" in out + res.stderr.str()  # pytest-benchmark reads it too


@steady
def test_bare_benchmark_compare_hands_a_slim_baseline_to_pytest_benchmark(bench):
    """The approved file is slim; pytest-benchmark's own compare (and --benchmark-compare-fail)
    still gets the baseline's samples, as a pytest-benchmark file."""
    from fp4bench.gate.approve import migrate

    steady_baseline(bench, "store/cpu/run.json")
    migrate(bench.path / "store/cpu/run.json", bench.path / "store/cpu/approved.json")
    (bench.path / "store/cpu/run.json").unlink()
    # --fp4-benchmark-table: pytest-benchmark's own table keeps fp4bench's rows (left out by default)
    res = bench.runpytest(*GATE, "--benchmark-compare", "--benchmark-compare-fail=median:1000%",
                          "--fp4-baselines", "store", "--fp4-benchmark-table")
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == 0, out
    assert "fp4bench verdict vs store/cpu/approved.json" in out
    assert "Comparing against benchmarks from" in out and "Failed to load" not in out
    # the copy carries this machine's machine_info (the fingerprint is what the gate checks) and
    # ends in the real baseline's path
    assert "machine_info is different" not in out
    # ... and names the user's file, not the temporary copy
    assert f"Comparing against benchmarks from: {(bench.path / 'store/cpu/approved.json').resolve()}" in out, out
    assert "fp4bench-slim-copy-" not in out
    assert "(NOW)" in out  # pytest-benchmark's table has the baseline's rows next to this run's


# --- (g) the fault plugin -----------------------------------------------------------------------


#: the fault backends' runs: at TP 32, the GLM-5 shared-expert GEMMs of a quarter of TP 8's weights
#: (a fault is a pure-torch row: a call decodes every weight)
FAULTS_TP32 = [*TINY, "--fp4-tp", "32", "--fp4-plugin", "fp4bench.testing.faults"]


def test_fault_plugin_zero_band(bench):
    res = bench.runpytest(*FAULTS_TP32, "--fp4-backends", "fault-zero-band", "--fp4-batches", "16,32")
    out = res.stdout.str()
    assert res.ret == 1
    assert outcomes_of(res) == {"passed": 2, "failed": 2}
    for shape, n in (("shared_gate_up-m32n128k6144", 128), ("shared_down-m32n6144k64", 6144)):
        assert (f"fault-zero-band [default] on glm-5-b32-tp32-uniform-{shape}: all-zero output: "
                f"all {32 * n} outputs are 0 while max|ref| = ") in out
    assert "on glm-5-b16" not in out  # M = 16 is outside the band: checked, timed, passed
    # in the results table (the backend and tactic every row shares are said once, above it)
    assert "every row: backend fault-zero-band, tactic default" in out
    assert sum(ln.startswith("glm-5 b16 shared_") for ln in out.splitlines()) == 2
    # failed, skipped and measured tests alike: fp4bench owns the fixture, pytest-benchmark stays quiet
    assert "Benchmark fixture was not used" not in out


def test_a_case_out_of_memory_fails_its_test_as_out_of_memory_not_as_a_wrong_output(bench):
    res = bench.runpytest(*TINY, "--fp4-plugin", "fp4bench.testing.faults", "--fp4-backends", "fault-oom")
    out = res.stdout.str()
    assert res.ret == 1 and outcomes_of(res) == {"failed": 2}
    assert out.count("OUT OF MEMORY: fault-oom [default] on glm-5-b1-tp8-uniform-shared_") == 2, out
    assert "did not fit in device memory (not a wrong output and no timing verdict)" in out
    assert "OutOfMemoryError in fault-oom" not in out


def test_correctness_only_run_checks_every_case_without_fixture_warnings(bench):
    res = bench.runpytest(*FAULTS_TP32, "--benchmark-disable", "--fp4-backends", "fault-zero-band,torch-bf16",
                          "--fp4-batches", "32")
    out = res.stdout.str()
    assert outcomes_of(res) == {"passed": 2, "failed": 2}  # the zero band is still caught untimed
    assert "Benchmark fixture was not used" not in out


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--fp4-backends", "no-such-backend"], "fp4bench: unknown backend 'no-such-backend'; known: "),
        (["--fp4-kinds", "dense,sparse"], "fp4bench: --fp4-kinds: unknown kind(s) ['sparse']; use dense, grouped, moe"),
        (["--fp4-plugin", "no_such_module"], "fp4bench: --fp4-plugin: cannot import backend module 'no_such_module'"),
    ],
)
def test_bad_options_are_usage_errors(bench, option, message):
    res = bench.runpytest(*TINY, *option)
    assert res.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in res.stderr.str()
    assert "Traceback" not in res.stdout.str() + res.stderr.str()


@steady
def test_pytest_outcomes_and_the_final_table_agree_on_every_fail(bench):
    """Each test's outcome and the session's verdict table are one decision per benchmark (the
    same windows, the same rule): pytest's failed count is the table's FAIL count, on a run with
    several FAILs and several passes."""
    both = [*GATE, "--fp4-backends", "steady-spin,steady-spin-2"]
    res = bench.runpytest(*both, "--fp4-save-baseline", "four.json")
    assert res.ret == 0, res.stdout.str()
    # pytest-benchmark names the candidate, not the partial file it is written through
    logged = res.stdout.str() + res.stderr.str()
    assert re.search(r"^Wrote benchmark data in: \S*four\.json$", logged, re.M) and ".partial-" not in logged, logged
    data = json.loads((bench.path / "four.json").read_text())
    # saved as a baseline: 3 independent windows of each benchmark by default, window 1 is pytest-benchmark's data
    windows = data["fp4bench"]["windows"]
    assert set(windows) == {b["fullname"] for b in data["benchmarks"]}
    assert all(len(windows[b["fullname"]]) == 3 and windows[b["fullname"]][0] == b["stats"]["data"]
               for b in data["benchmarks"])
    names = sorted(b["fullname"] for b in data["benchmarks"])
    fast = set(names[:3])  # three of the four look 1.67x slower now
    for b in data["benchmarks"]:
        if b["fullname"] in fast:
            b["stats"]["data"] = [x * 0.6 for x in b["stats"]["data"]]
            data["fp4bench"]["windows"][b["fullname"]] = [[x * 0.6 for x in w]
                                                          for w in data["fp4bench"]["windows"][b["fullname"]]]
    write_json(bench, "fast3.json", data)
    res = bench.runpytest(*both, "--fp4-baseline-file", "fast3.json")
    out = res.stdout.str()
    table = out.split("fp4bench verdict vs fast3.json")[1]
    rows = [ln.split()[0] for ln in table.splitlines() if ln.split() and ln.split()[0] in ("PASS", "FAIL", "AMBIGUOUS")]
    summary = next(ln for ln in table.splitlines() if ln.startswith("summary: "))
    assert res.ret == 1
    assert outcomes_of(res)["failed"] == rows.count("FAIL") == 3, out
    assert "3 FAIL" in summary
