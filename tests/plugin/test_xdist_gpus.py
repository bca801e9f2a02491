"""``pytest bench -n N`` over the GPUs of one host, end to end on CPU (``fp4bench.plugin.xdist``).

A child ``pytest bench`` runs with two fake GPUs (``FP4BENCH_FAKE_GPUS``) and the ``fakegpu``
test plugin (tests/fakes/fakegpu.py): each xdist worker is pinned to one fake UUID through
``CUDA_VISIBLE_DEVICES`` exactly as on a GPU host, measures the CPU-capable rows, and reports the
one fake GPU it sees as its unit. The controller merges the workers' cases and gates the run once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from fakes.paths import BENCH_FILE as BENCH, ROOT

pytest_plugins = ["pytester"]
BENCH_FILE = BENCH.read_text()

A, B = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"
QUICK = ["--fp4-backends", "torch-reference,torch-bf16", "--fp4-batches", "1", "--fp4-tp", "8",
         "--fp4-time-budget", "0.05", "--fp4-min-samples", "5",
         # CPU wall clock of two workers on a shared machine: only a gross change may FAIL here
         "--fp4-floor", "200"]


def bench(tmp_path: Path, *args: str, gpus: str | None = f"{A},{B}", kill: str = "",
          seen: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "CUDA_VISIBLE"))}
    env.pop("FP4BENCH_FAKE_GPUS", None)
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "fakes")]),
               FP4BENCH_FAKE_KILL=kill, FP4BENCH_FAKE_SEEN=seen)
    if gpus is not None:
        env["FP4BENCH_FAKE_GPUS"] = gpus
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-p", "fakegpu", "-p", "no:cacheprovider", "-rA",
           "--fp4-baselines", str(tmp_path / "baselines"), *QUICK, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)


def measured(res: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^PASSED \S+::(test_dense\[.*?\])$", res.stdout, re.M)


@pytest.mark.e2e
def test_bench_on_two_gpus_gives_one_merged_verdict(tmp_path):
    # a candidate of the two-GPU run: every benchmark with the UUID of the GPU that measured it
    res = bench(tmp_path, "-n", "2", "--fp4-save-baseline=cand.json")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    cand = json.loads((tmp_path / "cand.json").read_text())
    first = {b["fullname"]: b["extra_info"]["gpu_uuid"] for b in cand["benchmarks"]}
    assert len(first) == 4 and set(first.values()) == {A, B}  # each worker saw exactly its own GPU
    section = cand["fp4bench"]
    assert section["fingerprint"]["gpu_uuid"] is None and section["fingerprint"]["gpu_name"] == "Fake GPU"
    assert section["clean"] is True and {len(w) for w in section["windows"].values()} == {3}  # later passes too
    subprocess.run([sys.executable, "-m", "fp4bench", "baseline", "approve", "cand.json", "--baselines", "baselines"],
                   cwd=tmp_path, check=True, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    # GPU A's own baseline holds one of the benchmarks A measures: that one is judged by it
    approved = json.loads((tmp_path / "baselines" / "fake-gpu" / "approved.json").read_text())
    own = sorted(n for n, u in first.items() if u == A)[0]
    unit = {**approved, "fingerprint": {**approved["fingerprint"], "gpu_uuid": A},
            "benchmarks": {own: approved["benchmarks"][own]}}
    units = tmp_path / "baselines" / "fake-gpu" / "units"
    # approve wrote each unit's own share of the two-GPU candidate
    for uuid in (A, B):
        share = json.loads((units / f"{uuid}.json").read_text())["benchmarks"]
        assert sorted(share) == sorted(n for n, u in first.items() if u == uuid)
    (units / f"{B}.json").unlink()  # B's benchmarks fall back to approved.json, A's own file holds one
    (units / f"{A}.json").write_text(json.dumps(unit))

    res = bench(tmp_path, "-n", "auto", "--benchmark-compare", "--benchmark-json", "r.json",
                "--fp4-verdict-json", "v.json", "--fp4-csv", "r.csv", "--fp4-log", "r.lines.jsonl")
    out = res.stdout
    assert res.returncode in (0, 1), out[-3000:] + res.stderr[-3000:]
    assert "created: 2/2 workers" in out and f"fp4bench: 2 workers, one per GPU: {A}, {B}" in out
    assert out.count("fp4bench verdict vs") == 1 and out.count("fp4bench results (CPU)") == 1
    assert f"baselines: 3 vs approved.json (another or unknown unit: less sensitive); 1 vs units/{A}.json " \
           "(that unit)" in out
    assert "coverage: judged 4 of 4 expected benchmarks" in out
    # the table's FAILs are the tests that failed: one decision, made in the worker, shown once
    fails = re.findall(r"^FAIL\s+(test_dense\[\S+\])", out, re.M)
    assert sorted(re.findall(r"^FAILED \S+::(test_dense\[.*?\])", out, re.M)) == sorted(fails)
    assert res.returncode == (1 if fails else 0) and len(measured(res)) == 4 - len(fails)
    results = json.loads((tmp_path / "r.json").read_text())
    again = {b["fullname"]: b["extra_info"]["gpu_uuid"] for b in results["benchmarks"]}
    assert again == first  # the same family on the same GPU, run after run
    assert results["fp4bench"]["fingerprint"]["gpu_uuid"] is None
    verdict = json.loads((tmp_path / "v.json").read_text())
    assert verdict["coverage"]["judged"] == 4
    log = [json.loads(line) for line in (tmp_path / "r.lines.jsonl").read_text().splitlines()]
    assert log[0]["type"] == "header" and log[0]["gpus"] == [A, B] and log[-1]["type"] == "end"
    assert {r["extra_info"].get("gpu_uuid") for r in log if r["type"] == "case" and r["samples"]} == {A, B}
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 5


@pytest.mark.e2e
def test_a_killed_worker_makes_the_run_incomplete_and_is_named(tmp_path):
    victim = "test_dense[torch-bf16-default-glm-5-b1-tp8-uniform-shared_down-m1n6144k256]"
    res = bench(tmp_path, "-n", "2", "--fp4-save-baseline=cand.json", kill=victim)
    out = res.stdout
    assert res.returncode == 3, out[-3000:] + res.stderr[-3000:]
    assert re.search(rf"fp4bench: worker gw\d \(GPU-\w+-\d+\) crashed while running \S+{re.escape(victim)}: "
                     r"the run is INCOMPLETE", out)
    assert "replacing crashed worker" in out  # pytest-xdist's replacement, on the same GPU
    assert "NOT REACHED (1," in out and victim in out.split("NOT REACHED")[1]
    cand = json.loads((tmp_path / "cand.json").read_text())
    assert len(cand["benchmarks"]) == 3 and cand["fp4bench"]["clean"] is False  # the others were kept


@pytest.mark.parametrize("args, gpus, message", [
    (["-n", "3"], f"{A},{B}", "fp4bench: -n 3: 2 GPUs are visible (CUDA_VISIBLE_DEVICES unset) and each benchmark "
                              "worker needs a GPU of its own: use -n 2 or fewer, or -n auto"),
    (["-n", "2"], None, "fp4bench: -n 2: this run has fp4bench benchmark cases, and each worker needs a GPU of "
                        "its own, but 0 GPUs are visible (CUDA_VISIBLE_DEVICES unset); run it without -n"),
    (["-n", "auto"], None, "fp4bench: -n auto: this run has fp4bench benchmark cases, and each worker needs"),
    (["-n", "2", "--dist", "loadscope"], f"{A},{B}", "fp4bench: --dist loadscope: a benchmark run places whole"),
    (["-n", "2", "--benchmark-autosave"], f"{A},{B}", "fp4bench: --benchmark-autosave does nothing with -n"),
])
def test_a_run_that_cannot_have_one_worker_per_gpu_is_a_one_line_usage_error(pytester, monkeypatch, args, gpus,
                                                                            message):
    """Refused by the controller before any worker starts: an in-process run (no process spawned)."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("FP4BENCH_FAKE_GPUS", raising=False)
    if gpus is not None:
        monkeypatch.setenv("FP4BENCH_FAKE_GPUS", gpus)
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    res = pytester.runpytest("-p", "fp4bench.plugin", "-p", "no:cacheprovider", "-rA",
                             "--fp4-baselines", str(pytester.path / "baselines"), *QUICK, *args)
    stderr = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-2000:] + stderr[-2000:]
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and errors[0].startswith(f"ERROR: {message}"), stderr
    assert "created:" not in res.stdout.str()  # refused before any worker started


@pytest.mark.e2e
def test_a_usage_error_a_worker_meets_is_the_runs_one_line_usage_error(tmp_path):
    """Each worker checks the baseline against its own GPU and way of measuring: a mismatch is the
    controller's one-line usage error, not a worker that crashes and is restarted."""
    from fakes.benchjson import H200, bench_entry, bench_json, write
    from dataclasses import replace

    from fp4bench.gate.baseline import make_section

    data = bench_json([bench_entry("bench/test_fp4_gemm.py::test_dense[x]", [1e-3] * 10)],
                      fingerprint=replace(H200, gpu_name="Fake GPU", gpu_slug="fake-gpu", compute_capability="0.0"))
    data["fp4bench"] = make_section(replace(H200, gpu_name="Fake GPU", gpu_slug="fake-gpu", compute_capability="0.0"),
                                    {}, {"l2": "cold", "timer": "cpu"}, clean=True)
    write(tmp_path / "cold.json", data)
    res = bench(tmp_path, "-n", "2", "--fp4-baseline-file", "cold.json")
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, res.stdout[-2000:] + res.stderr[-2000:]
    errors = [line for line in res.stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == ["ERROR: fp4bench baseline: the baseline was timed with l2='cold', this run with l2='hot': "
                      "not comparable (re-run with the baseline's setting, or make a new baseline)"], res.stderr
    assert "replacing crashed worker" not in res.stdout


@pytest.mark.e2e
def test_a_worker_that_measures_on_another_gpu_than_assigned_stops_the_run(tmp_path):
    res = bench(tmp_path, "-n", "2", seen=B)  # both workers see B: CUDA started before the pin
    assert res.returncode == pytest.ExitCode.USAGE_ERROR, res.stdout[-2000:] + res.stderr[-2000:]
    assert re.search(rf"^ERROR: fp4bench: worker gw\d was assigned GPU {A} but measures on {B}$", res.stderr, re.M)
