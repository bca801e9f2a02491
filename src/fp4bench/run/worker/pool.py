"""The parent side: one worker process, watched; a lost worker costs only the case it ran.

``Worker.request`` answers a request or raises ``WorkerLost`` naming what happened: the process
died (signal or exit code: ``os.abort()`` is SIGABRT, a segfault SIGSEGV), it hung past the
per-request timeout (then it is killed), or it reported a poisoned CUDA context (then it exits
by itself). The next request starts a fresh process. ``IsolatedRunner`` has ``CaseRunner``'s
``run``/``drop_prepared``/``measurement`` interface, so the pytest plugin uses either without knowing which.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fp4bench
from fp4bench import clock
from fp4bench.run.case import measurement_of
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.worker import protocol

#: the directory holding the ``fp4bench`` package this parent runs: put first on the child's
#: PYTHONPATH so both sides of a comparison run the same harness code over their own stack
SOURCE_ROOT = str(Path(fp4bench.__file__).resolve().parent.parent)


#: how long a hung-up worker may take to exit before it is killed
EXIT_TIMEOUT_S = 30.0


class WorkerLost(RuntimeError):
    """The worker died, hung or poisoned its CUDA context while answering a request."""


def describe_exit(rc: int | None) -> str:
    if rc is None:
        return "still running"
    if rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = f"signal {-rc}"
        why = {"SIGABRT": "abort", "SIGSEGV": "segmentation fault", "SIGKILL": "killed",
               "SIGBUS": "bus error", "SIGFPE": "arithmetic fault"}.get(name, "signal")
        return f"killed by {name} ({why})"
    return f"exited with status {rc}"


@dataclass
class WorkerSpec:
    """How to start a worker: interpreter, extra environment, init message, timeouts."""

    python: str = sys.executable
    env: dict[str, str] = field(default_factory=dict)
    init: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 900.0  # per request: a case (JIT build included) that takes longer is a hang
    start_timeout_s: float = 300.0


class Worker:
    def __init__(self, spec: WorkerSpec, label: str = "worker"):
        self.spec, self.label = spec, label
        self.proc: subprocess.Popen | None = None
        self._reaped: subprocess.Popen | None = None  # the last process reaped
        self.ready: dict[str, Any] | None = None
        self.starts = 0  # processes started: one more after each lost worker
        self._lines: queue.Queue = queue.Queue()
        self._launched = False
        self.interrupted = False  # killed because the parent was interrupted mid-request

    @staticmethod
    def _reader(stream, lines: queue.Queue) -> None:
        """Forward one process's stdout lines, then None at EOF, into that process's own queue (a
        replaced process's reader must never hand its EOF to the replacement)."""
        for line in stream:
            lines.put(line)
        lines.put(None)  # EOF: the process is gone

    def launch(self) -> None:
        """Start the process without its handshake: it imports its libraries (not CUDA) and waits
        for ``init``. Launching several workers before starting any one overlaps their imports,
        while ``start`` still initializes them (CUDA contexts included) one at a time, in order."""
        env = dict(os.environ)
        env.update(self.spec.env)
        env["PYTHONPATH"] = os.pathsep.join([SOURCE_ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        try:
            self.proc = subprocess.Popen([self.spec.python, "-m", "fp4bench.run.worker"], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                         bufsize=1)
        except OSError as exc:
            raise WorkerLost(f"{self.label}: cannot start {self.spec.python}: {exc.strerror or exc}") from None
        self.starts += 1
        self._lines = queue.Queue()
        self._stderr = _StderrTail(self.proc.stderr)
        threading.Thread(target=self._reader, args=(self.proc.stdout, self._lines), daemon=True).start()
        self._launched = True  # launched, its handshake not yet made

    def start(self) -> dict[str, Any]:
        """Start the process (unless ``launch`` did) and check its handshake: the first line must
        be the worker's ``ready`` record. ``WorkerLost`` otherwise, in one line naming the
        interpreter and the child's own error (the last exception line it wrote to stderr, not its
        traceback)."""
        if not self._launched:
            self.launch()
        self._launched = False
        try:
            ready = self._exchange({"op": "init", **self.spec.init}, self.spec.start_timeout_s, "start")
        except WorkerLost as exc:
            why = self._stderr.error_line()
            said = f"said: {why}" if why else "wrote nothing (no line on stdout or stderr)"
            raise WorkerLost(f"{exc}; {self.spec.python} {said}") from None
        finally:
            self._stderr.forward()  # from now on the child's stderr (library output) is passed through
        if ready.get("type") == "error":
            self.close()
            raise WorkerLost(f"{self.label} ({self.spec.python}) could not start: {ready.get('error')}")
        if ready.get("type") != "ready":
            self.kill()
            raise WorkerLost(f"{self.label}: {self.spec.python} is not an fp4bench worker: its first line is "
                             f"{ready!r:.120}")
        self.ready = ready
        return ready

    def _send(self, line: str) -> None:
        """Write one request line to the process."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(line)
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # dead already: the reader reports EOF next

    def _receive(self, timeout: float) -> str | None:
        """The process's next line, None at its EOF; ``TimeoutError`` when none came within ``timeout`` s."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError from None

    def _exchange(self, msg: dict[str, Any], timeout: float, what: str) -> dict[str, Any]:
        try:
            self._send(protocol.dumps(msg))
            line = self._receive(timeout)
        except TimeoutError:
            self.kill()
            raise WorkerLost(f"hang: {self.label} gave no answer to {what} within {timeout:g} s; killed") from None
        except BaseException:  # Ctrl-C / SIGTERM (KeyboardInterrupt) while the worker works: stop it now
            self.interrupted = True
            self.kill()
            raise
        if line is None:  # stdout at EOF: the process is exiting
            rc = self._reap()
            raise WorkerLost(f"{self.label} process died during {what}: {describe_exit(rc)}")
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self.kill()
            raise WorkerLost(f"{self.label}: {self.spec.python} is not an fp4bench worker: it answered "
                             f"{line.strip()!r:.120} to {what}")
        return reply

    def request(self, msg: dict[str, Any], what: str = "") -> dict[str, Any]:
        if self.proc is None:
            self.start()
        reply = self._exchange(msg, self.spec.timeout_s, what or msg.get("op", "request"))
        if reply.get("fatal"):
            self.close()  # exits by itself after a fatal reply
        return reply

    def _reap(self, timeout: float = EXIT_TIMEOUT_S) -> int | None:
        """Wait for the process to exit, killing it after ``timeout`` s (never wait on one that
        does not); its exit status. Reaped already (another thread's ``kill`` on Ctrl-C while
        this one waited for its answer): that status."""
        proc = self.proc
        if proc is None:
            return self._reaped.returncode if self._reaped is not None else None
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = proc.wait()
        self.proc, self._reaped = None, proc
        return rc

    def kill(self) -> None:
        if self.proc is not None:
            self._reap(timeout=0)

    def stop(self) -> None:
        """Kill the process from another thread than the one using this worker (Ctrl-C in a
        several-GPU run): only the signal; the request it answers ends in EOF, and the owning
        thread reaps the process as for any death."""
        proc = self.proc
        if proc is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()

    def hang_up(self) -> None:
        """Close the process's stdin: it exits once it has answered what it was asked (``close``
        then waits for that)."""
        if self.proc is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> None:
        """Hang up and wait for the process to exit, killing it after ``timeout`` s."""
        if self.proc is None:
            return
        self.hang_up()
        self._reap(timeout)


def close_all(workers: Iterable[Worker], timeout: float = EXIT_TIMEOUT_S) -> None:
    """Close several workers at once: every one hung up first, so their exits (CUDA contexts torn
    down, libraries unloaded) overlap, then each waited for; one still running ``timeout`` s after
    its hang-up is killed."""
    workers = list(workers)
    for w in workers:
        w.hang_up()
    deadline = clock.now() + timeout
    for w in workers:
        w.close(max(0.0, deadline - clock.now()))


#: what ``spawn`` builds: the real subprocess ``Worker`` unless ``spawning`` put another in
_factory: Callable[[WorkerSpec, str], Worker] = Worker


def spawn(spec: WorkerSpec, label: str = "worker") -> Worker:
    """A new (not yet started) worker for ``spec``: every worker of the package (``fp4bench ab``,
    ``fp4bench units``, ``--fp4-isolate``) is made here."""
    return _factory(spec, label)


@contextlib.contextmanager
def spawning(factory: Callable[[WorkerSpec, str], Worker]) -> Iterator[Callable[[WorkerSpec, str], Worker]]:
    """Make every worker with ``factory(spec, label)`` in the block (tests: an in-process worker
    answering the same protocol), then the one before again."""
    global _factory
    before, _factory = _factory, factory
    try:
        yield factory
    finally:
        _factory = before


class _StderrTail:
    """A child's stderr: kept (the last lines) until ``forward``, then passed to ours."""

    def __init__(self, stream) -> None:
        self.lines: list[str] = []
        self._forward = threading.Event()
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            if self._forward.is_set():
                sys.stderr.write(line)
            else:
                self.lines = [*self.lines[-199:], line.rstrip("\n")]

    def forward(self) -> None:
        self._forward.set()

    def error_line(self) -> str:
        """The exception line of the child's last traceback (``ModuleNotFoundError: No module
        named 'torch'``), else its last non-empty line ('' if it wrote none)."""
        self._thread.join(timeout=5)  # the child is gone: read what it wrote to the end
        lines = [ln.strip() for ln in self.lines if ln.strip()]
        for ln in reversed(lines):
            if _EXCEPTION_LINE.match(ln):
                return ln[:300]
        return lines[-1][:300] if lines else ""


_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b")


class IsolatedRunner:
    """``CaseRunner``'s interface over a worker process (``pytest --fp4-isolate``)."""

    def __init__(self, spec: WorkerSpec):
        self.worker = spawn(spec)

    def measurement(self) -> dict[str, str]:
        """What the worker's ``CaseRunner`` reports, from the settings it is started with (a
        worker without a device named counts as a CPU run)."""
        s = RunnerSettings.from_init(self.worker.spec.init)
        return measurement_of((s.device or "cpu").split(":")[0], s.cold_l2, s.timing.mode, s.min_copies)

    def run(self, backend, problem, tactic, *, measure: bool = True):
        from fp4bench.run.case import FAILED, CaseResult

        case = protocol.encode_case(backend.name, problem, tactic.label)
        try:
            reply = self.worker.request({"op": "run", "case": case, "measure": measure}, f"case {problem.id}")
        except WorkerLost as exc:
            return CaseResult(FAILED, str(exc), extra_info={"isolation": str(exc)})
        return protocol.decode_result(reply)

    def drop_prepared(self) -> None:
        self._drop(release=False)

    def release(self) -> None:
        """``CaseRunner.release`` in the worker: every cached operand set back to the driver."""
        self._drop(release=True)

    def new_placement(self, index: int) -> None:
        """``CaseRunner.release`` then ``CaseRunner.new_placement(index)`` in the worker."""
        self._drop(release=True, placement=index)

    def _drop(self, *, release: bool, placement: int | None = None) -> None:
        if self.worker.proc is not None:
            try:
                self.worker.request({"op": "drop", "release": release, "placement": placement})
            except WorkerLost:
                pass  # the next run starts a fresh worker anyway

    def close(self) -> None:
        self.worker.close()
