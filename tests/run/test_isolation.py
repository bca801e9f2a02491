"""Cases in worker processes (``fp4bench.run.worker``): abort, hang and a poisoned CUDA context each
cost only their own case; the run continues with a fresh worker and the line log keeps every
finished case, also when the run itself is killed with SIGKILL."""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import threading

import pytest

from fakes.benchjson import bench_entry
from fp4bench import clock
from fakes.wrapped import unwrapped
from fp4bench.cli import compare as cli_compare
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.run.case import FAILED, CaseResult
from fp4bench.gate.baseline import make_section
from fp4bench.run.linelog import LineLog, read_line_log
from fp4bench.measure.timing import TimingResult
from fp4bench.measure.verify import CheckResult
from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem, Origin
from fp4bench.testing import faults
from fp4bench.run.worker import protocol
from fp4bench.run.worker.interpreter import interpreter
from fp4bench.run.worker.pool import IsolatedRunner, Worker, WorkerLost, WorkerSpec, close_all, describe_exit, spawn
from fakes import inproc_worker as inproc
from fakes.paths import BENCH_FILE as BENCH, FAKES
from fakes.pytest_run import QUIET

pytest_plugins = ["pytester"]
FAKE_CHILD = FAKES / "fake_worker.py"
BENCH_FILE = BENCH.read_text()


# --- protocol ---------------------------------------------------------------------------------

@pytest.mark.parametrize("problem", [
    GemmProblem(7, 64, 128, Origin("glm-5", 7, 8, "zipf:1.2", "down")),
    GroupedProblem((3, 0, 5), 64, 128, Origin("glm-5", 8, 1, "uniform", "gate_up")),
    MoEProblem(32, 16, 4, 2, ((0, 3), (1, 2)), Origin("mixtral", 2, 1, "uniform", "moe")),
])
def test_problem_round_trips_through_json(problem):
    back = protocol.decode_problem(json.loads(json.dumps(protocol.encode_problem(problem))))
    assert back == problem and back.id == problem.id


def test_result_round_trip_keeps_samples_and_turns_nan_into_none_and_back():
    res = CaseResult("measured", "", check=CheckResult("ok", "", 1e-3, 0.5, float("nan")),
                     timing=TimingResult([1e-5, 2e-5, 3e-5], "cpu perf_counter", 4, 1, "ci", float("inf")),
                     extra_info={"kernels": ["k"], "sqnr_db": float("nan")})
    wire = json.loads(protocol.dumps(protocol.encode_result(res)))
    back = protocol.decode_result(wire)
    assert back.timing.samples_s == [1e-5, 2e-5, 3e-5] and back.timing.rel_ci == float("inf")
    assert back.check.ok and back.check.max_rel_err == 1e-3 and back.check.sqnr_db != back.check.sqnr_db
    assert back.extra_info == {"kernels": ["k"], "sqnr_db": None}


def test_describe_exit_names_the_signal():
    assert describe_exit(-signal.SIGABRT) == "killed by SIGABRT (abort)"
    assert describe_exit(-signal.SIGSEGV) == "killed by SIGSEGV (segmentation fault)"
    assert describe_exit(3) == "exited with status 3"


def test_interpreter_accepts_a_venv_dir_and_rejects_other_things(tmp_path):
    venv = tmp_path / "v"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    assert interpreter(str(venv)) == str(venv / "bin" / "python")
    with pytest.raises(ValueError, match="not a virtual environment"):
        interpreter(str(tmp_path))
    with pytest.raises(ValueError, match="neither a Python interpreter"):
        interpreter("no-such-python-anywhere")


class _Proc:
    """A ``Popen`` stand-in recording, in one shared list, its stdin's close, its waits and kills;
    it exits ``exit_s`` simulated seconds after its stdin is closed, or never (``None``) until killed."""

    def __init__(self, n: int, events: list, exit_s: float | None):
        self.n, self.events, self.exit_s = n, events, exit_s
        self.exit_at: float | None = None
        self.stdin = self

    def close(self) -> None:
        if self.exit_at is None:  # a closed file stays closed
            self.events.append(("close", self.n))
            self.exit_at = clock.now() + self.exit_s if self.exit_s is not None else math.inf

    def wait(self, timeout: float | None = None) -> int:
        self.events.append(("wait", self.n, timeout))
        left = self.exit_at - clock.now() if self.exit_at is not None else math.inf
        if timeout is not None and left > timeout:
            clock.advance(timeout)
            raise subprocess.TimeoutExpired("worker", timeout)
        clock.advance(max(0.0, left))
        return -signal.SIGKILL if self.exit_s is None else 0

    def kill(self) -> None:
        self.events.append(("kill", self.n))
        self.exit_at = clock.now()
        self.exit_s = None


def test_close_all_hangs_up_every_worker_before_waiting_and_kills_one_past_the_shared_deadline():
    """Exits overlap: every stdin closed first; each then waits for what is left of the 30 s after
    the hang-up (a worker that took 20 s leaves the next 10 s), and one still running is killed."""
    events: list = []
    workers = []
    for n, exit_s in enumerate((20.0, None, 25.0, 1.0)):
        w = Worker(WorkerSpec(python=sys.executable), f"w{n}")
        w.proc = _Proc(n, events, exit_s)
        workers.append(w)
    with clock.using(clock.SimClock()):
        close_all(workers, timeout=30.0)
        assert clock.now() == 30.0
    assert events == [("close", 0), ("close", 1), ("close", 2), ("close", 3),
                      ("wait", 0, 30.0), ("wait", 1, 10.0), ("kill", 1), ("wait", 1, None),
                      ("wait", 2, 0.0), ("wait", 3, 0.0)]
    assert all(w.proc is None for w in workers)


def test_a_worker_ends_after_its_exit_handlers_without_the_interpreters_teardown(tmp_path):
    """``quick_exit`` (how ``python -m fp4bench.run.worker`` ends): the exit status, the exit
    handlers and buffered output kept; the module teardown (a ``__del__`` of a global, torch's
    0.7 s) skipped. A fresh interpreter without torch."""
    from pathlib import Path

    import fp4bench

    log = tmp_path / "log"
    code = ("import atexit, sys\nfrom fp4bench.run.worker.quick_exit import quick_exit\n"
            f"LOG = {str(log)!r}\n"
            "def note(what):\n    with open(LOG, 'a') as f:\n        f.write(what + '\\n')\n"
            "class Global:\n    def __del__(self, open=open, log=LOG):\n"
            "        with open(log, 'a') as f:\n            f.write('teardown\\n')\n"
            "kept = Global()\natexit.register(note, 'exit handler')\n"
            "sys.stdout.write('reply, not yet flushed')\nsys.stderr.write('said on stderr')\nquick_exit(3)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(Path(fp4bench.__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"})
    assert (res.returncode, res.stdout, res.stderr) == (3, "reply, not yet flushed", "said on stderr")
    assert log.read_text() == "exit handler\n"


# --- parent side, against the fake child ------------------------------------------------------

@pytest.fixture
def fake_python(tmp_path) -> str:
    """An "interpreter" that runs the fake child whatever arguments it is given."""
    script = tmp_path / "fake_python.sh"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_CHILD}"\n')
    script.chmod(0o755)
    return str(script)


def _fake_worker(python: str, timeout: float = 2.0) -> Worker:
    return Worker(WorkerSpec(python=python, timeout_s=timeout, start_timeout_s=30))


def _req(backend: str) -> dict:
    return {"op": "run", "case": protocol.encode_case(backend, GemmProblem(1, 8, 16), "default")}


@pytest.mark.e2e
@pytest.mark.parametrize(("fault", "expect"), [
    ("abort", "process died during run: killed by SIGABRT (abort)"),
    ("hang", "hang: worker gave no answer to run within 1 s; killed"),
])
def test_a_dead_or_hung_worker_costs_one_request_and_the_next_gets_a_fresh_process(fake_python, fault, expect):
    w = _fake_worker(fake_python, timeout=1.0)
    first = w.request(_req("good"))["pid"]
    with pytest.raises(WorkerLost) as err:
        w.request(_req(fault))
    assert str(err.value).endswith(expect) and w.proc is None
    again = w.request(_req("good"))
    assert again["status"] == "measured" and again["pid"] != first and w.starts == 2
    w.close()


@pytest.mark.e2e
def test_a_poisoned_context_reply_is_returned_and_the_worker_replaced(fake_python):
    w = _fake_worker(fake_python)
    first = w.request(_req("good"))["pid"]
    reply = w.request(_req("sticky"))
    assert reply["status"] == "failed" and reply["fatal"] and w.proc is None
    assert w.request(_req("good"))["pid"] != first
    w.close()


@pytest.mark.e2e
def test_a_late_eof_of_the_replaced_worker_does_not_reach_its_replacement(fake_python):
    """The poisoned worker's stdout reaches EOF only after its replacement started (a child of it
    held the pipe): that EOF belongs to the old process, not to the new one's requests."""
    w = _fake_worker(fake_python)
    before = set(threading.enumerate())
    first = w.request(_req("good"))["pid"]
    old_readers = set(threading.enumerate()) - before  # the first process's stdout and stderr readers
    assert old_readers
    assert w.request(_req("sticky-linger"))["fatal"] and w.proc is None
    second = w.request(_req("good"))["pid"]
    for t in old_readers:  # the old pipe's EOF arrives meanwhile: its readers end after reading it
        t.join(timeout=30)
        assert not t.is_alive()
    assert second != first and w.request(_req("good"))["pid"] == second and w.starts == 2
    w.close()


@pytest.mark.e2e
def test_isolated_runner_turns_a_lost_worker_into_a_named_failed_case(fake_python):
    runner = IsolatedRunner(_fake_worker(fake_python).spec)
    res = runner.run(faults.Abort(), GemmProblem(1, 8, 16), DEFAULT_TACTIC)
    assert res.status == FAILED and "killed by SIGABRT (abort)" in res.reason
    assert res.extra_info["isolation"] == res.reason
    runner.close()


# --- the real child and parent in one process (fakes.inproc_worker) -------------------------------

def _sim_req(backend: str = "torch-bf16") -> dict:
    return {"op": "run", "case": protocol.encode_case(backend, GemmProblem(1, 8, 16), "default"), "measure": False}


def test_spawn_makes_a_subprocess_worker_unless_spawning_says_otherwise():
    spec = WorkerSpec(python=sys.executable)
    assert type(spawn(spec)) is Worker
    with inproc.workers():
        w = spawn(spec, "x")
        assert isinstance(w, inproc.InprocWorker) and w.label == "x"
    assert type(spawn(spec)) is Worker


@pytest.mark.parametrize(("fault", "expect"), [
    ("fault-abort", "process died during run: killed by SIGABRT (abort)"),
    ("fault-hang", "hang: worker gave no answer to run within 5 s; killed"),
])
def test_in_process_a_dead_or_hung_worker_costs_one_request_and_the_next_gets_a_fresh_process(fault, expect):
    """The real child's answer to a fault backend, through the real parent, on the simulated clock:
    the hang costs exactly the timeout."""
    with inproc.workers() as world:
        w = spawn(WorkerSpec(python=sys.executable, init={"device": "cpu", "plugins": ["fp4bench.testing.faults"]},
                             timeout_s=5.0))
        assert w.request(_sim_req())["status"] == "measured"
        t = world.clock.now()
        with pytest.raises(WorkerLost) as err:
            w.request(_sim_req(fault))
        assert str(err.value).endswith(expect) and w.proc is None
        assert world.clock.now() - t == pytest.approx(5.0 if fault == "fault-hang" else 0.0)
        assert w.request(_sim_req())["status"] == "measured" and w.starts == 2
        assert [p.exit_status for p in world.processes] == [-6 if fault == "fault-abort" else -9, None]
        w.close()


def test_in_process_a_poisoned_context_reply_is_returned_and_the_worker_replaced():
    """fault-sticky raises what a poisoned CUDA context raises: the real child answers fatal and
    exits; a ``Behaviour.fault`` of "fatal" does the same for any backend."""
    fatal_runs = inproc.Behaviour(fault=lambda p, req: "fatal" if req["op"] == "run" else None)
    with inproc.workers(lambda spec: fatal_runs if spec.env.get("FATAL") else inproc.Behaviour()) as world:
        for env, backend in (({}, "fault-sticky"), ({"FATAL": "1"}, "torch-bf16")):
            w = spawn(WorkerSpec(python=sys.executable, env=env,
                                 init={"device": "cpu", "plugins": ["fp4bench.testing.faults"]}))
            reply = w.request(_sim_req(backend))
            assert reply["status"] == "failed" and reply["fatal"] and "CUDA context poisoned" in reply["reason"]
            assert w.proc is None and world.processes[-1].exit_status == 3


def test_in_process_a_child_that_cannot_start_is_named(tmp_path):
    with inproc.workers():
        with pytest.raises(WorkerLost, match=r"^worker: cannot start .*/no-python: "):
            spawn(WorkerSpec(python=str(tmp_path / "no-python"))).start()
        w = spawn(WorkerSpec(python=sys.executable, init={"device": "cpu", "plugins": ["no_such_plugin_module"]}),
                  "side B's worker")
        with pytest.raises(WorkerLost, match=r"side B's worker \(.*\) could not start: ValueError: --fp4-plugin: "
                                             r"cannot import backend module 'no_such_plugin_module'"):
            w.start()


def test_in_process_kernels_take_the_simulated_time_their_behaviour_says():
    """One fake process per behaviour; a 'time' round of 5 samples reports exactly the asked time."""
    case = protocol.encode_case(inproc.BACKEND, GemmProblem(1, 64, 128), "default")
    with inproc.workers({"A": inproc.Behaviour(call_s=2e-3), "B": inproc.Behaviour(call_s=2e-3, slowdown=0.03)}):
        got = {}
        for side in "AB":
            w = spawn(WorkerSpec(python=sys.executable, env={inproc.SIDE_ENV: side},
                                 init={"device": "cpu", "plugins": [inproc.PLUGIN]}))
            assert w.request({"op": "check", "case": case})["status"] == "measured"
            got[side] = w.request({"op": "time", "case": case, "samples": 5})["timing"]["samples_s"]
            w.close()
    assert got["A"] == pytest.approx([2e-3] * 5, rel=1e-9)
    assert got["B"] == pytest.approx([2.06e-3] * 5, rel=1e-9)


# --- the real worker through pytest (abort, hang, simulated sticky in one sweep) --------------

@pytest.mark.e2e
def test_isolated_run_loses_only_the_faulty_case(pytester, isolated_registry):
    """A real worker process (the pytest run itself in this process): torch-bf16 on the problem
    measures, then an abort (SIGABRT) kills the worker in the middle of the fault-abort case:
    the bf16 result is there and the line log names the abort. One worker start (torch imported
    once); the fresh worker after a lost one, the hang and the poisoned context: the in-process
    test below and the fake-child tests above."""
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    res = pytester.runpytest(
        "-p", "fp4bench.plugin", *QUIET, "-rA", "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-kinds", "dense",
        "--fp4-time-budget", "0.02", "--fp4-min-samples", "3", "--fp4-plugin", "fp4bench.testing.faults",
        "--fp4-backends", "torch-bf16,fault-abort", "--fp4-isolate", "--fp4-log", "run.lines.jsonl",
        "-k", "shared_down")
    res.assert_outcomes(passed=1, failed=1)
    out = unwrapped(res.stdout.str())
    assert "fault-abort [default] on glm-5-b1-tp8-uniform-shared_down-m1n6144k256: worker process died " \
           "during case glm-5-b1-tp8-uniform-shared_down-m1n6144k256: killed by SIGABRT (abort)" in out
    logged = read_line_log(pytester.path / "run.lines.jsonl")
    assert logged.complete and not logged.not_reached and len(logged.outcomes) == 2
    (bf16,) = [n for n in logged.run.benchmarks if "torch-bf16" in n]
    assert len(logged.run.benchmarks[bf16].samples) >= 3
    # the failure's logged reason is its own first message line, not the traceback's last line
    (reason,) = [json.loads(line)["reason"] for line in (pytester.path / "run.lines.jsonl").read_text().splitlines()
                 if json.loads(line).get("outcome") == "failed"]
    assert "killed by SIGABRT (abort)" in reason


ISOLATED = ["-p", "fp4bench.plugin", *QUIET, "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-kinds", "dense",
            "--fp4-plugin", "fakes.pytest_run", "--fp4-backends", "steady-spin", "--fp4-time-budget", "0.05",
            "--fp4-min-samples", "5", "--fp4-isolate"]


def test_isolated_run_in_process_loses_only_the_faulty_cases(pytester, sim_workers, isolated_registry):
    """The same sweep as the end-to-end test above, in-process: the plugin's isolated runner, the
    real parent and child of the worker protocol; the hang costs 6 simulated seconds."""
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    res = pytester.runpytest(
        "-p", "fp4bench.plugin", *QUIET, "-rA", "--fp4-batches", "1", "--fp4-tp", "8", "--fp4-kinds", "dense",
        "--fp4-time-budget", "0.02", "--fp4-min-samples", "3", "--fp4-plugin", "fp4bench.testing.faults",
        "--fp4-plugin", "fakes.pytest_run",
        "--fp4-backends", "steady-spin,fault-abort,fault-hang,fault-sticky", "--fp4-isolate",
        "--fp4-case-timeout", "6", "-k", "steady-spin or shared_down")
    res.assert_outcomes(passed=2, failed=3)
    out = unwrapped(res.stdout.str())
    assert "fault-abort [default] on glm-5-b1-tp8-uniform-shared_down-m1n6144k256: worker process died " \
           "during case glm-5-b1-tp8-uniform-shared_down-m1n6144k256: killed by SIGABRT (abort)" in out
    assert "hang: worker gave no answer to case glm-5-b1-tp8-uniform-shared_down-m1n6144k256 within 6 s" in out
    assert f"CUDA context poisoned: raised RuntimeError: {faults.SIMULATED_STICKY}" in out
    lost = sorted(p.exit_status for p in sim_workers.processes if p.exit_status not in (None, 0))
    assert lost == [-9, -6, 3]  # killed after the hang, aborted, exited after the poisoned context


def test_isolation_saves_a_candidate_and_gates_against_it(pytester, sim_workers, isolated_registry):
    """An isolated run saves a candidate with what the worker measured with; an isolated run gates
    against it (both ways of naming the baseline) on the worker's samples: 1 ms a call on the
    simulated clock, so the unchanged run passes."""
    from fp4bench.gate.baseline import load_baseline

    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    res = pytester.runpytest(*ISOLATED, "--fp4-save-baseline", "base.json")
    assert res.ret == 0, res.stdout.str()
    base = load_baseline(pytester.path / "base.json")
    assert len(base.benchmarks) == 2 and base.clean is True
    assert base.sweep["l2"] == "hot" and base.sweep["timer"] == "cpu"  # what the worker measured with
    for gate in (["--fp4-baseline-file", "base.json"], ["--benchmark-compare=base.json"]):
        res = pytester.runpytest(*ISOLATED, *gate)
        out = res.stdout.str()
        assert "INTERNALERROR" not in out and "Traceback" not in out
        assert "fp4bench verdict vs base.json" in out and "over 2 timed benchmarks" in out, out
        assert res.ret == 0 and re.search(r"^summary: .*\(exit 0\)$", out, re.M), out


# --- SIGKILL part-way: the line log keeps every finished case ---------------------------------

def test_sigkill_halfway_leaves_a_readable_partial_log_that_compare_marks_partial(pytester, tmp_path, capsys,
                                                                                 isolated_registry):
    """SIGKILL stops a process between two instructions, and what it leaves of a file is what its
    writes had handed to the OS by then: the bytes another handle reads at that moment. The kill is
    taken here as exactly that: in the middle of the fourth case (after its setup, before its
    call), a copy of the log's bytes read from another handle, and the run stops. The run is in
    this process, on the simulated clock (steady-spin: 1 ms a call)."""
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    live, log = pytester.path / "run.lines.jsonl", tmp_path / "killed.lines.jsonl"

    class KillMidCase:
        @pytest.hookimpl(tryfirst=True)
        def pytest_runtest_call(self, item):
            if not log.exists() and live.read_text().count('"type":"case"') >= 3:
                log.write_bytes(live.read_bytes())  # what a SIGKILL now would leave
                item.session.shouldstop = "killed"

    with clock.using(clock.SimClock()):
        pytester.runpytest("-p", "fp4bench.plugin", *QUIET, "--fp4-batches", "1,2,3,4,5,6", "--fp4-tp", "8",
                           "--fp4-kinds", "dense", "--fp4-plugin", "fakes.pytest_run", "--fp4-backends", "steady-spin",
                           "--fp4-time-budget", "0.02", "--fp4-min-samples", "3", "--fp4-log", str(live),
                           plugins=[KillMidCase()])
    assert log.exists(), "the run finished before it could be killed"
    logged = read_line_log(log)
    assert not logged.complete and logged.partial
    n_done = len(logged.outcomes)
    assert 3 <= n_done < len(logged.planned) == 12
    assert len(logged.run.benchmarks) == n_done  # every finished case has its samples
    # a baseline holding every planned benchmark: the finished ones with their own samples
    fp = logged.run.fingerprint
    entries = [bench_entry(n, logged.run.benchmarks[n].samples if n in logged.run.benchmarks else [1e-3] * 5)
               for n in logged.planned]
    base = tmp_path / "base.json"
    base.write_text(json.dumps({"benchmarks": entries, "fp4bench": make_section(fp, {}, {})}))
    capsys.readouterr()
    assert cli_compare.compare_main([str(base), str(log)]) == 3  # partial: incomplete
    out = capsys.readouterr().out
    assert "MISSING" not in out.split("NOT REACHED")[0]
    assert f"NOT REACHED ({12 - n_done}, {12 - n_done} of them in the baseline)" in out
    assert f"PARTIAL (the run ended without its end line: killed?); {n_done} of 12 planned cases logged" in out
    assert "a partial run cannot pass the gate" in out
    assert cli_compare.compare_main([str(base), str(log), "--allow-missing"]) == 0


def test_a_line_cut_by_the_kill_is_dropped_with_a_note_and_other_garbage_is_an_error(tmp_path):
    from fakes.benchjson import H200
    from fp4bench.gate.baseline import BaselineError

    path = tmp_path / "x.lines.jsonl"
    log = LineLog(path)
    log.header(H200, {}, ["a::t[1]", "a::t[2]"])
    log.case("a::t[1]", "passed", [1e-5, 1.1e-5, 0.9e-5])
    log.close()
    with open(path, "a") as f:
        f.write('{"type":"case","fullname":"a::t[2]","outc')
    logged = read_line_log(path)
    assert list(logged.run.benchmarks) == ["a::t[1]"] and logged.not_reached == ["a::t[2]"]
    assert logged.notes == ["last line 3 is cut off (killed mid-write); ignored"]
    with open(path, "a") as f:
        f.write('\n{"type":"end"}\n')
    with pytest.raises(BaselineError, match="line 3 is not JSON"):
        read_line_log(path)


def test_a_save_that_writes_no_file_is_not_a_pass(pytester, monkeypatch, isolated_registry):
    """pytest-benchmark disables itself inside what looks like a pytest-xdist worker: the cases run,
    no results file comes of ``--fp4-save-baseline``, and the run says so and exits 3 (incomplete)."""
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "1")
    with clock.using(clock.SimClock()):
        res = pytester.runpytest(*ISOLATED[:-1], "--fp4-save-baseline", "base.json")
    assert not (pytester.path / "base.json").exists()
    assert res.ret == 3, res.stdout.str()
    assert "cases were collected but pytest-benchmark wrote no results file" in res.stdout.str()
