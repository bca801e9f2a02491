"""The rounds of one benchmark in an ``fp4bench ab`` run: every process at once, or in turns.

A round visits every live process with a fixed sample count (``ab.schedule.round_order``).
After ``rounds`` rounds the benchmark is estimated (``ab.estimate``); while the rule says MORE
and the time budget allows, rounds are added, and when the processes disagree more than their
rounds scatter, one more process pair joins for that benchmark.

When the other processes would not fit beside the first one's capture
(``schedule.resident_capacity``, or ``--max-resident``) the slots take turns
(``schedule.turns``), each turn timed in its own rounds and released before the next one
captures, and the benchmark is estimated per slot (``ab.estimate.ab_estimate_paired``).
"""

from __future__ import annotations

from fp4bench import clock

from fp4bench.ab.config import AbConfig
from fp4bench.ab.estimate import MIN_REPLICATES, AbEstimate
from fp4bench.ab.records import Paired, ProcPart, SideResult
from fp4bench.ab.schedule import SIDES, alloc_order, round_order
from fp4bench.gate.rule import Decision
from fp4bench.run.worker.pool import WorkerLost


def _stopped(est: AbEstimate, budget: bool, cfg: AbConfig) -> str:
    """Why a decided benchmark's rounds stopped."""
    if est.decision is not Decision.AMBIGUOUS:
        return "decided"
    return "time budget spent" if not budget else f"{cfg.max_rounds} rounds"


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
