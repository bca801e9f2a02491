"""The default size of an ``fp4bench ab`` run, importable without torch/numpy/scipy, so that
``fp4bench ab --help`` can show them (``ab.config.AbConfig`` takes its defaults from here).
Why each value is what it is: docs/ab.md ("Defaults and why", "Wall-time estimate")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class AbDefaults:
    #: worker processes per side. 6 with the budgets below: what a +3 % change on one side needs
    #: to FAIL in >= 95 % of benchmarks of every row kind in the runner's own loop
    #: (tests/ab/test_ab_power.py)
    replicates: int = 6
    rounds: int = 6  # rounds every benchmark gets
    round_samples: int = 10  # replays per process and round (at most: see round_s)
    #: seconds of replays one process's round may take: a benchmark whose replay is longer than
    #: round_s / round_samples (the eager emulation rows, 0.1 s a call at b512) takes fewer
    #: replays per round, at least 3, the same number on both sides (``ab.benchmark.replays_per_round``)
    round_s: float = 0.25
    max_rounds: int = 40  # rounds an undecided benchmark may grow to
    #: process pairs an undecided benchmark may add, one at a time, when its processes disagree
    #: more than their rounds scatter (tests/ab/test_ab_power.py: the rows that take turns one
    #: process at a time need them most)
    extra_pairs: int = 8
    #: "process": one placement set per process and benchmark (every capture already averages
    #: ``min_copies`` placements, measure.copies); "round": every round after a process's first
    #: in fresh device memory, at ~0.3-0.7 s a round and process
    placement: str = "process"
    #: the whole run: the default sweep at +3 % on every row takes ~13 min simulated (p90 ~17 min)
    time_budget_s: float = 1800.0
    benchmark_budget_s: float = 120.0  # added measurement per benchmark
    timeout_s: float = 900.0  # one request before it is a hang


DEFAULTS = AbDefaults()
