"""The decisions of ``fp4bench ab``'s runner (``ab.rounds``: every process at once, or in turns)
without its workers: the same schedule, budgets and estimates (the real ``ab.estimate``
functions) over the values ``fakes.ab_noise`` draws, at the cost of a few estimates per
benchmark instead of hundreds of worker requests. tests/ab/test_ab_power.py shows it agrees with
``AbRunner.run`` on in-process fake workers decision for decision on whole runs, then uses it for
the rates that need thousands of benchmarks.

``run(rows, cfg)`` follows one ``AbRunner.run`` over ``rows.rows`` (one benchmark each),
the time on the simulated clock as the fake workers spend it (``ab_noise``'s costs), and returns
each benchmark's ``AbEstimate`` (None: not judged) and the run's simulated seconds.
"""

from __future__ import annotations

import math
import statistics

from fp4bench.ab.config import AbConfig
from fp4bench.ab.estimate import MIN_REPLICATES, ab_estimate, ab_estimate_paired
from fp4bench.ab.schedule import turns
from fp4bench.gate.rule import Decision

from fakes.ab_noise import CALL_S, CAPTURE_S, CHECK_S, ROUND_S, START_S, Rows, turn_of


class _Run:
    def __init__(self, rows: Rows, cfg: AbConfig):
        self.rows, self.cfg = rows, cfg
        self.t = 2 * cfg.replicates * START_S  # every process started, one at a time
        self.base_costs: list[float] = []

    def budget_left(self, remaining: int) -> bool:
        base = statistics.mean(self.base_costs) if self.base_costs else 0.0
        return self.t + base * remaining < self.cfg.time_budget_s

    def value(self, b: int, side: str, slot: int, k: int, solo: bool) -> float:
        offset, x = self.rows.draws(b, side, slot)
        y = offset + x[k]
        if solo:
            y += self.rows.turn_terms(b, side, slot)[turn_of(k, slot, self.cfg)]
        return CALL_S * math.exp(y)

    def one(self, b: int, remaining: int):
        cfg, kind = self.cfg, self.rows.rows[b].kind
        self.capacity = self.rows.rows[b].capacity
        t_start = self.t
        slots = cfg.replicates
        procs = [(s, i) for i in range(slots) for s in "AB"]
        join = CHECK_S[kind] + CAPTURE_S[kind]
        if self.capacity is not None and self.capacity < len(procs):
            return self.in_turns(b, remaining, t_start)
        self.t += len(procs) * join
        rounds: dict[str, dict[int, float]] = {f"{s}{i}": {} for s, i in procs}
        k = {p: 0 for p in rounds}
        r, t_base, extra = 0, 0.0, 0
        while True:
            for p in list(rounds):
                rounds[p][r] = self.value(b, p[0], int(p[1:]), k[p], False)
                k[p] += 1
                self.t += ROUND_S[kind]
            r += 1
            if r < cfg.rounds:
                continue
            if r == cfg.rounds:
                t_base = self.t
                self.base_costs.append(t_base - t_start)
            elif (r - cfg.rounds) % cfg.more_rounds:
                continue
            budget = self.budget_left(remaining) and self.t - t_base < cfg.benchmark_budget_s
            can_more = budget and r < cfg.max_rounds
            est = ab_estimate(rounds, {p: p[0] for p in rounds}, cfg.settings, budget_left=can_more)
            if est is None:
                if not budget or r >= cfg.max_rounds + cfg.rounds:
                    return None
                continue
            if est.decision is not Decision.MORE:
                return est
            fits = self.capacity is None or len(rounds) + 2 <= self.capacity
            if est.spread_dominates and extra < 2 * cfg.extra_pairs and fits:
                slot = slots + extra // 2
                for s in "AB":
                    rounds[f"{s}{slot}"] = {}
                    k[f"{s}{slot}"] = 0
                self.t += 2 * (START_S + join)
                extra += 2

    def in_turns(self, b: int, remaining: int, t_start: float):
        cfg, kind = self.cfg, self.rows.rows[b].kind
        slots = [(f"A{i}", f"B{i}") for i in range(cfg.replicates)]
        # the first process (slot 0's A on an even benchmark, its B on an odd one) opens
        first = "A" if b % 2 == 0 else "B"
        groups = turns(slots, self.capacity, first)
        solo = len(groups[0]) == 1
        join = CHECK_S[kind] + CAPTURE_S[kind]
        rounds: dict[str, dict[int, float]] = {}
        k: dict[str, int] = {}
        self.t += join  # the first process: checked and captured before the turns are planned
        rounds[f"{first}0"], k[f"{first}0"] = {}, 0
        resident = {f"{first}0"}
        r, passes, per_slot, t_base, extra = 0, 0, 0, 0.0, 0
        while True:
            n = cfg.rounds if passes == 0 else cfg.more_rounds
            for group in groups:
                members = [f"{side}{slot}" for slot, side in group]
                for p in members:
                    if p not in rounds:
                        rounds[p], k[p] = {}, 0
                        self.t += join
                    elif p not in resident:
                        self.t += CAPTURE_S[kind]
                for _ in range(n):
                    for p in members:
                        rounds[p][r] = self.value(b, p[0], int(p[1:]), k[p], solo)
                        k[p] += 1
                        self.t += ROUND_S[kind]
                    r += 1
                resident.clear()
            passes += 1
            per_slot += n
            if passes == 1:
                t_base = self.t
                self.base_costs.append(t_base - t_start)
            budget = self.budget_left(remaining) and self.t - t_base < cfg.benchmark_budget_s
            can_more = budget and per_slot < cfg.max_rounds
            est = ab_estimate_paired(rounds, {p: p[0] for p in rounds}, {p: int(p[1:]) for p in rounds},
                                     cfg.settings, budget_left=can_more, solo=solo)
            if est is None:
                if len(slots) < MIN_REPLICATES or not can_more:
                    return None
                continue
            if est.decision is not Decision.MORE:
                return est
            if est.spread_dominates and extra < 2 * cfg.extra_pairs:
                slot = cfg.replicates + extra // 2
                self.t += 2 * START_S
                extra += 2
                order = ("A", "B") if slot % 2 == 0 else ("B", "A")  # start order of the new slot
                added = [(slot, s) for s in order]
                groups = groups + ([[x] for x in added] if solo else [added])


def run(rows: Rows, cfg: AbConfig):
    """Every benchmark's estimate (None: not judged) and the run's simulated seconds."""
    sim = _Run(rows, cfg)
    out = []
    for b in range(len(rows.rows)):
        out.append(sim.one(b, len(rows.rows) - b - 1))
    return out, sim.t
