"""``fp4bench ab --gpus``: the benchmarks spread over several (fake) GPUs, each benchmark's A and
B workers pinned to one GPU by UUID, merged into one report, JSON and exit code. On CPU the GPUs
are ``FP4BENCH_FAKE_GPUS``; the workers are in-process fakes (tests/fakes/inproc_worker.py) running
the ``ab-spin`` backend of tests/fakes/ab_env.py; each fake process keeps the environment it was
started with (its ``CUDA_VISIBLE_DEVICES`` pin), and one GPU's workers can be made to fail to start."""

from __future__ import annotations

import json
import sys

import pytest

from fp4bench.ab.multi import shares
from fp4bench.ab.run import AbRunner
from fp4bench.cli.ab import ab_main
from fp4bench.cli.command import EXIT_INCOMPLETE, EXIT_REGRESSION, EXIT_USAGE
from fakes.paths import FAKES as FAKES_PATH

FAKES = str(FAKES_PATH)
UUIDS = ("GPU-fake-0", "GPU-fake-1")
#: every worker is an in-process fake on a simulated clock (tests/conftest.py); the ab_env
#: backend reads each fake process's own environment (its pin included), as in a real worker
pytestmark = pytest.mark.usefixtures("sim_workers")


def _cli(*extra: str) -> list[str]:
    return ["--a", sys.executable, "--b", sys.executable, "--plugin", "ab_env", "--backends", "ab-spin",
            "--kinds", "dense", "--batches", "1", "--tp", "8", "--tactics", "all", "--device", "cpu",
            "--replicates", "2", "--rounds", "4", "--max-rounds", "4", "--round-samples", "4", "--floor", "20",
            "--gpus", "all", *extra]


@pytest.fixture
def host(monkeypatch, tmp_path):
    """Two fake GPUs; every worker loads ab_env (two tactics: two benchmarks per family)."""
    monkeypatch.setenv("FP4BENCH_FAKE_GPUS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_SPIN_S", "0.01")
    monkeypatch.setenv("FAKE_TACTICS", "t0,t1")
    return tmp_path


def _pins(world) -> dict[int, str]:
    """Each fake process's pid and the ``CUDA_VISIBLE_DEVICES`` it was started with."""
    return {p.pid: p.spec.env.get("CUDA_VISIBLE_DEVICES") for p in world.processes}


def test_one_gpu_slowed_fails_only_its_benchmarks_with_every_worker_pinned(host, capsys, sim_workers):
    """B slowed only on GPU 1 (the slowdown wrapper selected by the pinned UUID): GPU 1's family
    FAILs, GPU 0's passes, one report and JSON carry both, the exit code is the worst (1)."""
    out = host / "ab.json"
    code = ab_main(_cli("--b-plugin", "fp4bench.testing.slowdown", "--b-env", "FP4BENCH_SLOWDOWN=ab-spin=3",
                        "--b-env", "FP4BENCH_SLOWDOWN_GPUS=GPU-fake-1", "--verdict-json", str(out)))
    text = capsys.readouterr().out
    assert code == EXIT_REGRESSION, text
    js = json.loads(out.read_text())
    # every process of GPU i started with CUDA_VISIBLE_DEVICES = GPU i's UUID, both sides alike
    pins = _pins(sim_workers)
    procs = js["evidence"]["processes"]
    assert len(procs) == 8 and {p["process"][:3] for p in procs} == {"g0.", "g1."}
    for p in procs:
        assert pins[p["pid"]] == UUIDS[int(p["process"][1])], p
    assert {p["side"] for p in procs if p["process"].startswith("g1.")} == {"A", "B"}
    # one family (two tactics of one problem) per GPU, as the partition says
    rows = {r["name"]: r for r in js["benchmarks"]}
    assert len(rows) == 4 and {r["evidence"]["gpu_uuid"] for r in rows.values()} == set(UUIDS)
    by_gpu = {u: sorted(n for n, r in rows.items() if r["evidence"]["gpu_uuid"] == u) for u in UUIDS}
    assert [len(v) for v in by_gpu.values()] == [2, 2]
    for names in by_gpu.values():
        assert len({n.split("-t0-")[-1].split("-t1-")[-1] for n in names}) == 1  # one problem each
    assert {g["uuid"]: sorted(g["benchmarks"]) for g in js["evidence"]["gpus"]} == by_gpu
    assert {r["status"] for n, r in rows.items() if r["evidence"]["gpu_uuid"] == "GPU-fake-1"} == {"FAIL"}
    # GPU 0 ran A/A: judged and not failed (on a loaded 2-core machine the rule may stay AMBIGUOUS)
    assert {r["status"] for n, r in rows.items() if r["evidence"]["gpu_uuid"] == "GPU-fake-0"} <= {"PASS", "AMBIGUOUS"}
    assert all(r["kind"] == "timing" for r in rows.values())
    assert js["exit_code"] == 1 and js["counts"]["FAIL"] == 2
    assert [(g["index"], g["uuid"], g["measured"], g["error"]) for g in js["evidence"]["gpus"]] == [
        (0, "GPU-fake-0", 2, None), (1, "GPU-fake-1", 2, None)]
    assert all(g["telemetry"] == {"A": None, "B": None} for g in js["evidence"]["gpus"])  # CPU: none, per GPU too
    flat = " ".join(text.split())
    assert "GPU 0 GPU-fake-0: 2 benchmarks, wall" in flat and "GPU 1 GPU-fake-1: 2 benchmarks, wall" in flat
    summary = text.split("summary: ")[-1].splitlines()[0]
    assert "2 FAIL" in summary and summary.endswith("→ regression (exit 1)")


def test_the_partition_is_by_family_longest_first_and_the_same_every_time():
    """The shares depend only on the listing: a grouped family (the costliest) is placed first,
    each family's tactics stay together, and the listing order is kept inside a share."""
    from fp4bench.workload.problems import GemmProblem, GroupedProblem, Origin
    from fp4bench.run.worker.protocol import encode_case

    dense = [GemmProblem(1, 4096, 6144, Origin(role="a")), GemmProblem(1, 6144, 2048, Origin(role="b")),
             GemmProblem(1, 512, 512, Origin(role="c"))]
    grouped = GroupedProblem((1,) * 256, 4096, 6144, Origin(role="g"))
    cases = {}
    for prob in [grouped, *dense]:
        for t in ("t0", "t1"):
            cases[f"x-{t}-{prob.id}"] = {"case": encode_case("x", prob, t), "skip_reason": ""}
    by_side = {"A": cases, "B": cases}
    names = list(cases)
    got = shares(names, by_side, 2)
    assert got == shares(list(names), {"A": dict(cases), "B": dict(cases)}, 2)
    assert got[0] == names[:2]  # the grouped family alone on GPU 0: it costs more than the dense ones together
    assert got[1] == names[2:]
    three = shares(names, by_side, 3)
    assert sorted(n for s in three for n in s) == sorted(names)
    for s in three:
        assert len({n.split("-", 2)[2] for n in s}) * 2 == len(s)  # whole families only
        assert s == [n for n in names if n in s]


def test_a_gpu_whose_workers_cannot_start_leaves_its_share_unjudged(host, capsys, sim_workers):
    from fakes.inproc_worker import Behaviour

    dead = Behaviour(fault=lambda p, req: "error: simulated: GPU GPU-fake-1 is gone" if req["op"] == "init" else None)
    sim_workers.behaviour_of = lambda spec: dead if spec.env.get("CUDA_VISIBLE_DEVICES") == "GPU-fake-1" else Behaviour()
    out = host / "ab.json"
    code = ab_main(_cli("--verdict-json", str(out)))
    text = capsys.readouterr().out
    assert code == EXIT_INCOMPLETE, text
    js = json.loads(out.read_text())
    g0, g1 = js["evidence"]["gpus"]
    assert g0["error"] is None and g0["measured"] == 2
    assert g1["measured"] == 0 and "could not start" in g1["error"] and "GPU-fake-1 is gone" in g1["error"]
    lost = [r for r in js["benchmarks"] if r["kind"] == "GPU run crashed"]
    assert sorted(r["name"] for r in lost) == sorted(g1["benchmarks"]) and len(lost) == 2
    assert all(r["evidence"]["gpu_uuid"] == "GPU-fake-1" and r["status"] == "AMBIGUOUS" for r in lost)
    assert {(r["kind"], r["status"] != "FAIL") for r in js["benchmarks"] if r["evidence"]["gpu_uuid"] == "GPU-fake-0"} == {
        ("timing", True)}  # judged (PASS, or AMBIGUOUS on a loaded machine)
    flat = " ".join(text.split())
    assert "GPU 1 GPU-fake-1: 2 benchmarks, RUN CRASHED after 0 (RuntimeError: side" in flat
    assert "not judged: GPU 1 (GPU-fake-1) run crashed before it" in flat
    assert "2 not judged (2 GPU run crashed)" in flat and "→ incomplete (exit 3)" in flat


def test_a_gpu_run_that_raises_midway_keeps_what_it_finished(host, capsys, monkeypatch):
    """GPU 1's runner raises on its second benchmark: its first stays judged, its second is
    unjudged (exit 3), GPU 0 is untouched."""
    one = AbRunner._one

    def flaky(self, name, *a, **k):
        if self.prefix == "g1." and len(self.pairs) == 1:
            raise RuntimeError("simulated controller fault")
        return one(self, name, *a, **k)

    monkeypatch.setattr(AbRunner, "_one", flaky)
    out = host / "ab.json"
    assert ab_main(_cli("--verdict-json", str(out))) == EXIT_INCOMPLETE
    js = json.loads(out.read_text())
    g1 = js["evidence"]["gpus"][1]
    assert g1["measured"] == 1 and g1["error"] == "RuntimeError: simulated controller fault"
    rows = {r["name"]: r for r in js["benchmarks"]}
    first, second = g1["benchmarks"]
    assert rows[first]["kind"] == "timing" and rows[first]["status"] != "FAIL"  # judged
    assert rows[first]["evidence"]["gpu_uuid"] == "GPU-fake-1"
    assert rows[second]["kind"] == "GPU run crashed"
    assert sum(r["kind"] == "timing" for r in rows.values()) == 3
    assert "RUN CRASHED after 1 (RuntimeError: simulated controller fault)" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("extra, message", [
    (["--gpus", "2"], "--gpus: GPU 2 is not visible (2 visible: 0 GPU-fake-0, 1 GPU-fake-1)"),
    (["--gpus", "0,1,0"], "--gpus 0,1,0: asks for 3 GPUs, 2 are visible"),
    (["--gpus", "1,GPU-fake-1"], "names GPU 1 (GPU-fake-1) twice"),
    (["--gpus", "GPU-nope"], "--gpus: GPU 'GPU-nope' is not visible"),
    (["--gpus", "GPU-fake"], "--gpus: GPU 'GPU-fake' matches 2 GPUs"),
    (["--gpus", "0,,1"], "--gpus: expected all or comma-separated GPU indices / UUIDs"),
    (["--device", "cuda:1"], "--device cuda:1 with --gpus"),
    (["--a-env", "CUDA_VISIBLE_DEVICES=0"], "--a-env CUDA_VISIBLE_DEVICES with --gpus"),
])
def test_gpu_usage_errors_are_one_line_before_any_worker_starts(host, capsys, monkeypatch, extra, message):
    from fp4bench.run.worker.pool import Worker

    monkeypatch.setattr(Worker, "start", lambda self: pytest.fail("a worker started"))
    assert ab_main(_cli(*extra)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_no_visible_gpu_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.setenv("FP4BENCH_FAKE_GPUS", "0")
    assert ab_main(_cli()) == EXIT_USAGE
    assert "--gpus all: no GPU is visible" in capsys.readouterr().err


def test_only_runs_just_those_benchmarks_spread_over_the_gpus(host, capsys):
    """``--only`` with ``--gpus``: the named benchmarks and nothing else, none counted as not reached."""
    out = host / "ab.json"
    names = "ab-spin-t0-glm-5-b1-tp8-uniform-shared_down-m1n6144k256,ab-spin-t1-glm-5-b1-tp8-uniform-shared_gate_up-m1n512k6144"
    assert ab_main(_cli("--only", names, "--verdict-json", str(out))) == 0, capsys.readouterr().out
    js = json.loads(out.read_text())
    assert sorted(r["name"] for r in js["benchmarks"]) == sorted(names.split(","))
    assert js["evidence"]["not_reached"] == []


def test_ctrl_c_kills_every_gpus_workers_at_once_and_reports_none_lost(host, capsys, sim_workers):
    """Ctrl-C (SIGINT to the main thread) while a GPU 0 worker answers a timing round: every
    GPU's workers are killed (the request in flight ends at once, not at the round's end), what
    finished is judged, the rest is not reached, and no process is reported LOST or CRASHed."""
    from fakes.inproc_worker import KILLED, Behaviour, ctrl_c_until_killed

    hit: list[int] = []

    def ctrl_c(p, req):
        if req["op"] == "time" and p.spec.env.get("CUDA_VISIBLE_DEVICES") == UUIDS[0] and not hit \
                and p.requests.count("time") == 3:
            hit.append(p.pid)
            ctrl_c_until_killed(p)
        return None

    sim_workers.behaviour_of = lambda spec: Behaviour(fault=ctrl_c)
    out = host / "ab.json"
    code = ab_main(_cli("--verdict-json", str(out)))
    got = capsys.readouterr()
    text = got.out + got.err
    assert hit and code == EXIT_INCOMPLETE, text
    killed = {p.pid: p.exit_status for p in sim_workers.processes}
    assert killed[hit[0]] == KILLED, killed  # the one answering: killed, not waited for
    assert "LOST" not in text and "CRASH" not in text, text
    js = json.loads(out.read_text())
    assert js["evidence"]["not_reached"] and js["evidence"]["crashes"] == []
    assert all(b["evidence"]["crashes"] == [] for b in js["benchmarks"])
