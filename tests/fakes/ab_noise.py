"""H200-like noise and costs for ``fp4bench ab`` runs on in-process fake workers, and the same
draws for ``fakes.ab_loop`` (the runner's decisions without the workers), so the two can be
compared decision for decision (tests/ab/test_ab_power.py).

Every number a process's round gives is drawn here, in log time, from one stream per
(benchmark, side, slot) (``Rows.draws``): the process's offset, then one value per round it
takes part in, in its own round order (``noise_model``'s terms: the benchmark's within-window
error ``sd``, ``WINDOW_SIGMA``, the fp8 grouped rows' ``drift``, the power-state jumps; the
offset is ``PROCESS_SIGMA`` with the row's ab placement term). What a round shares with the
other processes in it cancels exactly in the estimate (a round is centred across its processes;
a turn of one slot takes ``log B - log A`` of the same round), so it is not drawn; when the sides
take turns one process at a time nothing is shared, and each run of a process's rounds (its base
rounds, then each batch of ``more_rounds``) carries its own turn term ``turn_sigma``.

``heavy`` is the audit's heavier-tailed variant (within what the H200 data allow): offsets from
a Student t with 4 degrees of freedom scaled to the same sd, and twice as many jumps, up to 4 %.

Costs (simulated seconds, from the H200 wall times of docs/ab.md, run 28: process starts and
listing ~68 s for 6; a dense row 0.9-1.3 s with 6 processes, a grouped row 5-14 s, a fused-MoE
row 17-20 s with checks of 4-7 s a side): a process start ``START_S`` (a pair ~22 s), a check, a
capture and a round (a process's replays) per row kind. The values are off round numbers so that
no budget comparison of the runner lands on a tie.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import fakes.noise_model as nm

#: rounds drawn per process (more than any benchmark takes)
MAX_ROUNDS = 64
START_S = 10.9137
CHECK_S = {"dense": 0.0713, "grouped": 0.9137, "moe": 2.3171}
CAPTURE_S = {"dense": 0.0519, "grouped": 0.4613, "moe": 0.3377}
ROUND_S = {"dense": 0.0127, "grouped": 0.0513, "moe": 0.0519}
#: the scale of a simulated kernel call: its time is this times exp(the drawn log time). Small,
#: so the costs above are what the runner's budgets see (a round's replays add < 3e-6 s)
CALL_S = 1e-9


@dataclass(frozen=True)
class Row:
    """One benchmark's noise: ``sd`` (a round's log-median error), ``place`` (the ab placement
    offset sd), ``drift`` (extra per round), ``kind`` (dense / grouped / moe: its costs),
    ``capacity`` (its memory: ``fakes.ab_loop`` takes turns below a side's processes)."""

    kind: str
    sd: float
    place: float
    drift: float = 0.0
    #: processes the GPU holds at once on this row (None: all); fewer than a side's processes: turns
    capacity: int | None = None


@dataclass
class Rows:
    """The benchmarks of a simulated run, their effect on side B (log) and the noise variant."""

    rows: list[Row]
    effect: float = 0.0
    seed: int = 0
    heavy: bool = True
    process_scale: float = 1.0
    turn_sigma: float = nm.PASS_SIGMA
    cache: dict = field(default_factory=dict)

    def draws(self, bench: int, side: str, slot: int) -> tuple[float, np.ndarray]:
        """(offset, round values) of the process in ``slot`` of ``side`` on benchmark ``bench``."""
        key = (bench, side, slot)
        if key not in self.cache:
            row = self.rows[bench]
            rng = np.random.default_rng([self.seed, bench, "AB".index(side), slot])
            sd_off = math.hypot(nm.PROCESS_SIGMA * self.process_scale, row.place)
            z = rng.standard_t(4) / math.sqrt(2.0) if self.heavy else rng.normal()  # t(4) has variance 2
            offset = z * sd_off + (self.effect if side == "B" else 0.0)
            n = MAX_ROUNDS
            x = rng.normal(0.0, 1.0, n) * row.sd + rng.normal(0.0, nm.WINDOW_SIGMA, n)
            x += rng.normal(0.0, 1.0, n) * row.drift
            p, hi = (2 * nm.JUMP_P, 0.04) if self.heavy else (nm.JUMP_P, nm.JUMP_HI)
            x += (rng.random(n) < p) * rng.choice([-1.0, 1.0], n) * rng.uniform(nm.JUMP_LO, hi, n)
            turns = rng.normal(0.0, self.turn_sigma, n)  # one per run of rounds (solo turns only)
            self.cache[key] = (offset, x, turns)
        offset, x, _ = self.cache[key]
        return offset, x

    def turn_terms(self, bench: int, side: str, slot: int) -> np.ndarray:
        self.draws(bench, side, slot)
        return self.cache[(bench, side, slot)][2]


def turn_of(k: int, slot: int, cfg) -> int:
    """Which of its turns a process's ``k``-th round falls in: the base ``rounds``, then runs of
    ``more_rounds`` (a slot that joined later starts with a run of ``more_rounds``)."""
    first = cfg.rounds if slot < cfg.replicates else cfg.more_rounds
    return 0 if k < first else 1 + (k - first) // cfg.more_rounds


def suite_rows(kind: str, n: int, rng: np.random.Generator) -> list[Row]:
    """``n`` rows of ``kind`` drawn from the committed H200 baseline's benchmarks of that kind
    (``noise_model.h200_suite``; torch-reference rows, which ab times only when named, left out)."""
    pool = _pool(kind)
    return [pool[i] for i in rng.integers(0, len(pool), n)]


@functools.cache
def _pool(kind: str) -> tuple[Row, ...]:
    """Every row of ``kind`` the committed H200 baseline gives (read once a process)."""
    from fp4bench.gate.baseline import load_baseline

    pool = []
    for rec in load_baseline(nm.APPROVED).benchmarks.values():
        info = rec.extra_info
        if info.get("kind") != kind or info.get("backend") == "torch-reference":
            continue
        x = np.log(np.asarray(rec.samples))
        sd = 1.2533 * 1.4826 * float(np.median(np.abs(x - np.median(x)))) / math.sqrt(x.size)
        place = nm.AB_PLACE_DENSE if kind == "dense" else nm.PLACE_SIGMA[kind]
        drift = nm.FP8_GROUPED_DRIFT if kind == "grouped" and info.get("backend") == "torch-fp8" else 0.0
        pool.append(Row(kind, sd, place, drift))
    return tuple(pool)


class Fake:
    """The in-process fake workers' side of ``Rows``: ``behaviour(side)`` for
    ``inproc_worker.workers`` (a check assigns the process its slot on that benchmark, a round
    request its next drawn value, every request its cost on the simulated clock)."""

    def __init__(self, rows: Rows, cfg, solo: bool = False, gpu=None):
        self.rows, self.index = rows, {}
        self.cfg, self.solo, self.gpu = cfg, solo, gpu
        if gpu is not None:
            gpu.use()
        self.joined: dict[tuple[int, str], int] = {}
        self.state: dict[int, dict[str, Any]] = {}  # fake process serial -> its benchmark, slot, rounds

    def _bench(self, req: dict[str, Any]) -> int:
        """The benchmark of a request: its index in the order the run first checks each case."""
        key = (req["case"]["backend"], req["case"]["tactic"], str(req["case"]["problem"]))
        return self.index.setdefault(key, len(self.index))

    def fault(self, process, req: dict[str, Any]) -> None:
        from fp4bench import clock

        op, st = req.get("op"), self.state.setdefault(process.serial, {})
        st["call_s"] = CALL_S  # every kernel call of this request (outside a round: its scale)
        if self.gpu is not None:
            self.gpu.on_request(process, req)
        if op == "check":
            b = self._bench(req)
            slot = self.joined.get((b, process.side), 0)
            self.joined[(b, process.side)] = slot + 1
            st.update(bench=b, slot=slot, k=0)
            clock.advance(CHECK_S[self.rows.rows[b].kind])
        elif op == "time" and req.get("kernel_time"):  # a capture (span timer: profiled once)
            clock.advance(CAPTURE_S[self.rows.rows[st["bench"]].kind])
        elif op == "time":
            k = st["k"]
            st["k"] += 1
            st["call_s"] = self._round_call_s(st["bench"], process.side, st["slot"], k)
            clock.advance(ROUND_S[self.rows.rows[st["bench"]].kind])
        return None

    def _round_call_s(self, bench: int, side: str, slot: int, k: int) -> float:
        """The time of every kernel call of the process's ``k``-th round (drawn once a round: a
        round times hundreds of calls)."""
        offset, x = self.rows.draws(bench, side, slot)
        y = offset + x[k]
        if self.solo:
            y += self.rows.turn_terms(bench, side, slot)[turn_of(k, slot, self.cfg)]
        return CALL_S * math.exp(y)

    def kernel_s(self, process, t: float) -> float:
        st = self.state.get(process.serial)
        return CALL_S if st is None else st["call_s"]

    def behaviour(self, side: str):
        from fakes import inproc_worker as inproc

        memory = self.gpu.report if self.gpu is not None else None
        return inproc.Behaviour(call_s=CALL_S, start_s=START_S, fault=self.fault, kernel_s=self.kernel_s,
                                memory=memory)
