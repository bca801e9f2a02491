"""``R`` worker processes per environment on the same GPU: the run and its processes.

Each process is an independent replicate: its own CUDA context, operand allocations and graph
capture (``schedule`` fixes who starts, allocates and times first, alternating between the
sides). ``AbRunner`` starts the processes, lists the sweep on one process of each side and
measures the benchmarks one after another (``ab.benchmark``: check, capture, rounds, release).

A process that dies, hangs or poisons its context is named (``AbRun.crashes``); its part of the
benchmark it was on is dropped (never judged on the rounds it finished), and a fresh process of
the same side takes its slot when the budget allows.
"""

from __future__ import annotations

import statistics
import sys
import threading
from fp4bench import clock
from typing import Any, Callable, Collection

from fp4bench.ab.benchmark import HELD_LIMIT_BYTES, BenchmarkSteps
from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.records import AbRun, Crash, Paired, ProcInfo
from fp4bench.ab.schedule import SIDES, start_order
from fp4bench.measure.timing import TIMER_ENV
from fp4bench.run.case import OUT_OF_MEMORY
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.sweep import SweepOptions
from fp4bench.run.worker.interpreter import interpreter
from fp4bench.run.worker.pool import Worker, WorkerLost, WorkerSpec, close_all, spawn


def _init(side: Side, cfg: AbConfig) -> dict[str, Any]:
    """The worker's init message: the default timing method (the round sample count is set per
    request), the backend modules of both sides and of this side."""
    return RunnerSettings(device=cfg.device, plugins=(*cfg.plugins, *side.plugins), cold_l2=cfg.cold_l2,
                          seed=cfg.seed, min_copies=cfg.min_copies).to_init()


def _problem_of(by_side: dict, name: str) -> str | None:
    """The benchmark's problem as listed (either side), to tell when the next one changes it."""
    import json

    for s in SIDES:
        e = by_side[s].get(name)
        if e is not None:
            return json.dumps(e["case"].get("problem"), sort_keys=True)
    return None


class AbRunner(BenchmarkSteps):
    """``prefix`` starts every process id (``g1.A1``: a run of several GPUs names each GPU's
    processes apart). ``stop`` set from another thread interrupts the run at its next request,
    as Ctrl-C does (the benchmarks that finished are judged, the rest are not reached)."""

    def __init__(self, a: Side, b: Side, cfg: AbConfig, progress: Callable[[str], None] | None = None,
                 prefix: str = ""):
        self.cfg = cfg
        self.prefix = prefix
        self.stop = threading.Event()
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.test_only: dict[str, dict[str, str]] = {}  # per side, filled when the workers start
        self.specs = {label: WorkerSpec(python=interpreter(s.python), env={**s.env, TIMER_ENV: cfg.timer},
                                        init=_init(s, cfg),
                                        timeout_s=cfg.timeout_s, start_timeout_s=max(cfg.timeout_s, 300.0))
                      for label, s in zip(SIDES, (a, b))}
        self.workers: dict[str, Worker] = {}  # live processes by id
        self.info: dict[str, ProcInfo] = {}  # every process of the run by id
        self.slots: list[list[str | None]] = []  # [A id, B id] per slot
        self.fingerprints: dict[str, dict] = {}
        self.crashes: list[Crash] = []
        #: processes that may hold device memory beyond their CUDA context: a check or timing
        #: request since their last release (``_holding_after``)
        self._holding: set[str] = set()
        #: checks and captures sent again after every other process released (``_fitting``)
        self._retried = 0
        #: during rounds: no retry makes the other processes release (``_fitting``)
        self._no_release = False
        self._serial = {s: 0 for s in SIDES}
        self._t0 = clock.now()
        self._base_costs: list[float] = []
        self._replays: dict[str, int] = {}  # benchmark -> replays per round (``replays_per_round``)
        # the run so far (``salvage`` reads it when the run raised)
        self.listed: list[str] | None = None  # every benchmark the sides listed, in order
        self.by_side: dict[str, dict[str, dict]] | None = None  # side -> benchmark -> listed case
        self.names: list[str] = []  # the benchmarks this run measures, in order
        self.pairs: list[Paired] = []
        self.versions: dict[str, dict[str, str | None]] = {}

    # -- processes ------------------------------------------------------------------------
    def _spawn(self, side: str, slot: int, *, extra: bool = False, replaces: str | None = None,
               initial: bool = False, launched: Worker | None = None) -> str | None:
        """Start one process for ``side`` in ``slot`` (``launched``: its worker, launched
        already); its id, or None when it could not start (an ``initial`` start that fails
        raises: a side that cannot start is a usage error)."""
        self._serial[side] += 1
        pid = f"{self.prefix}{side}{self._serial[side]}"
        w = launched if launched is not None else spawn(self.specs[side])
        w.label = f"process {pid}"
        try:
            ready = w.start()
        except (WorkerLost, OSError) as exc:
            if self.stop.is_set():
                raise KeyboardInterrupt from None
            if initial:
                raise RuntimeError(f"side {side} could not start: {exc}") from None
            self.progress(f"[{pid}] could not start: {exc}")
            return None
        self.workers[pid] = w
        self.info[pid] = ProcInfo(pid, side, slot, len(self.info), ready.get("pid"), extra, replaces)
        self.fingerprints.setdefault(side, ready["fingerprint"])
        self.test_only[side] = dict(ready.get("test_only") or {})
        while len(self.slots) <= slot:
            self.slots.append([None, None])
        self.slots[slot][SIDES.index(side)] = pid
        fp = ready["fingerprint"]
        self.progress(f"[{pid}] worker {ready.get('pid')}: {ready.get('python')} "
                      f"(torch {fp.get('torch')}, flashinfer {fp.get('flashinfer') or '-'})")
        return pid

    def _lost(self, pid: str, benchmark: str, during: str, exc: Exception) -> None:
        info = self.info[pid]
        crash = Crash(pid, info.side, benchmark, during, str(exc))
        self.crashes.append(crash)
        info.crash = f"{during} {benchmark}: {exc}"
        self.workers.pop(pid, None)
        self._holding.discard(pid)
        self.slots[info.slot][SIDES.index(info.side)] = None
        self.progress(f"[{pid}] LOST during {during} {benchmark}: {exc}")

    def _ask(self, pid: str, msg: dict[str, Any], what: str) -> dict[str, Any]:
        if self.stop.is_set():
            raise KeyboardInterrupt  # stopped from another thread: handled as Ctrl-C
        try:
            reply = self.workers[pid].request(msg, what)  # WorkerLost: the caller drops the process
        except WorkerLost:
            if self.stop.is_set():  # killed by ``interrupt``: the run was stopped, nothing was lost
                raise KeyboardInterrupt from None
            raise
        self._holding_after(pid, msg, reply)
        return reply

    def _holding_after(self, pid: str, msg: dict[str, Any], reply: dict[str, Any]) -> None:
        """Whether ``pid`` may hold device memory after answering ``msg``: a case's check or
        timing leaves operands (and a capture) behind, a release gives them back, and so does an
        out-of-memory reply (the worker releases everything it cached: ``worker.child``)."""
        op = msg.get("op")
        if op in ("check", "time", "run"):
            (self._holding.discard if reply.get("status") == OUT_OF_MEMORY else self._holding.add)(pid)
        elif op == "drop" and msg.get("release"):
            self._holding.discard(pid)

    def interrupt(self) -> None:
        """Stop the run from another thread (Ctrl-C in a several-GPU run): no request is sent
        any more and every worker is killed, so the request in flight ends at once; the run's
        thread then ends as on Ctrl-C (what finished is judged, the rest not reached)."""
        self.stop.set()
        for w in list(self.workers.values()):
            w.stop()

    def _slot_tuples(self) -> list[tuple[str | None, str | None]]:
        return [(s[0], s[1]) for s in self.slots]

    def _elapsed(self) -> float:
        return clock.now() - self._t0

    def _budget_left(self, remaining: int) -> bool:
        """Whether measurement may be added: the run's elapsed time plus the base cost of the
        ``remaining`` benchmarks (the mean so far) stays within the run's budget."""
        base = statistics.mean(self._base_costs) if self._base_costs else 0.0
        return self._elapsed() + base * remaining < self.cfg.time_budget_s

    def start(self) -> dict[str, dict]:
        """Every process of the run: launched together (their imports overlap), then started one
        at a time in ``start_order`` (CUDA context, backends, fingerprint)."""
        order = start_order(self.cfg.replicates)
        launched = []
        for side, _ in order:
            w = spawn(self.specs[side], label=f"side {side}'s worker")
            try:
                w.launch()
            except WorkerLost as exc:
                for done in launched:
                    done.kill()
                raise RuntimeError(f"side {side} could not start: {exc}") from None
            launched.append(w)
        for i, ((side, slot), w) in enumerate(zip(order, launched)):
            try:
                self._spawn(side, slot, initial=True, launched=w)
            except BaseException:
                for rest in launched[i + 1:]:  # launched, never registered: nothing else stops them
                    rest.kill()
                raise
        return dict(self.fingerprints)

    def close(self, kill: bool = False) -> None:
        """Every process stopped: killed (an interrupted worker may be mid-case) or closed at once."""
        workers = [self.workers.pop(pid) for pid in list(self.workers)]
        if kill:
            for w in workers:
                w.kill()
        else:
            close_all(workers)

    def _drop(self, pid: str, name: str, release: bool) -> int:
        """Forget the capture (``release``: and the cached operands); the bytes the process's
        allocator still holds after a release (0 when not reported)."""
        try:
            reply = self._ask(pid, {"op": "drop", "release": release}, "drop")
        except WorkerLost as exc:
            self._lost(pid, name, "drop after", exc)
            return 0
        held = int(reply.get("held_bytes") or 0)
        if held > HELD_LIMIT_BYTES:
            self.progress(f"[{pid}] still holds {held / (1 << 30):.1f} GiB after releasing {name}")
        return held

    def _renew(self, pid: str, why: str) -> None:
        """Replace a process that cannot give its memory back with a fresh one in its slot."""
        info = self.info[pid]
        self._retire(pid)
        new = self._spawn(info.side, info.slot, extra=info.extra, replaces=pid)
        self.progress(f"[{pid}] replaced by {new or 'nothing (could not start)'}: {why}")

    def _retire(self, pid: str) -> None:
        w = self.workers.pop(pid, None)
        if w is not None:
            w.close()
        self._holding.discard(pid)
        info = self.info[pid]
        self.slots[info.slot][SIDES.index(info.side)] = None
        while self.slots and self.slots[-1] == [None, None]:
            self.slots.pop()

    # -- the run --------------------------------------------------------------------------
    def run(self, sweep_for: Callable[[dict], SweepOptions] | None = None, only: Collection[str] | None = None,
            on_pair: Callable[[int, int, Paired], None] | None = None,
            select: Callable[[list[str], dict[str, dict[str, dict]]], list[str]] | None = None) -> AbRun:
        """``only``: the benchmark ids to run (a pytest run's selection, -k included), None: all
        listed. ``select(names, by_side)``: this run's share of the listed names (``by_side``: per
        side, benchmark -> listed case), e.g. one GPU's share. ``on_pair(i, n, pair)`` is called
        after each benchmark (progress)."""
        self._t0 = clock.now()
        try:
            fps = self.start()
            sweep = sweep_for(fps["A"]) if sweep_for else self.cfg.sweep
            first = {s: self.slots[0][i] for i, s in enumerate(SIDES)}
            listed = {}
            for s in SIDES:  # listing uses no GPU memory: one process per side is enough
                try:
                    listed[s] = self._ask(first[s], {"op": "cases", "sweep": sweep.to_dict()}, "listing the sweep")
                except WorkerLost as exc:
                    raise RuntimeError(f"side {s} could not list the sweep: {exc}") from None
                if listed[s].get("status") != "listed":
                    raise RuntimeError(f"side {s} could not list the sweep: {listed[s].get('reason')}")
        except BaseException:
            self.close(kill=True)
            raise
        by_side = self.by_side = {s: {c["id"]: c for c in listed[s]["cases"]} for s in SIDES}
        self.versions = {s: listed[s]["versions"] for s in SIDES}
        names = list(by_side["A"]) + [n for n in by_side["B"] if n not in by_side["A"]]
        self.listed = list(names)
        if only is not None:
            names = [n for n in names if n in only]
        if select is not None:
            names = select(names, by_side)
        self.names = names
        interrupted = False
        try:
            for i, name in enumerate(names, 1):
                if self.stop.is_set():
                    raise KeyboardInterrupt
                nxt = _problem_of(by_side, names[i]) if i < len(names) else None
                p = self._one(name, by_side, i - 1, f"{i}/{len(names)}", len(names) - i,
                              release=nxt != _problem_of(by_side, name))
                self.pairs.append(p)
                if on_pair is not None:
                    on_pair(i, len(names), p)
        except KeyboardInterrupt:  # a time limit (timeout -s INT) or Ctrl-C: judge what finished
            interrupted = True
            self.progress(f"interrupted: {len(names) - len(self.pairs)} of {len(names)} benchmarks not reached")
        finally:
            self.close(kill=interrupted)
        return self._result()

    def _result(self) -> AbRun:
        """The run as far as it went: the finished benchmarks, the rest not reached."""
        check_s = {s: sum((p.a if s == "A" else p.b).check_s for p in self.pairs) for s in SIDES}
        return AbRun(dict(self.fingerprints), self.versions, list(self.pairs), check_s, self.test_only,
                     not_reached=self.names[len(self.pairs):], processes=list(self.info.values()),
                     crashes=list(self.crashes), settings=self.cfg.settings, wall_s=self._elapsed(),
                     known_backends={s: sorted(self.versions[s]) for s in SIDES})

    def salvage(self) -> AbRun | None:
        """After ``run`` raised: what it had finished (the rest not reached), its workers killed;
        None when it had not listed the sweep."""
        self.close(kill=True)
        return self._result() if self.by_side is not None else None
