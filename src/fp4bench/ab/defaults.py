"""The default size of an ``fp4bench ab`` run, importable without torch/numpy/scipy, so that
``fp4bench ab --help`` can show them (``ab.config.AbConfig`` takes its defaults from here).
Why each value is what it is: docs/ab.md ("Defaults and why", "Wall-time estimate")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AbDefaults:
    replicates: int = 3  # worker processes per side
    rounds: int = 6  # rounds every benchmark gets
    round_samples: int = 10  # replays per process and round (at most: see round_s)
    #: seconds of replays one process's round may take: a benchmark whose replay is longer than
    #: round_s / round_samples (the eager emulation rows, 0.1 s a call at b512) takes fewer
    #: replays per round, at least 3, the same number on both sides (``ab.benchmark.replays_per_round``)
    round_s: float = 0.25
    max_rounds: int = 16  # rounds an undecided benchmark may grow to
    #: process pairs an undecided benchmark may add, one at a time, when its processes disagree
    #: more than their rounds scatter: up to 7 processes a side, what the simulation test
    #: (tests/gate/test_rule_simulation.py) needs for a +3 % change to FAIL in >= 95 % of benchmarks
    #: once each process also carries its placement offset (6 a side: 93.8 %, 7: 97.3 %)
    extra_pairs: int = 4
    #: "process": one placement set per process and benchmark (every capture already averages
    #: ``min_copies`` placements, measure.copies); "round": every round after a process's first
    #: in fresh device memory, at ~0.3-0.7 s a round and process
    placement: str = "process"
    time_budget_s: float = 600.0  # the whole run
    benchmark_budget_s: float = 30.0  # added measurement per benchmark
    timeout_s: float = 900.0  # one request before it is a hang


DEFAULTS = AbDefaults()
