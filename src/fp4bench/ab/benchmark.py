"""One benchmark on every process of an ``fp4bench ab`` run: check, capture, rounds, release.

Per benchmark, every process first checks correctness (prepare + verify: FlashInfer JIT modules
are built and loaded here, never inside a measurement) and reports a digest of its operand
bytes, which must be the same in every process. Each process then captures the case once and
replays the capture in every round (``worker.child.Child.time``; the rounds: ``ab.rounds``).
Device memory: the first process to capture a benchmark reports its memory peak and the GPU's
free memory (``worker.child.device_memory``), which sizes the turns (``ab.schedule``). Between
benchmarks of different problems every process releases its cached operands and references, so
an idle process holds only its CUDA context.
"""

from __future__ import annotations

import statistics
from fp4bench import clock
from typing import Any

from fp4bench.ab.config import AbConfig
from fp4bench.ab.estimate import AbEstimate, ab_estimate, ab_estimate_paired
from fp4bench.ab.records import Paired, ProcInfo, ProcPart, SideResult
from fp4bench.ab.rounds import Rounds
from fp4bench.ab.schedule import SIDES, alloc_order, memory_figure, resident_capacity, start_order, turns
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
        pair.memory = self._join(order[0], name, entries, parts, res, where, memory=True)
        pair.capacity = resident_capacity(pair.memory, self.cfg.max_resident)
        first = self.info[order[0]].side
        groups = turns(self._slot_tuples(), pair.capacity, first)
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
            groups = turns(self._slot_tuples(), pair.capacity, first)
        if res[self.info[order[0]].side].status == OUT_OF_MEMORY:
            pair.stopped = "out of memory"  # one process alone does not fit: nothing to share the GPU with
        elif len(groups) <= 1:
            for pid in order[1:]:
                if res[self.info[pid].side].status == FAILED:  # one failed check per side is enough
                    continue
                if any(res[s].status == OUT_OF_MEMORY for s in SIDES):
                    break
                self._join(pid, name, entries, parts, res, where)
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
                side.memory = side.memory or reply.get("memory")
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
        # the first capture of each side reports its memory: the figure an out-of-memory names
        reply = self._ask(pid, {"op": "time", "case": entries[part.side]["case"], "samples": 3,
                                "kernel_time": names, "memory": memory or side.memory is None}, f"capture {name}")
        if reply.get("status") != "measured":
            _failed(part, side, reply, "while capturing")
            return None
        side.memory = side.memory or reply.get("memory")
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
                reply = self._ask(pid, {"op": "check", "case": entries[s]["case"]}, f"check {name}")
                if reply.get("status") == "measured":
                    self._capture(pid, name, entries, probe, side, memory=True)
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

