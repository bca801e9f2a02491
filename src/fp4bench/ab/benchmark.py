"""One benchmark on every process of an ``fp4bench ab`` run: check, capture, rounds, release.

Per benchmark, every process first checks correctness (prepare + verify: FlashInfer JIT modules
are built and loaded here, never inside a measurement) and reports a digest of its operand
bytes, which must be the same in every process. Each process then captures the case once and
replays the capture in every round (``worker.child.Child.time``; the rounds: ``ab.rounds``).
Device memory: the first process to check and capture a benchmark reports the memory peak of
each step and the GPU's free memory after its capture (``worker.child.device_memory``); the
larger peak sizes the turns (``ab.schedule``): a later process checks beside the earlier ones'
captures. Between benchmarks of one problem the processes keep their cached operands (the next
benchmark reuses them); between benchmarks of different problems every process releases them, so
an idle process holds only its CUDA context. A check or capture that runs out of memory while
other processes hold memory runs once more after every other process released (``_fitting``);
out of memory alone on the GPU, the benchmark is out of memory.
"""

from __future__ import annotations

import statistics
from fp4bench import clock
from typing import Any

from fp4bench.ab.config import AbConfig
from fp4bench.ab.estimate import AbEstimate, ab_estimate, ab_estimate_paired
from fp4bench.ab.records import Paired, ProcInfo, ProcPart, SideResult
from fp4bench.ab.rounds import Rounds
from fp4bench.ab.schedule import (SIDES, alloc_order, free_figure, larger_peak, memory_figure, resident_capacity,
                                  start_order, turns)
from fp4bench.run.case import FAILED, OUT_OF_MEMORY
from fp4bench.run.worker.pool import WorkerLost


#: device memory a process may keep after a release (its CUDA context, cuBLAS workspaces, the
#: timer's L2-flush buffer) before it is replaced
HELD_LIMIT_BYTES = 2 << 30


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


class BenchmarkSteps(Rounds):
    """The steps of one benchmark, as methods of ``ab.run.AbRunner`` (its processes, slots and
    settings)."""

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
        pair.memory = self._join(order[0], name, entries, parts, res, where)
        first = self.info[order[0]].side
        groups = self._plan(pair, name, parts, order[0], first)
        if res[first].status == OUT_OF_MEMORY:
            pair.stopped = "out of memory"  # one process alone does not fit: nothing to share the GPU with
        else:
            if len(groups) <= 1:
                groups = self._all_at_once(pair, order, name, entries, parts, res, where, first)
            if len(groups) <= 1:
                self._rounds(pair, name, entries, parts, res, where, index, remaining, t_start, extra)
            else:
                self._in_turns(pair, groups, name, entries, parts, res, where, index, remaining, t_start, extra)
        self._finish(pair, parts)
        short = any(s.status == OUT_OF_MEMORY for s in res.values())
        release = release or bool(pair.turns) or short
        for pid in list(self.workers):
            if (pid in parts or release) and self._drop(pid, name, release) > HELD_LIMIT_BYTES and release \
                    and pid not in extra:
                # memory a released process keeps (seen after a failed case on an H200) would be
                # missing from every later benchmark's turns: a fresh process starts with none
                self._renew(pid, f"it still held memory after releasing {name}")
        for pid in extra:
            self._retire(pid)
        if short:
            self._memory_of_both(pair, name, entries, parts, res, where)
        pair.parts = list(parts.values())
        pair.crashes = self.crashes[crashes0:]
        pair.round_samples = self._replays.get(name)
        pair.wall_s = clock.now() - t_start
        return pair

    def _plan(self, pair: Paired, name: str, parts: dict[str, ProcPart], pid: str, first: str) -> list:
        """The capacity and turns from the first process's figure (``pair.memory``). In turns,
        the idle processes release what they cached of earlier benchmarks and the GPU's free
        memory is read again, so the turns are sized on what the GPU really has."""
        pair.capacity = resident_capacity(pair.memory, self.cfg.max_resident)
        groups = turns(self._slot_tuples(), pair.capacity, first)
        if len(groups) > 1 and pid in self.workers and parts[pid].status == "measured":
            for p in [p for p in self.workers if p not in parts]:
                self._drop(p, name, release=True)
            try:
                pair.memory = larger_peak(self._ask(pid, {"op": "memory"}, "memory").get("memory"), pair.memory)
            except WorkerLost as exc:
                self._lost(pid, name, "memory report of", exc)
            pair.capacity = resident_capacity(pair.memory, self.cfg.max_resident)
            groups = turns(self._slot_tuples(), pair.capacity, first)
        return groups

    def _all_at_once(self, pair: Paired, order: list[str], name: str, entries: dict, parts: dict[str, ProcPart],
                     res: dict[str, SideResult], where: str, first: str) -> list:
        """The other processes check and capture one after another, every capture kept; the turns
        to go on with (one: all at once). One whose check or capture did not fit beside the others
        ran again alone (``_fitting``): the plan did not hold, so the benchmark goes on in turns
        (nothing held), sized on the largest peak seen so far and the free memory beside that
        process alone, and never more processes a turn than held the benchmark when it ran out."""
        figures = [pair.memory]
        for pid in order[1:]:
            if pid not in self.workers or res[self.info[pid].side].status == FAILED:
                continue  # lost, or one failed check per side is enough
            if any(res[s].status == OUT_OF_MEMORY for s in SIDES):
                break
            retried, beside = self._retried, sum(1 for p in parts.values() if p.status == "measured")
            figure = self._join(pid, name, entries, parts, res, where)
            figures.append(figure)
            if self._retried == retried:
                continue
            for f in figures:
                pair.memory = larger_peak(pair.memory, f)
            pair.memory = larger_peak(figure, pair.memory)  # the free memory beside it alone
            fit = resident_capacity(pair.memory, self.cfg.max_resident)
            pair.capacity = max(1, min(beside, fit if fit is not None else beside))
            for p in self._held(parts):
                self._drop(p, name, release=True)
            return turns(self._slot_tuples(), pair.capacity, first)
        return turns(self._slot_tuples(), None)

    def _fitting(self, pid: str, msg: dict[str, Any], what: str, name: str, where: str) -> dict[str, Any]:
        """``msg`` (a check or a capture) to ``pid``. When it runs out of device memory while other
        processes hold memory (what they cached of earlier benchmarks of this problem, their
        captures of this one), every other process releases, the GPU's free memory is read (the
        memory report) and ``msg`` is sent once more: out of memory then, alone on the GPU, it is
        the benchmark's out of memory, its reason naming that free memory. Not during rounds
        (``_no_release``): the others' captures are being replayed."""
        reply = self._ask(pid, msg, what)
        others = [p for p in self.workers if p != pid and p in self._holding]
        if reply.get("status") != OUT_OF_MEMORY or not others or self._no_release:
            return reply
        for p in others:
            self._drop(p, name, release=True)
        now = self._ask(pid, {"op": "memory"}, "memory").get("memory")
        self._retried += 1
        step = "check" if msg.get("op") == "check" else "capture"
        self.progress(f"[{pid}] {where} {name}: out of memory in its {step} beside {len(others)} processes holding "
                      f"memory; once more with every other process released ({free_figure(now)})")
        again = self._ask(pid, msg, what)
        if again.get("status") == OUT_OF_MEMORY:
            again["reason"] = (f"{again.get('reason')} (also alone on the GPU: every other process released, "
                               f"{free_figure(now)} before)")
        return again

    def _join(self, pid: str, name: str, entries: dict, parts: dict[str, ProcPart], res: dict[str, SideResult],
              where: str) -> dict[str, int] | None:
        """Check and capture ``name`` on process ``pid`` (a replacement when it dies); the
        process's memory figure (``larger_peak`` of its check's and its capture's reports)."""
        info = self.info[pid]
        part = parts[pid] = ProcPart(pid, info.side, info.slot, len(parts))
        side = res[info.side]
        case = entries[info.side]["case"]
        t0 = clock.now()
        try:
            reply = self._fitting(pid, {"op": "check", "case": case, "memory": True}, f"check {name}", name, where)
            side.check_s += clock.now() - t0
            part.status, part.reason = reply.get("status", "failed"), reply.get("reason", "")
            part.digest = reply.get("operand_digest")
            why = f" ({part.reason.splitlines()[0][:200]})" if part.status != "measured" and part.reason else ""
            self.progress(f"[{pid}] {where} prepared + checked {name}: {part.status} in "
                          f"{clock.now() - t0:.1f} s{why}")
            if part.status != "measured":
                side.status, side.reason = part.status, part.reason
                side.extra_info = dict(reply.get("extra_info") or {})
                side.memory = side.memory or reply.get("memory")
                return None
            if not side.extra_info:
                side.extra_info = dict(reply.get("extra_info") or {})
                side.digest = part.digest
            return self._capture(pid, name, entries, part, side, where, checked=reply.get("memory"))
        except WorkerLost as exc:
            part.status, part.reason = "lost", str(exc)
            self._lost(pid, name, "check/capture of", exc)
            self._replace(info, name, entries, parts, res, where)
        return None

    def _capture(self, pid: str, name: str, entries: dict, part: ProcPart, side: SideResult, where: str = "", *,
                 checked: dict[str, int] | None = None) -> dict[str, int] | None:
        """Warm up, size and capture ``name`` on ``pid`` (``WorkerLost`` to the caller); its
        memory figure, with the peak of its check (``checked``) where that was larger."""
        # the capture (warm-up, sizing, CUDA graph): once per process, in allocation order. In
        # span mode every process profiles it (the kernel names are kept from the first of each
        # side): a process that has run the profiler stays slower for the rest of its life
        # (on an H200, +1.5 to +4 % on µs-scale kernels, docs/results-h200.md run 16), so
        # profiling only one process per side made that process an outlier of its side
        names = self.cfg.timer == "span"
        msg = {"op": "time", "case": entries[part.side]["case"], "samples": 3, "kernel_time": names, "memory": True}
        reply = self._fitting(pid, msg, f"capture {name}", name, where)
        if reply.get("status") != "measured":
            _failed(part, side, reply, "while capturing")
            return None
        figure = larger_peak(reply.get("memory"), checked)
        side.memory = side.memory or figure  # the side's first: the figure an out-of-memory names
        if names and "kernels" not in side.extra_info:
            side.extra_info["kernels"] = (reply["timing"].get("extra") or {}).get("kernels", [])
        self._replays.setdefault(name, replays_per_round(reply["timing"], self.cfg))
        part.fresh = True
        return figure

    def _recapture(self, pid: str, name: str, entries: dict, parts: dict[str, ProcPart], res: dict[str, SideResult],
                   where: str) -> None:
        """Capture again on a checked process that released its capture (a turn ended, or another
        process's retry released it); a replacement when it dies."""
        try:
            self._capture(pid, name, entries, parts[pid], res[self.info[pid].side], where)
        except WorkerLost as exc:
            parts[pid].status, parts[pid].reason, parts[pid].rounds = "lost", str(exc), {}
            self._lost(pid, name, "re-capture of", exc)
            self._replace(self.info[pid], name, entries, parts, res, where)

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
            _failed(part, side, reply, "during timing")
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
                    where: str, *, join: bool = True) -> list[str]:
        """One more process per side for this benchmark (a new slot), started and (``join``)
        checked and captured in the alternating order."""
        slot = len(self.slots)
        got = []
        for side, _ in start_order(slot + 1)[-2:]:
            pid = self._spawn(side, slot, extra=True)
            if pid is not None:
                got.append(pid)
        for pid in got if join else ():  # start order: alternates with the slot like the others
            self._join(pid, name, entries, parts, res, where)
        if got:
            self.progress(f"{where} {name}: processes disagree more than their rounds scatter; "
                          f"added {' and '.join(got)}")
        return got

    def _estimate(self, parts: dict[str, ProcPart], *, budget_left: bool, paired: bool = False,
                  solo: bool = False) -> AbEstimate | None:
        rounds = {p.proc: p.rounds for p in parts.values() if p.status == "measured"}
        side_of = {p.proc: p.side for p in parts.values()}
        if paired:
            return ab_estimate_paired(rounds, side_of, {p.proc: p.slot for p in parts.values()}, self.cfg.settings,
                                      budget_left=budget_left, solo=solo)
        return ab_estimate(rounds, side_of, self.cfg.settings, budget_left=budget_left)

    def _finish(self, pair: Paired, parts: dict[str, ProcPart]) -> None:
        """Each side's status: measured when its processes gave usable replicates, failed on a
        wrong output, lost when too few processes survived to judge it, not run when the other
        side ran out of memory first."""
        for s, side in (("A", pair.a), ("B", pair.b)):
            if side.status in (FAILED, OUT_OF_MEMORY, "skipped", "unsupported"):
                continue
            live = [p for p in parts.values() if p.side == s and p.status == "measured"]
            # only what the surviving processes measured: a lost process's rounds are not evidence
            side.samples = [x for p in live for x in p.samples]
            side.telemetry = [t for t in side.telemetry if t["process"] in {p.proc for p in live}]
            ran = any(p.side == s for p in parts.values())
            side.status = "measured" if live else "lost" if ran else "not run"  # not run: the other side ran out
            if not live:
                side.reason = "; ".join(p.reason for p in parts.values() if p.side == s and p.status == "lost")
        digests = {p.proc: p.digest for p in parts.values() if p.status == "measured"}
        if len(set(digests.values())) > 1:
            groups: dict[str | None, list[str]] = {}
            for pid, d in digests.items():
                groups.setdefault(d, []).append(pid)
            pair.digest_mismatch = " vs ".join(",".join(g) for g in groups.values())

    def _memory_of_both(self, pair: Paired, name: str, entries: dict, parts: dict[str, ProcPart],
                        res: dict[str, SideResult], where: str) -> None:
        """A benchmark that ran out of memory on one side names both sides' memory: a side with
        no report yet (it never ran, or ran on CPU) checks and captures it once, alone on the
        GPU (every process released), and releases it."""
        for s in SIDES:
            if res[s].memory is not None or res[s].status not in ("measured", "lost", "not run"):
                continue
            pid = next((p for p in self.workers if self.info[p].side == s), None)
            if pid is None:
                continue
            probe = ProcPart(pid, s, self.info[pid].slot, len(parts))
            side = SideResult()
            try:
                reply = self._ask(pid, {"op": "check", "case": entries[s]["case"], "memory": True}, f"check {name}")
                if reply.get("status") == "measured":
                    self._capture(pid, name, entries, probe, side, where, checked=reply.get("memory"))
                else:
                    side.memory = reply.get("memory")
                self._drop(pid, name, release=True)
            except WorkerLost as exc:
                self._lost(pid, name, "memory report of", exc)
                continue
            res[s].memory = side.memory
            self.progress(f"[{pid}] {where} {name}: {memory_figure(side.memory)} on side {s}, alone on the GPU")


def _failed(part: ProcPart, side: SideResult, reply: dict[str, Any], during: str) -> None:
    """A capture or round that did not measure: out of memory (with the process's memory report)
    or failed."""
    status = OUT_OF_MEMORY if reply.get("status") == OUT_OF_MEMORY else FAILED
    part.status, part.reason = status, f"{during}: {reply.get('reason')}"
    side.status, side.reason = status, part.reason
    side.memory = side.memory if status != OUT_OF_MEMORY else reply.get("memory") or side.memory

