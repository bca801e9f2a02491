"""Ctrl-C / SIGTERM and the worker processes (``run.worker``): a worker answering when the parent
is interrupted is killed at once (not left measuring until its case ends), the interrupt reaches
the caller as ``KeyboardInterrupt`` (not a failed case), a worker never dies of a terminal's Ctrl-C
itself (the parent decides), and a worker that dies at start without a word is named."""

from __future__ import annotations

import os
import signal
import sys
from types import SimpleNamespace

import pytest

from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.run.worker import protocol
from fp4bench.run.worker.pool import IsolatedRunner, Worker, WorkerLost, WorkerSpec, spawn
from fp4bench.workload.problems import GemmProblem
from fakes import inproc_worker as inproc

KILLED = -signal.SIGKILL


def _interrupt_at(n: int):
    """A ``Behaviour.kernel_s`` that delivers Ctrl-C to the parent during the n-th kernel call."""
    def kernel_s(process, t):
        if process.calls == n:
            raise KeyboardInterrupt
        return t
    return kernel_s


def _case() -> dict:
    return protocol.encode_case(inproc.BACKEND, GemmProblem(1, 64, 128), "default")


def test_an_interrupt_during_a_request_kills_the_worker_at_once():
    with inproc.workers(inproc.Behaviour(kernel_s=_interrupt_at(3))) as world:
        w = spawn(WorkerSpec(python=sys.executable, init={"device": "cpu", "plugins": [inproc.PLUGIN]}))
        with pytest.raises(KeyboardInterrupt):
            w.request({"op": "time", "case": _case(), "samples": 5})
        assert w.proc is None and w.interrupted
        assert [p.exit_status for p in world.processes] == [KILLED]
        w.close()  # nothing left to close: no wait on a process that is still measuring
        assert [p.requests for p in world.processes] == [["init", "time"]]


def test_an_isolated_case_interrupted_is_an_interrupt_not_a_failed_case():
    """``--fp4-isolate``: Ctrl-C during a case reaches pytest as Ctrl-C (the session ends as
    interrupted), never as a FAILED case or a lost worker, and the worker is gone already."""
    with inproc.workers(inproc.Behaviour(kernel_s=_interrupt_at(1))) as world:
        runner = IsolatedRunner(WorkerSpec(python=sys.executable, init={"device": "cpu", "plugins": [inproc.PLUGIN]}))
        backend = SimpleNamespace(name=inproc.BACKEND)  # all ``run`` reads of it: the name the worker loads
        with pytest.raises(KeyboardInterrupt):
            runner.run(backend, GemmProblem(1, 64, 128), DEFAULT_TACTIC)
        assert runner.worker.proc is None and world.processes[0].exit_status == KILLED
        runner.close()


def test_a_worker_that_dies_silently_at_start_is_named():
    """No line on stdout or stderr, only an exit status: the message names the interpreter, the
    status and that it wrote nothing."""
    crash = inproc.Behaviour(fault=lambda p, req: "crash" if req["op"] == "init" else None)
    with inproc.workers(crash):
        w = spawn(WorkerSpec(python=sys.executable), "side B's worker")
        with pytest.raises(WorkerLost) as err:
            w.start()
    assert str(err.value) == (f"side B's worker process died during start: killed by SIGABRT (abort); "
                              f"{sys.executable} wrote nothing (no line on stdout or stderr)")


@pytest.mark.e2e
def test_a_real_worker_ignores_the_terminals_ctrl_c_and_ends_when_its_stdin_closes(capfd):
    """Ctrl-C reaches every process of the terminal's group: the worker keeps answering (the
    parent decides what stops), writes no traceback, and exits 0 when the parent closes its stdin.
    One real process (imports torch): e2e."""
    w = Worker(WorkerSpec(python=sys.executable, init={"device": "cpu"}, timeout_s=60, start_timeout_s=60))
    pid = w.start()["pid"]
    os.kill(pid, signal.SIGINT)
    assert w.request({"op": "memory"})["status"] == "memory"  # alive after the SIGINT
    proc = w.proc
    w.close()
    assert proc.returncode == 0
    assert "KeyboardInterrupt" not in capfd.readouterr().err



class _Exited:
    """A ``subprocess.Popen`` stand-in for a process that was killed (SIGKILL) and has exited."""

    returncode = KILLED

    def wait(self, timeout=None):
        return self.returncode

    def kill(self):
        pass


def test_a_worker_reaped_by_another_thread_mid_request_gives_its_status_not_an_error():
    """Ctrl-C in a several-GPU run: the main thread kills and reaps a worker (``kill``) while the
    thread using it waits for its answer, which then ends in EOF and reaps again: that second reap
    gives the status of the process reaped (SIGKILL), never an internal error."""
    w = Worker(WorkerSpec(python=sys.executable))
    w.proc = _Exited()
    w.kill()  # the main thread
    assert w.proc is None
    assert w._reap() == KILLED  # the thread that waited for the answer
