"""The rounds of one benchmark in an ``fp4bench ab`` run: every process at once, or in turns.

A round visits every live process with a fixed sample count (``ab.schedule.round_order``).
After ``rounds`` rounds the benchmark is estimated (``ab.estimate``); while the rule says MORE
and the time budget allows, rounds are added, and when the processes disagree more than their
rounds scatter, one more process pair joins for that benchmark.

When the other processes would not fit beside the first one's capture
(``schedule.resident_capacity``, or ``--max-resident``) the processes take turns
(``schedule.turns``: whole slots while a slot fits, else one process a turn), each turn timed in
its own rounds and released before the next one captures, and the benchmark is estimated per
slot (``ab.estimate.ab_estimate_paired``).
"""

from __future__ import annotations

from fp4bench import clock

from fp4bench.ab.config import AbConfig
from fp4bench.ab.estimate import MIN_REPLICATES, AbEstimate
from fp4bench.ab.records import Paired, ProcPart, SideResult
from fp4bench.ab.schedule import SIDES, Place, alloc_order, fits, round_order
from fp4bench.gate.rule import Decision
from fp4bench.run.case import FAILED, OUT_OF_MEMORY
from fp4bench.run.worker.pool import WorkerLost


def _stopped(est: AbEstimate, budget: bool, cfg: AbConfig) -> str:
    """Why a decided benchmark's rounds stopped."""
    if est.decision is not Decision.AMBIGUOUS:
        return "decided"
    return "time budget spent" if not budget else f"{cfg.max_rounds} rounds"


def halted(pair: Paired, res: dict[str, SideResult]) -> bool:
    """A side failed its check or ran out of memory: the benchmark's rounds stop (its reason in
    ``pair.stopped``)."""
    for status, why in ((FAILED, "a check failed"), (OUT_OF_MEMORY, "out of memory")):
        if any(res[s].status == status for s in SIDES):
            pair.stopped = why
            return True
    return False


def _memory_line(memory: dict[str, int] | None) -> str:
    if not memory:
        return "memory: no report"
    gib = 1 << 30
    return (f"memory: {memory['peak'] / gib:.1f} GiB per process, {memory['free'] / gib:.1f} of "
            f"{memory['total'] / gib:.1f} GiB free beside the first")


class Rounds:
    """The rounds loops, as methods of ``ab.run.AbRunner``."""

    def _rounds(self, pair: Paired, name: str, entries: dict, parts: dict[str, ProcPart],
                res: dict[str, SideResult], where: str, index: int, remaining: int, t_start: float,
                extra: list[str]) -> None:
        """Rounds over every live process until the rule decides or the budget is spent. A process
        that joins meanwhile (a replacement, an added pair) never makes the others release the
        captures their rounds replay (``_fitting``)."""
        self._no_release = True
        try:
            self._all_rounds(pair, name, entries, parts, res, where, remaining, t_start, extra)
        finally:
            self._no_release = False

    def _all_rounds(self, pair: Paired, name: str, entries: dict, parts: dict[str, ProcPart],
                    res: dict[str, SideResult], where: str, remaining: int, t_start: float, extra: list[str]) -> None:
        cfg = self.cfg
        r, t_base = 0, 0.0
        while True:
            if halted(pair, res):
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

    def _in_turns(self, pair: Paired, groups: list[list[Place]], name: str, entries: dict,
                  parts: dict[str, ProcPart], res: dict[str, SideResult], where: str, index: int, remaining: int,
                  t_start: float, extra: list[str]) -> None:
        """The processes in turns (module docstring): each pass gives every turn its rounds (the
        base rounds, then ``more_rounds`` while the rule says MORE); a turn's processes capture at
        its start, once the GPU's free memory holds them (``_room_for``), and release at its end.
        One more slot joins as its own turn (or two, one process each) when the slots disagree
        more than their rounds scatter."""
        cfg = self.cfg
        r, passes, per_slot = 0, 0, 0
        solo = len(groups[0]) == 1
        size = "1 process" if solo else f"{len(groups[0]) // 2} slot{'s' if len(groups[0]) > 2 else ''}"
        self.progress(f"{where} {name}: {_memory_line(pair.memory)}; {len(groups)} turns of {size}")
        while True:
            n = cfg.rounds if passes == 0 else cfg.more_rounds
            for turn_places in groups:
                slots = self._turn_slots(turn_places)
                if not self._held(parts) and not self._room_for(pair, slots, name):
                    return
                # a second pass captures again what a retry of a later process released (``_fitting``)
                for again in (False, True):
                    for pid in alloc_order(slots, index):
                        if res[self.info[pid].side].status in (FAILED, OUT_OF_MEMORY):
                            continue
                        if pid not in parts and not again:
                            self._join(pid, name, entries, parts, res, where)
                        elif pid in parts and parts[pid].status == "measured" and pid not in self._holding:
                            self._recapture(pid, name, entries, parts, res, where)
                    slots = self._turn_slots(turn_places)  # a replacement took a lost process's place
                if halted(pair, res):
                    return
                turn: list[str] = []
                self._no_release = True  # as in ``_rounds``: a replacement leaves the turn's captures
                try:
                    for _ in range(n):
                        order = [p for p in round_order(slots, r) if p in parts and parts[p].status == "measured"]
                        for pid in order:
                            self._round(pid, r, name, entries, parts, res, where)
                        pair.order.append(order)
                        turn += [p for p in order if p not in turn]
                        r += 1
                finally:
                    self._no_release = False
                if passes == 0:
                    pair.turns.append(turn)
                for pid in self._held(parts):
                    self._drop(pid, name, release=True)
                if halted(pair, res):
                    return
            passes += 1
            per_slot += n
            if passes == 1:
                t_base = clock.now()
                self._base_costs.append(t_base - t_start)
            budget = self._budget_left(remaining) and clock.now() - t_base < cfg.benchmark_budget_s
            can_more = budget and per_slot < cfg.max_rounds
            est = pair.estimate = self._estimate(parts, budget_left=can_more, paired=True, solo=solo)
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
                # started now and checked in turns of their own from the next pass on: checked
                # beside any other process, they would need memory the GPU does not have
                got = self._extra_pair(name, entries, parts, res, where, join=False)
                extra += got
                if got:
                    slot = self.info[got[0]].slot
                    added = [(slot, self.info[p].side) for p in got]
                    groups = groups + ([[x] for x in added] if solo else [added])

    def _held(self, parts: dict[str, ProcPart]) -> list[str]:
        """The live processes of this benchmark that hold device memory (``AbRunner._holding``)."""
        return [p for p in parts if p in self.workers and p in self._holding]

    def _turn_slots(self, places: list[Place]) -> list[tuple[str | None, str | None]]:
        """The slots of one turn with only its processes (the other side's process of a slot
        that is not in this turn left out)."""
        by_slot: dict[int, list[str | None]] = {}
        for slot, side in places:
            if slot < len(self.slots):
                by_slot.setdefault(slot, [None, None])[SIDES.index(side)] = self.slots[slot][SIDES.index(side)]
        return [(a, b) for a, b in by_slot.values()]

    def _room_for(self, pair: Paired, slots: list[tuple[str | None, str | None]], name: str) -> bool:
        """Before a turn captures: whether the GPU's free memory (read now, with every other
        process released) holds its processes at the first capture's peak. When it does not, the
        idle processes release again and it is read once more; still short, both sides of the
        benchmark are out of memory (the run goes on with the next benchmark)."""
        procs = [p for s in slots for p in s if p is not None and p in self.workers]
        if not pair.memory or not procs:
            return True
        peak = int(pair.memory["peak"])
        now = None
        for attempt in range(2):
            try:
                now = self._ask(procs[0], {"op": "memory"}, "memory").get("memory")
            except WorkerLost as exc:
                self._lost(procs[0], name, "memory report of", exc)
                return True  # the turn's own loop replaces it and meets the shortage, if any
            if fits(now, peak, len(procs)):
                return True
            if attempt == 0:
                for pid in [p for p in self.workers if p not in procs]:
                    self._drop(pid, name, release=True)
        gib = 1 << 30
        why = (f"not runnable on this GPU for ab: a turn of {len(procs)} process{'es' if len(procs) > 1 else ''} "
               f"needs {len(procs) * peak / gib:.1f} GiB plus headroom, {int(now['free']) / gib:.1f} of "
               f"{int(now['total']) / gib:.1f} GiB free with every other process of the run released "
               "(another process holds the rest)")
        self.progress(f"[{procs[0]}] {name}: {why}")
        for side in pair.a, pair.b:
            if side.status in ("pending", "measured"):
                side.status, side.reason = OUT_OF_MEMORY, why
                side.memory = side.memory or dict(now)
        pair.stopped = "out of memory"
        return False
