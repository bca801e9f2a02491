"""``R`` worker processes per environment on the same GPU: list, check, capture, time in rounds.

Each process is an independent replicate: its own CUDA context, operand allocations and graph
capture (``schedule`` fixes who starts, allocates and times first, alternating between the
sides). Per benchmark, every process first checks correctness (prepare + verify: FlashInfer JIT
modules are built and loaded here, never inside a measurement) and reports a digest of its
operand bytes, which must be the same in every process. Each process then captures the case
once and replays the capture in every round (``worker.child.Child.time``); a round visits every
live process with a fixed sample count. After ``rounds`` rounds the benchmark is estimated
(``ab.estimate``); while the rule says MORE and the time budget allows, rounds are added, and
when the processes disagree more than their rounds scatter, one more process pair joins for
that benchmark.

Device memory: the first process to capture a benchmark reports its memory peak and the GPU's
free memory (``worker.child.device_memory``); when the other processes would not fit beside it
(``schedule.resident_capacity``, or ``--max-resident``) the slots take turns (``schedule.turns``),
each turn timed in its own rounds and released before the next one captures, and the benchmark is
estimated per slot (``ab.estimate.ab_estimate_paired``). Between benchmarks of different
problems every process releases its cached operands and references, so an idle process holds
only its CUDA context.

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

from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.estimate import MIN_REPLICATES, AbEstimate, ab_estimate, ab_estimate_paired
from fp4bench.ab.records import AbRun, Crash, Paired, ProcInfo, ProcPart, SideResult
from fp4bench.ab.schedule import SIDES, alloc_order, resident_capacity, round_order, start_order, turns
from fp4bench.gate.rule import Decision
from fp4bench.measure.timing import TIMER_ENV
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.sweep import SweepOptions
from fp4bench.run.worker.pool import Worker, WorkerLost, WorkerSpec, interpreter, spawn


def _init(side: Side, cfg: AbConfig) -> dict[str, Any]:
    """The worker's init message: the default timing method (the round sample count is set per
    request), the backend modules of both sides and of this side."""
    return RunnerSettings(device=cfg.device, plugins=(*cfg.plugins, *side.plugins), cold_l2=cfg.cold_l2,
                          seed=cfg.seed, min_copies=cfg.min_copies).to_init()


#: device memory a process may keep after a release (its CUDA context, cuBLAS workspaces, the
#: timer's L2-flush buffer) before it is replaced
HELD_LIMIT_BYTES = 2 << 30


def _stopped(est: AbEstimate, budget: bool, cfg: AbConfig) -> str:
    """Why a decided benchmark's rounds stopped."""
    if est.decision is not Decision.AMBIGUOUS:
        return "decided"
    return "time budget spent" if not budget else f"{cfg.max_rounds} rounds"


def _problem_of(by_side: dict, name: str) -> str | None:
    """The benchmark's problem as listed (either side), to tell when the next one changes it."""
    import json

    for s in SIDES:
        e = by_side[s].get(name)
        if e is not None:
            return json.dumps(e["case"].get("problem"), sort_keys=True)
    return None


def _memory_line(memory: dict[str, int] | None) -> str:
    if not memory:
        return "memory: no report"
    gib = 1 << 30
    return (f"memory: {memory['peak'] / gib:.1f} GiB per process, {memory['free'] / gib:.1f} of "
            f"{memory['total'] / gib:.1f} GiB free beside the first")


def round_median(samples: list[float]) -> float:
    return float(statistics.median(samples))


def replays_per_round(capture_timing: dict[str, Any], cfg: AbConfig) -> int:
    """Replays every process times per round of one benchmark, from its first capture: as many
    as fit ``cfg.round_s`` at the captured replay time, between 3 and ``cfg.round_samples``. Set
    once per benchmark, before any round, so every round of both sides has the same count."""
    samples = [float(x) for x in capture_timing.get("samples_s") or [] if x == x and x > 0]
    if not samples:
        return cfg.round_samples
    replay_s = statistics.median(samples) * max(1, int(capture_timing.get("calls_per_sample") or 1))
    return max(3, min(cfg.round_samples, int(cfg.round_s / replay_s + 1e-9)))


class AbRunner:
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
        self.slots[info.slot][SIDES.index(info.side)] = None
        self.progress(f"[{pid}] LOST during {during} {benchmark}: {exc}")

    def _ask(self, pid: str, msg: dict[str, Any], what: str) -> dict[str, Any]:
        if self.stop.is_set():
            raise KeyboardInterrupt  # stopped from another thread: handled as Ctrl-C
        return self.workers[pid].request(msg, what)  # WorkerLost: the caller drops the process

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
        for pid in list(self.workers):
            w = self.workers.pop(pid)
            w.kill() if kill else w.close()  # an interrupted worker may be mid-case

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

    def _one(self, name: str, by_side: dict, index: int, where: str, remaining: int, *,
             release: bool = True) -> Paired:
        """One benchmark on every process (or in turns); ``release``: the next benchmark is of
        another problem, so every process releases its cached operands afterwards."""
        t_start = clock.now()
        res = {s: SideResult() for s in SIDES}
        entries = {s: by_side[s].get(name) for s in SIDES}
        pair = Paired(name, res["A"], res["B"])
        for s in SIDES:
            e, r = entries[s], res[s]
            if e is None:
                r.status, r.reason = "unsupported", f"not in side {s}'s sweep (its library lists no such tactic)"
            elif e["skip_reason"]:
                r.status, r.reason = "skipped", e["skip_reason"]
        if not all(res[s].status == "pending" for s in SIDES):
            return pair
        parts: dict[str, ProcPart] = {}
        extra: list[str] = []
        crashes0 = len(self.crashes)
        order = alloc_order(self._slot_tuples(), index)
        pair.memory = self._join(order[0], name, entries, parts, res, where, memory=True)
        pair.capacity = resident_capacity(pair.memory, self.cfg.max_resident)
        groups = turns(self._slot_tuples(), pair.capacity)
        if len(groups) > 1 and order[0] in self.workers and parts[order[0]].status == "measured":
            # idle processes may still hold cached operands of earlier benchmarks: release them
            # and read the free memory again, so the turns are sized on what the GPU really has
            for pid in [p for p in self.workers if p not in parts]:
                self._drop(pid, name, release=True)
            try:
                pair.memory = self._ask(order[0], {"op": "memory"}, "memory").get("memory") or pair.memory
            except WorkerLost as exc:
                self._lost(order[0], name, "memory report of", exc)
            pair.capacity = resident_capacity(pair.memory, self.cfg.max_resident)
            groups = turns(self._slot_tuples(), pair.capacity)
        if len(groups) <= 1:
            for pid in order[1:]:
                if res[self.info[pid].side].status != "failed":  # one failed check per side is enough
                    self._join(pid, name, entries, parts, res, where)
            self._rounds(pair, name, entries, parts, res, where, index, remaining, t_start, extra)
        else:
            self._in_turns(pair, groups, name, entries, parts, res, where, index, remaining, t_start, extra)
        self._finish(pair, parts)
        release = release or bool(pair.turns)
        for pid in list(self.workers):
            if (pid in parts or release) and self._drop(pid, name, release) > HELD_LIMIT_BYTES and release \
                    and pid not in extra:
                # memory a released process keeps (seen after a failed case on an H200) would be
                # missing from every later benchmark's turns: a fresh process starts with none
                self._renew(pid, f"it still held memory after releasing {name}")
        for pid in extra:
            self._retire(pid)
        pair.parts = list(parts.values())
        pair.crashes = self.crashes[crashes0:]
        pair.round_samples = self._replays.get(name)
        pair.wall_s = clock.now() - t_start
        return pair

    def _rounds(self, pair: Paired, name: str, entries: dict, parts: dict[str, ProcPart],
                res: dict[str, SideResult], where: str, index: int, remaining: int, t_start: float,
                extra: list[str]) -> None:
        """Rounds over every live process until the rule decides or the budget is spent."""
        cfg = self.cfg
        r, t_base = 0, 0.0
        while True:
            if any(res[s].status == "failed" for s in SIDES):
                pair.stopped = "a check failed"
                return
            order = [p for p in round_order(self._slot_tuples(), r) if p in parts and parts[p].status == "measured"]
            for pid in order:
                self._round(pid, r, name, entries, parts, res, where)
            pair.order.append(order)
            r += 1
            if r < cfg.rounds:
                continue
            if r == cfg.rounds:
                t_base = clock.now()
                self._base_costs.append(t_base - t_start)
            elif (r - cfg.rounds) % cfg.more_rounds:
                continue
            budget = self._budget_left(remaining) and clock.now() - t_base < cfg.benchmark_budget_s
            can_more = budget and r < cfg.max_rounds
            est = pair.estimate = self._estimate(parts, budget_left=can_more)
            if est is None:
                live = [sum(1 for p in parts.values() if p.side == s and p.status == "measured") for s in SIDES]
                # a replacement catches up beyond the rounds cap (one base of rounds), time allowing
                if min(live) < MIN_REPLICATES or not budget or r >= cfg.max_rounds + cfg.rounds:
                    pair.stopped = "too few replicates"
                    return
                continue
            if est.decision is not Decision.MORE:
                pair.stopped = _stopped(est, budget, cfg)
                return
            resident = sum(1 for p in parts.values() if p.status == "measured")
            fits = pair.capacity is None or resident + 2 <= pair.capacity
            if est.spread_dominates and len(extra) < 2 * cfg.extra_pairs and fits:
                extra += self._extra_pair(name, entries, parts, res, where)

    def _in_turns(self, pair: Paired, groups: list[list[int]], name: str, entries: dict,
                  parts: dict[str, ProcPart], res: dict[str, SideResult], where: str, index: int, remaining: int,
                  t_start: float, extra: list[str]) -> None:
        """The slots in turns (module docstring): each pass gives every turn its rounds (the base
        rounds, then ``more_rounds`` while the rule says MORE), a turn's processes capture at its
        start and release at its end; one more slot joins as its own turn when the slots
        disagree more than their rounds scatter."""
        cfg = self.cfg
        r, passes, per_slot = 0, 0, 0
        resident = {p for p in parts if parts[p].status == "measured"}  # the first process, captured
        self.progress(f"{where} {name}: {_memory_line(pair.memory)}; {len(groups)} turns of "
                      f"{len(groups[0])} slot{'s' if len(groups[0]) > 1 else ''}")
        while True:
            n = cfg.rounds if passes == 0 else cfg.more_rounds
            for g in groups:
                group = [i for i in g if i < len(self.slots)]
                for pid in alloc_order([(self.slots[i][0], self.slots[i][1]) for i in group], index):
                    if res[self.info[pid].side].status == "failed":
                        continue
                    if pid not in parts:
                        self._join(pid, name, entries, parts, res, where)
                    elif parts[pid].status == "measured" and pid not in resident:
                        try:
                            self._capture(pid, name, entries, parts[pid], res[self.info[pid].side])
                        except WorkerLost as exc:
                            parts[pid].status, parts[pid].reason, parts[pid].rounds = "lost", str(exc), {}
                            self._lost(pid, name, "re-capture of", exc)
                            self._replace(self.info[pid], name, entries, parts, res, where)
                resident |= {p for i in group for p in self.slots[i] if p in parts and parts[p].status == "measured"}
                if any(res[s].status == "failed" for s in SIDES):
                    pair.stopped = "a check failed"
                    return
                turn: list[str] = []
                for _ in range(n):
                    slots = [(self.slots[i][0], self.slots[i][1]) for i in group if i < len(self.slots)]
                    order = [p for p in round_order(slots, r) if p in parts and parts[p].status == "measured"]
                    for pid in order:
                        self._round(pid, r, name, entries, parts, res, where)
                    pair.order.append(order)
                    turn += [p for p in order if p not in turn]
                    r += 1
                if passes == 0:
                    pair.turns.append(turn)
                for pid in [p for p in resident if p in self.workers]:
                    self._drop(pid, name, release=True)
                resident.clear()
            passes += 1
            per_slot += n
            if passes == 1:
                t_base = clock.now()
                self._base_costs.append(t_base - t_start)
            budget = self._budget_left(remaining) and clock.now() - t_base < cfg.benchmark_budget_s
            can_more = budget and per_slot < cfg.max_rounds
            est = pair.estimate = self._estimate(parts, budget_left=can_more, paired=True)
            if est is None:
                whole = sum(1 for slot in self.slots if all(p in parts and parts[p].status == "measured" for p in slot))
                pair.stopped = "too few replicates"
                if whole < MIN_REPLICATES or not can_more:
                    return
                continue
            if est.decision is not Decision.MORE:
                pair.stopped = _stopped(est, budget, cfg)
                return
            if est.spread_dominates and len(extra) < 2 * cfg.extra_pairs:
                got = self._extra_pair(name, entries, parts, res, where)
                extra += got
                if got:
                    # checked and captured now, beside no other turn; released at once so the
                    # next pass's first turn has the GPU to itself, and captured again in its
                    # own turn (kept resident, it would sit beside every turn: out of memory)
                    for pid in got:
                        self._drop(pid, name, release=True)
                    groups = groups + [[self.info[got[0]].slot]]

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

    def _join(self, pid: str, name: str, entries: dict, parts: dict[str, ProcPart], res: dict[str, SideResult],
              where: str, *, memory: bool = False) -> dict[str, int] | None:
        """Check and capture ``name`` on process ``pid`` (a replacement when it dies); with
        ``memory``, the process's memory report after the capture."""
        info = self.info[pid]
        part = parts[pid] = ProcPart(pid, info.side, info.slot, len(parts))
        side = res[info.side]
        case = entries[info.side]["case"]
        t0 = clock.now()
        try:
            reply = self._ask(pid, {"op": "check", "case": case}, f"check {name}")
            side.check_s += clock.now() - t0
            part.status, part.reason = reply.get("status", "failed"), reply.get("reason", "")
            part.digest = reply.get("operand_digest")
            why = f" ({part.reason.splitlines()[0][:200]})" if part.status != "measured" and part.reason else ""
            self.progress(f"[{pid}] {where} prepared + checked {name}: {part.status} in "
                          f"{clock.now() - t0:.1f} s{why}")
            if part.status != "measured":
                side.status, side.reason = part.status, part.reason
                side.extra_info = dict(reply.get("extra_info") or {})
                return None
            if not side.extra_info:
                side.extra_info = dict(reply.get("extra_info") or {})
                side.digest = part.digest
            return self._capture(pid, name, entries, part, side, memory=memory)
        except WorkerLost as exc:
            part.status, part.reason = "lost", str(exc)
            self._lost(pid, name, "check/capture of", exc)
            self._replace(info, name, entries, parts, res, where)
        return None

    def _capture(self, pid: str, name: str, entries: dict, part: ProcPart, side: SideResult, *,
                 memory: bool = False) -> dict[str, int] | None:
        """Warm up, size and capture ``name`` on ``pid`` (``WorkerLost`` to the caller)."""
        # the capture (warm-up, sizing, CUDA graph): once per process, in allocation order. In
        # span mode every process profiles it (the kernel names are kept from the first of each
        # side): a process that has run the profiler stays slower for the rest of its life
        # (on an H200, +1.5 to +4 % on µs-scale kernels, docs/results-h200.md run 16), so
        # profiling only one process per side made that process an outlier of its side
        names = self.cfg.timer == "span"
        reply = self._ask(pid, {"op": "time", "case": entries[part.side]["case"], "samples": 3,
                                "kernel_time": names, "memory": memory}, f"capture {name}")
        if reply.get("status") != "measured":
            part.status, part.reason = "failed", f"while capturing: {reply.get('reason')}"
            side.status, side.reason = "failed", part.reason
            return None
        if names and "kernels" not in side.extra_info:
            side.extra_info["kernels"] = (reply["timing"].get("extra") or {}).get("kernels", [])
        self._replays.setdefault(name, replays_per_round(reply["timing"], self.cfg))
        part.fresh = True
        return reply.get("memory")

    def _replace(self, info: ProcInfo, name: str, entries: dict, parts: dict[str, ProcPart],
                 res: dict[str, SideResult], where: str) -> None:
        """A fresh process in a lost one's slot, when the budget allows; it joins this benchmark."""
        if sum(1 for c in self.crashes if c.benchmark == name and c.side == info.side) > 1:
            return  # one replacement per side and benchmark: a case that kills every process stays lost
        if not self._budget_left(0):
            self.progress(f"[{info.proc}] not replaced: the time budget is spent")
            return
        pid = self._spawn(info.side, info.slot, extra=info.extra, replaces=info.proc)
        if pid is not None:
            self._join(pid, name, entries, parts, res, where)

    def _round(self, pid: str, r: int, name: str, entries: dict, parts: dict[str, ProcPart],
               res: dict[str, SideResult], where: str) -> None:
        info, part = self.info[pid], parts[pid]
        side = res[info.side]
        cupti = self.cfg.timer == "cupti"
        place = self.cfg.placement == "round" and not part.fresh
        part.fresh = False
        try:
            reply = self._ask(pid, {"op": "time", "case": entries[info.side]["case"], "place": place,
                                    "samples": self._replays.get(name, self.cfg.round_samples),
                                    "kernel_time": cupti}, f"timing {name}")
        except WorkerLost as exc:
            part.status, part.reason, part.rounds, part.samples = "lost", str(exc), {}, []
            self._lost(pid, name, f"round {r + 1} of", exc)
            self._replace(info, name, entries, parts, res, where)
            return
        if reply.get("status") != "measured":
            part.status, part.reason = "failed", f"during timing: {reply.get('reason')}"
            side.status, side.reason = "failed", part.reason
            return
        t = reply["timing"]
        part.rounds[r] = round_median(t["samples_s"])
        part.samples += t["samples_s"]
        if cupti and "kernels" in (t.get("extra") or {}):  # CUPTI names of the timed kernels
            side.extra_info["kernels"] = t["extra"]["kernels"]
        side.extra_info.update(timer=t["method"], calls_per_sample=t["calls_per_sample"],
                               rotating_copies=t.get("rotating_copies"))
        if reply.get("telemetry"):
            side.telemetry.append({"process": pid, "round": r, **reply["telemetry"]})

    def _extra_pair(self, name: str, entries: dict, parts: dict[str, ProcPart], res: dict[str, SideResult],
                    where: str) -> list[str]:
        """One more process per side for this benchmark (a new slot), started and captured in the
        alternating order."""
        slot = len(self.slots)
        got = []
        for side, _ in start_order(slot + 1)[-2:]:
            pid = self._spawn(side, slot, extra=True)
            if pid is not None:
                got.append(pid)
        for pid in got:  # start order: alternates with the slot like the others
            self._join(pid, name, entries, parts, res, where)
        if got:
            self.progress(f"{where} {name}: processes disagree more than their rounds scatter; "
                          f"added {' and '.join(got)}")
        return got

    def _retire(self, pid: str) -> None:
        w = self.workers.pop(pid, None)
        if w is not None:
            w.close()
        info = self.info[pid]
        self.slots[info.slot][SIDES.index(info.side)] = None
        while self.slots and self.slots[-1] == [None, None]:
            self.slots.pop()

    def _estimate(self, parts: dict[str, ProcPart], *, budget_left: bool, paired: bool = False) -> AbEstimate | None:
        rounds = {p.proc: p.rounds for p in parts.values() if p.status == "measured"}
        side_of = {p.proc: p.side for p in parts.values()}
        if paired:
            return ab_estimate_paired(rounds, side_of, {p.proc: p.slot for p in parts.values()}, self.cfg.settings,
                                      budget_left=budget_left)
        return ab_estimate(rounds, side_of, self.cfg.settings, budget_left=budget_left)

    def _finish(self, pair: Paired, parts: dict[str, ProcPart]) -> None:
        """Each side's status: measured when its processes gave usable replicates, failed on a
        wrong output, lost when too few processes survived to judge it."""
        for s, side in (("A", pair.a), ("B", pair.b)):
            if side.status in ("failed", "skipped", "unsupported"):
                continue
            live = [p for p in parts.values() if p.side == s and p.status == "measured"]
            # only what the surviving processes measured: a lost process's rounds are not evidence
            side.samples = [x for p in live for x in p.samples]
            side.telemetry = [t for t in side.telemetry if t["process"] in {p.proc for p in live}]
            side.status = "measured" if live else "lost"
            if not live:
                side.reason = "; ".join(p.reason for p in parts.values() if p.side == s and p.status == "lost")
        digests = {p.proc: p.digest for p in parts.values() if p.status == "measured"}
        if len(set(digests.values())) > 1:
            groups: dict[str | None, list[str]] = {}
            for pid, d in digests.items():
                groups.setdefault(d, []).append(pid)
            pair.digest_mismatch = " vs ".join(",".join(g) for g in groups.values())
