"""In-process fake workers on the simulated clock: the real worker protocol without a process.

Every worker fp4bench starts (``fp4bench ab``'s ``AbRunner``, ``fp4bench units``, ``pytest
--fp4-isolate``) is made by ``fp4bench.run.worker.pool.spawn``. Inside ``workers(...)`` that makes
an ``InprocWorker``: the real parent class ``Worker`` (handshake checks, hang / death / poisoned
context handling, messages) over a transport that hands each JSON line to the real child side
(``run.worker.child.open_child`` / ``answer``: ``Child``, its ``CaseRunner``, the real timing code)
in this process. Nothing is spawned and no torch is imported again, and the clock is a
``SimClock``: a kernel of the ``sim-bf16`` backend (this module is its ``--fp4-plugin`` /
``plugins=`` module) writes the correct bf16 product and then ``clock.spin``s its simulated
time, so a run's samples are exactly what the ``Behaviour`` of each process says, whatever load
the machine is under. Each fake process sees its spec's environment in ``os.environ`` and its
own backend registry while it answers (started, as a new process's, from the built-ins only,
whatever this test process has registered), so per-side plugins and environment
variables (``--b-plugin fp4bench.testing.slowdown``, ``FP4BENCH_TIMER``, ``fakes.ab_env``'s
``FAKE_*`` variables) act as in a real worker of that side. Requests are answered one at a time
(a lock), so the worker threads of a several-GPU run take turns.

``ab`` runs::

    from fakes import inproc_worker as inproc

    SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",),
                         backends=(inproc.BACKEND,))
    cfg = AbConfig(sweep=SWEEP, device="cpu", plugins=(inproc.PLUGIN,), ...)
    a = Side(sys.executable, {inproc.SIDE_ENV: "A"})
    b = Side(sys.executable, {inproc.SIDE_ENV: "B"})

    # A/A: both sides the same 1 ms kernel, 1 % noise per call, 2 % per process
    with inproc.workers(inproc.Behaviour(call_s=1e-3, call_sd=0.01, process_sd=0.02)) as world:
        run = AbRunner(a, b, cfg, progress=lambda line: None).run()

    # +3 % on side B, and a GPU memory report that lets only two processes reside at a time
    mem = {"peak": 30 << 30, "free": 40 << 30, "total": 140 << 30}  # bytes
    sides = {"A": inproc.Behaviour(memory=mem), "B": inproc.Behaviour(slowdown=0.03, memory=mem)}
    with inproc.workers(sides) as world:
        run = AbRunner(a, b, cfg).run()
    world.clock.now()       # the simulated seconds the run took (starts, checks, rounds)
    world.processes         # every fake process started: side, behaviour, calls, whether it died

``workers(behaviour)`` takes one ``Behaviour`` for every process, a dict keyed by the value of
``$FAKE_SIDE`` in the worker's environment (``SIDE_ENV``; ``None`` keys a worker without it), or a
callable ``behaviour(spec) -> Behaviour`` (units: key on ``spec.env["CUDA_VISIBLE_DEVICES"]``).

Faults: ``Behaviour.fault(process, request)`` is asked before every request (``init`` included)
and returns None or one of ``"crash"`` (the process dies, as by SIGABRT: the parent sees EOF),
``"hang"`` (no answer: the simulated clock moves to the request's timeout, the parent kills it;
so does any request whose simulated time would pass its timeout, ``fault-hang`` included),
``"fatal"`` (the reply reports a poisoned CUDA context and the process exits), ``"error"`` or
``"error: why"`` (init only: the child cannot start and says ``RuntimeError: why``).
``Behaviour.kernel_s(process, call_s)`` may replace a call's time (drift, a slow benchmark) and
may call ``process.crash()`` / ``process.hang()`` to die or hang in the middle of a timed call;
``at_call(n, "crash", once=True)`` is the common case: the first process to make its n-th kernel
call dies. ``os.abort()`` in a fake process (``fault-abort``) kills that process only. Which GPU
a process was pinned to is in ``process.spec.env["CUDA_VISIBLE_DEVICES"]``.

In a test, the ``sim_workers`` fixture (tests/conftest.py) wraps the whole test in ``workers()``
with tests/fakes importable (``plugins=("ab_env",)``) and yields the ``World``; set
``world.behaviour_of`` to change what the processes started next do.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from fp4bench import clock
from fp4bench.backends import registry
from fp4bench.backends.base import Availability, Prepared, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16
from fp4bench.run.worker import protocol
from fp4bench.run.worker.child import answer, open_child
from fp4bench.run.worker.pool import EXIT_TIMEOUT_S, Worker, WorkerLost, WorkerSpec, spawning

PLUGIN = __name__
BACKEND = "sim-bf16"
SIDE_ENV = "FAKE_SIDE"
#: the exit status a crashed fake process reports (the parent names it "killed by SIGABRT (abort)")
ABORTED = -6
KILLED = -9


@dataclass
class Behaviour:
    """What one fake worker process does. A kernel call takes ``call_s`` x (1 + ``slowdown``) x
    the process's factor (log-normal, sd ``process_sd``, drawn at its start: placement, context)
    x a per-call log-normal factor (sd ``call_sd``) simulated seconds."""

    call_s: float = 1e-3
    slowdown: float = 0.0
    process_sd: float = 0.0
    call_sd: float = 0.0
    #: simulated seconds a start takes (imports, CUDA context) and a check (prepare, reference)
    start_s: float = 1.0
    check_s: float = 0.0
    version: str = "1.0"
    tactics: tuple[str, ...] = ("default",)
    #: the ``device_memory`` figures a ``memory`` request (and an out-of-memory reply) gets
    #: ({"peak", "free", "total"} bytes), a callable ``memory(process)`` giving them, or None
    memory: dict[str, int] | Callable[[FakeProcess], dict[str, int]] | None = None
    #: device memory a process still holds after a ``drop`` with ``release`` (None: not reported)
    held_bytes: int | None = None
    fault: Callable[[FakeProcess, dict[str, Any]], str | None] | None = None
    kernel_s: Callable[[FakeProcess, float], float] | None = None


class ProcessDied(BaseException):
    """Raised inside a fake process to kill it (a BaseException: ``Child.handle`` must not catch it)."""


class ProcessHung(BaseException):
    """Raised inside a fake process: it never answers this request."""


@dataclass
class FakeProcess:
    """One started fake worker process."""

    serial: int
    spec: WorkerSpec
    behaviour: Behaviour
    rng: np.random.Generator
    factor: float = 1.0
    calls: int = 0  # kernel calls so far
    requests: list[str] = field(default_factory=list)  # the ops it was asked, in order
    exit_status: int | None = None  # set when it is gone
    hung_up: bool = False  # its stdin closed by the parent
    child: Any = None
    registry: dict = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return 100_000 + self.serial

    @property
    def side(self) -> str | None:
        return self.spec.env.get(SIDE_ENV)

    def crash(self) -> None:
        raise ProcessDied

    def kill(self) -> None:
        """SIGKILL from outside (``Worker.stop``): a request it is answering gets no reply."""
        if self.exit_status is None:
            self.exit_status = KILLED

    def hang(self) -> None:
        raise ProcessHung

    def kernel(self) -> None:
        """One kernel call: its simulated time on the clock."""
        b = self.behaviour
        self.calls += 1
        t = b.call_s * (1.0 + b.slowdown) * self.factor
        if b.call_sd:
            t *= math.exp(self.rng.normal(0.0, b.call_sd))
        if b.kernel_s is not None:
            t = b.kernel_s(self, t)
        clock.spin(t)


def at_call(n: int, what: str = "crash", *, once: bool = True) -> Callable[[FakeProcess, float], float]:
    """A ``Behaviour.kernel_s`` that makes a process ``crash`` or ``hang`` at its ``n``-th kernel
    call: only the first process to get there (``once``), or every one."""
    hit: list[int] = []

    def kernel_s(process: FakeProcess, t: float) -> float:
        if process.calls == n and not (once and hit):
            hit.append(process.serial)
            process.crash() if what == "crash" else process.hang()
        return t
    return kernel_s


def ctrl_c_until_killed(process: FakeProcess) -> None:
    """From a worker thread of the run (a ``Behaviour.fault``): Ctrl-C to the main thread (a real
    SIGINT, which wakes the main thread where it waits), then wait until the run kills
    ``process`` (a bound of ~3 s, not a timing: when the run never kills it, the test sees that)."""
    import signal
    import time

    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
    for _ in range(3000):
        if process.exit_status is not None:
            return
        time.sleep(0.001)


_local = threading.local()  # the fake process answering on this thread
_turn = threading.RLock()  # one request at a time: os.environ and the registry are process-wide


def current() -> FakeProcess | None:
    return getattr(_local, "process", None)


class FakeClock(clock.SimClock):
    """The simulated clock of a ``World``: while a fake process answers a request, time that would
    pass the parent's timeout for it ends the request as a hang (``ProcessHung``) at the deadline,
    so a kernel that never returns (``fault-hang`` sleeps forever) hangs exactly as long as the
    parent waits."""

    def __init__(self) -> None:
        super().__init__()
        self._deadline = threading.local()

    def advance(self, seconds: float) -> None:
        deadline = getattr(self._deadline, "t", None)
        if deadline is not None and self.now() + seconds > deadline:
            super().advance(max(0.0, deadline - self.now()))
            raise ProcessHung
        super().advance(seconds)

    @contextlib.contextmanager
    def until(self, deadline: float) -> Iterator[None]:
        self._deadline.t = deadline
        try:
            yield
        finally:
            self._deadline.t = None


def _abort() -> None:
    raise ProcessDied  # ``os.abort()`` inside a fake process (``fault-abort``) kills only that process


@contextlib.contextmanager
def _inside(process: FakeProcess) -> Iterator[None]:
    """While ``process`` answers: its environment in ``os.environ``, its registry, itself current,
    ``os.abort`` ending it."""
    with _turn:
        env_before = {k: os.environ.get(k) for k in process.spec.env}
        reg_before, proc_before, abort_before = registry._registry, current(), os.abort
        os.environ.update(process.spec.env)
        registry._registry, _local.process, os.abort = process.registry, process, _abort
        try:
            yield
        finally:
            registry._registry, _local.process, os.abort = reg_before, proc_before, abort_before
            for k, v in env_before.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


class _Stderr:
    """A fake process writes no stderr: nothing to name when it fails to start."""

    def forward(self) -> None:
        pass

    def error_line(self) -> str:
        return ""


class InprocWorker(Worker):
    """``Worker`` whose process is a ``FakeProcess`` in this one: the parent code is the real one."""

    def __init__(self, spec: WorkerSpec, label: str = "worker", *, world: World):
        super().__init__(spec, label)
        self.world = world
        self._reply: str | None = None
        self._silent = False
        self._sent_at = 0.0

    def launch(self) -> None:
        if not os.access(self.spec.python, os.X_OK):  # what Popen would refuse to start
            raise WorkerLost(f"{self.label}: cannot start {self.spec.python}: no executable interpreter there")
        self.proc = self.world.start(self.spec)
        self.starts += 1
        self._stderr = _Stderr()
        self._launched = True

    def _send(self, line: str) -> None:
        p: FakeProcess = self.proc
        req = json.loads(line)  # exactly what a real child would read
        self._reply, self._silent, self._sent_at = None, False, self.world.clock.now()
        p.requests.append(req.get("op", "?"))
        what = p.behaviour.fault(p, req) if p.behaviour.fault is not None else None
        if what == "crash":
            p.exit_status = ABORTED
            return
        if what == "hang":
            self._silent = True
            return
        if what and what.startswith("error") and req.get("op") == "init":
            why = what.partition(":")[2].strip() or "simulated"
            self._reply, p.exit_status = protocol.dumps({"type": "error", "error": f"RuntimeError: {why}"}), 2
            return
        timeout = self.spec.start_timeout_s if req.get("op") == "init" else self.spec.timeout_s
        try:
            with _inside(p), self.world.clock.until(self.world.clock.now() + timeout):
                if req.get("op") == "init":
                    clock.advance(p.behaviour.start_s)
                    p.child, reply = open_child(req, p.pid)
                    if p.child is None:
                        p.exit_status = 2
                else:
                    reply = answer(p.child, req)
                    self._fill(p, req, reply)
        except ProcessDied:
            p.exit_status = ABORTED
            return
        except ProcessHung:
            self._silent = True
            return
        if p.exit_status == KILLED:  # killed while it answered: its stdout ends, no reply
            return
        if what == "fatal":
            reply = {"type": "result", "status": "failed", "reason": "CUDA context poisoned: simulated",
                     "fatal": "simulated"}
        if reply.get("fatal"):
            p.exit_status = 3
        self._reply = protocol.dumps(reply)

    @staticmethod
    def _fill(p: FakeProcess, req: dict[str, Any], reply: dict[str, Any]) -> None:
        """What a CUDA child reports and a CPU one cannot: memory figures, the check's time."""
        b = p.behaviour
        memory = b.memory(p) if callable(b.memory) else b.memory
        if memory is not None and (req.get("op") == "memory" or req.get("memory")
                                   or reply.get("status") == "out of memory"):
            reply["memory"] = dict(memory)
        if b.held_bytes is not None and req.get("op") == "drop" and req.get("release"):
            reply["held_bytes"] = b.held_bytes
        if req.get("op") == "check":
            clock.advance(b.check_s)

    def _receive(self, timeout: float) -> str | None:
        if self._silent:  # the parent waited out its timeout on the simulated clock (a hang already did)
            self.world.clock.advance(max(0.0, self._sent_at + timeout - self.world.clock.now()))
            raise TimeoutError
        line, self._reply = self._reply, None
        return line  # None: the process died (its stdout at EOF)

    def _reap(self, timeout: float = 30.0) -> int | None:
        p: FakeProcess | None = self.proc
        if p is None:  # reaped already by another thread (``kill`` on Ctrl-C)
            return self._reaped.exit_status if self._reaped is not None else None
        self._reaped = p
        if p.exit_status is None:
            p.exit_status = KILLED if timeout == 0 else 0  # ``kill`` reaps at once: SIGKILL
        self.proc = None
        return p.exit_status

    def hang_up(self) -> None:
        p: FakeProcess | None = self.proc
        if p is not None and not p.hung_up:  # a closed stdin stays closed
            p.hung_up = True
            self.world.exits.append(("hang up", p.pid))

    def close(self, timeout: float = EXIT_TIMEOUT_S) -> None:
        if self.proc is not None:
            self.hang_up()
            self.world.exits.append(("wait", self.proc.pid))
            self._reap(timeout)


class World:
    """The fake processes of one ``workers`` block and the simulated clock they run on."""

    def __init__(self, behaviour: Behaviour | dict | Callable[[WorkerSpec], Behaviour], seed: int = 0):
        if isinstance(behaviour, Behaviour):
            self.behaviour_of: Callable[[WorkerSpec], Behaviour] = lambda spec: behaviour
        elif isinstance(behaviour, dict):
            self.behaviour_of = lambda spec: behaviour[spec.env.get(SIDE_ENV)]
        else:
            self.behaviour_of = behaviour
        self.seed = seed
        self.clock = FakeClock()
        self.processes: list[FakeProcess] = []
        #: ("hang up" | "wait", pid) as the parent closed its processes, in order
        self.exits: list[tuple[str, int]] = []
        self.fresh_registry = _fresh_registry()

    def start(self, spec: WorkerSpec) -> FakeProcess:
        b = self.behaviour_of(spec)
        rng = np.random.default_rng([self.seed, len(self.processes)])
        p = FakeProcess(len(self.processes) + 1, spec, b, rng, registry=dict(self.fresh_registry))
        p.factor = math.exp(rng.normal(0.0, b.process_sd)) if b.process_sd else 1.0
        self.processes.append(p)
        return p

    def new(self, spec: WorkerSpec, label: str = "worker") -> InprocWorker:
        return InprocWorker(spec, label, world=self)


def _fresh_registry() -> dict:
    """The registry a new worker process starts with: the built-ins and entry points only. Not
    this test process's registry, which may hold what earlier tests registered or wrapped (a
    ``Slowed`` ``ab-spin`` would make the worker's own ``--fp4-plugin ab_env`` a duplicate)."""
    saved = registry._registry, registry._loaded_builtins
    registry._registry, registry._loaded_builtins = {}, False
    try:
        registry.all_backends()
        return dict(registry._registry)
    finally:
        registry._registry, registry._loaded_builtins = saved


@contextlib.contextmanager
def workers(behaviour: Behaviour | dict | Callable[[WorkerSpec], Behaviour] = Behaviour(), seed: int = 0
            ) -> Iterator[World]:
    """Every worker started in the block is an in-process fake on one simulated clock."""
    # the built-ins in this process's registry too: ``_loaded_builtins`` is one flag for every
    # registry, so a fake process's first lookup must not be the one that loads them
    registry.all_backends()
    world = World(behaviour, seed)
    # a worker's ``release`` runs gc.collect(); over this whole test process's heap that is 0.15 s a
    # call: the objects alive now are set aside for the block, so it scans only what the fakes made
    gc.freeze()
    try:
        with clock.using(world.clock), spawning(world.new):
            yield world
    finally:
        gc.unfreeze()


# --- the backend ---------------------------------------------------------------------------------


def _behaviour() -> Behaviour:
    p = current()
    return p.behaviour if p is not None else Behaviour()


class SimBF16(TorchBF16):
    """bf16 GEMM whose output is the real product (computed once in prepare) and whose every call
    takes the simulated time the answering fake process's ``Behaviour`` says."""

    name = BACKEND
    kinds = frozenset({"dense"})
    api = "test-only: precomputed torch.mm result + simulated kernel time"

    def availability(self, device: torch.device) -> Availability:
        return Availability.yes(_behaviour().version, "in-process fake worker")

    def tactics(self, problem, device) -> list[Tactic]:
        return [Tactic(label, label) for label in _behaviour().tactics]

    def prepare(self, problem, operands, device) -> Prepared:
        prep = super().prepare(problem, operands, device)
        torch.mm(prep.args["a"], prep.args["wt"], out=prep.out)
        prep.args["result"] = prep.out.clone()
        return prep

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        prepared.out.copy_(prepared.args["result"])
        p = current()
        if p is not None:
            p.kernel()
        return prepared.out


BACKENDS = [SimBF16()]
