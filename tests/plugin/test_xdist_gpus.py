"""``pytest bench -n N`` over the GPUs of one host, on CPU with two fake GPUs
(``FP4BENCH_FAKE_GPUS``, ``fp4bench.plugin.xdist``).

One run in real processes (``e2e``): a child ``pytest bench -n auto`` with the ``fakegpu`` test
plugin (tests/fakes/fakegpu.py): each xdist worker is pinned to one fake UUID through
``CUDA_VISIBLE_DEVICES`` exactly as on a GPU host, measures the CPU-capable rows, and reports the
one fake GPU it sees as its unit; the controller merges the workers' cases and gates the run once.

The rest in this process: usage errors the controller meets before any worker starts, and what
workers send (a crash, a usage error met while configuring, a wrong GPU): real worker sessions,
recorded and replayed to a real controller session whose pytest-xdist starts stand-in nodes
(tests/fakes/xdist_nodes.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fakes.benchjson import H200
from fakes.paths import BENCH_FILE as BENCH, ROOT
from fakes.xdist_nodes import KEEP_XDIST, NO_XDIST

pytest_plugins = ["pytester"]
BENCH_FILE = BENCH.read_text()

A, B = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111"
FAKE = replace(H200, gpu_name="Fake GPU", gpu_slug="fake-gpu", compute_capability="0.0")
#: two families (one backend on two problems): one per GPU
NAMES = [f"bench/test_fp4_gemm.py::test_dense[torch-bf16-default-glm-5-b1-tp8-uniform-{p}]"
         for p in ("shared_gate_up-m1n512k6144", "shared_down-m1n6144k256")]
QUICK = ["--fp4-backends", "torch-bf16", "--fp4-kinds", "dense", "--fp4-batches", "1", "--fp4-tp", "8",
         "--fp4-time-budget", "0.05", "--fp4-min-samples", "5",
         # CPU wall clock of two workers on a shared machine: only a gross change may FAIL here
         "--fp4-floor", "200"]


def bench(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYTEST_XDIST_", "CUDA_VISIBLE", "FP4BENCH_FAKE_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests" / "fakes")]),
               FP4BENCH_FAKE_GPUS=f"{A},{B}")
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-p", "fakegpu", *KEEP_XDIST, "-rA",
           "--fp4-baselines", str(tmp_path / "baselines"), *QUICK, *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)


def measured(res: subprocess.CompletedProcess) -> list[str]:
    return re.findall(r"^PASSED \S+::(test_dense\[.*?\])$", res.stdout, re.M)


@pytest.mark.e2e
def test_bench_on_two_gpus_gives_one_merged_verdict(tmp_path):
    """The one run in real processes: ``-n auto`` starts a worker per fake GPU, each measures its
    share, and the controller gates the merged cases once, each against its own unit's baseline
    where that unit has one. The baselines are written here at 1 s a call, hundreds of times slower
    than any CPU run of these cases: both PASS as improved, whatever the machine's load."""
    from fakes.benchjson import bench_entry, bench_json, write

    from fp4bench.gate.approve import approve
    from fp4bench.gate.baseline import make_section

    for fp, path in ((FAKE, "approved.json"), (replace(FAKE, gpu_uuid=A), f"units/{A}.json")):
        data = bench_json([bench_entry(n, [1.0] * 10) for n in NAMES], fingerprint=fp)
        data["fp4bench"] = make_section(fp, {}, {"l2": "hot", "timer": "cpu"}, clean=True)
        write(tmp_path / "baselines" / "fake-gpu" / path, data)
    res = bench(tmp_path, "-n", "auto", "--benchmark-compare", "--fp4-save-baseline=cand.json",
                "--benchmark-json", "r.json", "--fp4-verdict-json", "v.json", "--fp4-csv", "r.csv",
                "--fp4-log", "r.lines.jsonl")
    out = res.stdout
    assert res.returncode == 0, out[-3000:] + res.stderr[-3000:]
    assert "created: 2/2 workers" in out and f"fp4bench: 2 workers, one per GPU: {A}, {B}" in out
    assert out.count("fp4bench verdict vs") == 1 and out.count("fp4bench results (CPU)") == 1
    # units/A.json holds both benchmarks, but judges only the one that GPU A measured
    assert f"baselines: 1 vs approved.json (another or unknown unit: less sensitive); 1 vs units/{A}.json " \
           "(that unit)" in out
    assert "coverage: judged 2 of 2 expected benchmarks" in out and out.count("PASS (improved)") == 2
    assert sorted(measured(res)) == sorted(n.split("::")[1] for n in NAMES)
    # each benchmark with the UUID of the GPU that measured it, one family per GPU
    cand = json.loads((tmp_path / "cand.json").read_text())
    first = {b["fullname"]: b["extra_info"]["gpu_uuid"] for b in cand["benchmarks"]}
    assert sorted(first) == sorted(NAMES) and set(first.values()) == {A, B}
    section = cand["fp4bench"]
    assert section["fingerprint"]["gpu_uuid"] is None and section["fingerprint"]["gpu_name"] == "Fake GPU"
    assert section["clean"] is True and {len(w) for w in section["windows"].values()} == {3}  # later passes too
    results = json.loads((tmp_path / "r.json").read_text())
    assert {b["fullname"]: b["extra_info"]["gpu_uuid"] for b in results["benchmarks"]} == first
    assert results["fp4bench"]["fingerprint"]["gpu_uuid"] is None
    assert json.loads((tmp_path / "v.json").read_text())["coverage"]["judged"] == 2
    log = [json.loads(line) for line in (tmp_path / "r.lines.jsonl").read_text().splitlines()]
    assert log[0]["type"] == "header" and log[0]["gpus"] == [A, B] and log[-1]["type"] == "end"
    assert {r["extra_info"].get("gpu_uuid") for r in log if r["type"] == "case" and r["samples"]} == {A, B}
    assert len((tmp_path / "r.csv").read_text().splitlines()) == 3
    # approving the two-GPU candidate writes each unit's own share of it
    approve(tmp_path / "cand.json", tmp_path / "store")
    for uuid in (A, B):
        share = json.loads((tmp_path / "store" / "fake-gpu" / "units" / f"{uuid}.json").read_text())["benchmarks"]
        assert sorted(share) == sorted(n for n, u in first.items() if u == uuid)


def _in_process(pytester, monkeypatch, *extra: str) -> list[str]:
    """The bench file in a pytester folder, the fake GPUs' fingerprints: the arguments of a
    worker session (``xdist_nodes.run_worker``); its controller's add ``-n 2``."""
    from fakes.xdist_nodes import fake_gpu_fingerprints

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("FP4BENCH_FAKE_GPUS", f"{A},{B}")
    fake_gpu_fingerprints(monkeypatch)
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    return ["-p", "fp4bench.plugin", *KEEP_XDIST, "-rA", "--fp4-baselines", str(pytester.path / "baselines"),
            *QUICK, *extra]


def test_a_killed_worker_makes_the_run_incomplete_and_is_named(pytester, monkeypatch):
    """In this process: two real worker sessions recorded, replayed to a real controller session
    (pytest-xdist's ``DSession``) whose worker on the victim's GPU dies when it reaches it."""
    from fakes.xdist_nodes import replaying, run_controller, run_worker

    args = _in_process(pytester, monkeypatch, "--fp4-save-baseline=cand.json", "--fp4-windows", "1")
    records = {gpu: run_worker(pytester, monkeypatch, f"gw{i}", *args, *NO_XDIST, gpu=gpu, gpus=[A, B])
               for i, gpu in enumerate((A, B))}
    ran = {gpu: [n for n, reps in r.reports.items() if any(x["when"] == "call" for x in reps)]
           for gpu, r in records.items()}
    assert sorted(len(v) for v in ran.values()) == [1, 1], ran  # one family per GPU
    victim_gpu, (victim,) = next((g, v) for g, v in ran.items() if "shared_down" in v[0])
    replaying(monkeypatch, records, crashes={victim_gpu: victim})
    res = run_controller(pytester, *args, "-n", "2")
    out = res.stdout.str()
    assert res.ret == 3, out[-3000:] + res.stderr.str()[-3000:]
    named = [line for line in out.splitlines() if line.startswith("fp4bench: worker ")]
    assert len(named) == 1 and re.match(rf"fp4bench: worker gw\d \({victim_gpu}\) crashed while running "
                                        rf"{re.escape(victim)}: the run is INCOMPLETE", named[0]), out  # once
    assert "replacing crashed worker" in out  # pytest-xdist's replacement, on the same GPU
    assert "NOT REACHED (1," in out and victim.split("::")[1] in out.split("NOT REACHED")[1]
    cand = json.loads((pytester.path / "cand.json").read_text())
    assert len(cand["benchmarks"]) == 1 and cand["fp4bench"]["clean"] is False  # the other was kept


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


def _usage_error_of_a_worker(pytester, monkeypatch, *extra: str) -> str:
    """Both worker sessions of a run, replayed to their controller, the one on GPU A meeting a
    usage error while configuring: the controller's stderr."""
    from fakes.xdist_nodes import replaying, run_controller, run_worker

    from fp4bench.plugin.xdist import USAGE_MARK

    args = _in_process(pytester, monkeypatch, "--fp4-windows", "1", *extra)
    records = {gpu: run_worker(pytester, monkeypatch, f"gw{i}", *args, *NO_XDIST, gpu=gpu, gpus=[A, B])
               for i, gpu in enumerate((A, B))}
    worker = records[A]
    # configuring went on (a usage error raised there would crash the worker, and xdist restart it,
    # over and over): the worker fails its collection with the error, marked for the controller
    assert worker.result.ret == pytest.ExitCode.USAGE_ERROR and not worker.ids and not worker.looped
    assert [USAGE_MARK in str(r["longrepr"]) for r in worker.failed_collection] == [True]
    replaying(monkeypatch, records)
    res = run_controller(pytester, *args, "-n", "2")
    stderr = res.stderr.str()
    assert res.ret == pytest.ExitCode.USAGE_ERROR, res.stdout.str()[-2000:] + stderr[-2000:]
    assert "replacing crashed worker" not in res.stdout.str()
    return stderr


def test_a_usage_error_a_worker_meets_is_the_runs_one_line_usage_error(pytester, monkeypatch):
    """Each worker checks the baseline against its own GPU and way of measuring: a mismatch is the
    controller's one-line usage error, not a worker that crashes and is restarted."""
    from fakes.benchjson import bench_entry, bench_json, write

    from fp4bench.gate.baseline import make_section

    data = bench_json([bench_entry("bench/test_fp4_gemm.py::test_dense[x]", [1e-3] * 10)], fingerprint=FAKE)
    data["fp4bench"] = make_section(FAKE, {}, {"l2": "cold", "timer": "cpu"}, clean=True)
    write(pytester.path / "cold.json", data)
    stderr = _usage_error_of_a_worker(pytester, monkeypatch, "--fp4-baseline-file", "cold.json")
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == ["ERROR: fp4bench baseline: the baseline was timed with l2='cold', this run with l2='hot': "
                      "not comparable (re-run with the baseline's setting, or make a new baseline)"], stderr


def test_a_worker_that_measures_on_another_gpu_than_assigned_stops_the_run(pytester, monkeypatch):
    monkeypatch.setenv("FP4BENCH_FAKE_SEEN", B)  # the worker pinned to A sees B: CUDA started before the pin
    stderr = _usage_error_of_a_worker(pytester, monkeypatch)
    errors = [line for line in stderr.splitlines() if line.startswith("ERROR:")]
    assert errors == [f"ERROR: fp4bench: worker gw0 was assigned GPU {A} but measures on {B}"], stderr
