"""What one ``fp4bench ab`` run is asked to do: the two environments (``Side``) and the run's
settings (``AbConfig``), checked when made."""

from __future__ import annotations

from dataclasses import dataclass, field

from fp4bench.ab.defaults import DEFAULTS
from fp4bench.gate.rule import RuleSettings
from fp4bench.run.sweep import SweepOptions


@dataclass(frozen=True)
class Side:
    """One environment: its interpreter (or venv), extra environment variables, and backend
    modules only this side loads (e.g. ``fp4bench.testing.slowdown`` on B, to test the gate)."""

    python: str
    env: dict[str, str] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()


@dataclass(frozen=True)
class AbConfig:
    sweep: SweepOptions
    device: str | None = None
    #: worker processes per side (independent replicates)
    replicates: int = DEFAULTS.replicates
    #: rounds every benchmark gets; more are added while the rule says MORE (up to ``max_rounds``)
    rounds: int = DEFAULTS.rounds
    round_samples: int = DEFAULTS.round_samples
    #: seconds of replays a process's round may take (``replays_per_round``)
    round_s: float = DEFAULTS.round_s
    max_rounds: int = DEFAULTS.max_rounds
    #: rounds added at a time while undecided
    more_rounds: int = 4
    #: process pairs that may join an undecided benchmark whose processes disagree, one at a time
    extra_pairs: int = DEFAULTS.extra_pairs
    #: at most this many processes hold one benchmark at once (None: as many as the GPU's
    #: free memory allows, read from the first process's capture)
    max_resident: int | None = None
    #: "process": one placement set per process and benchmark: its capture rotates over
    #: ``min_copies`` or more operand copies, each its own allocation, so every round already
    #: averages that many placements; "round": every round after a process's first times the
    #: case in fresh device memory as well (``worker.child.Child.time``, ``place``)
    placement: str = DEFAULTS.placement
    #: seconds for the whole run: rounds and processes are added only while the run's elapsed
    #: time plus the base cost of the benchmarks still to come stays within it
    time_budget_s: float = DEFAULTS.time_budget_s
    #: seconds of added measurement (after the base rounds) one benchmark may take
    benchmark_budget_s: float = DEFAULTS.benchmark_budget_s
    settings: RuleSettings = RuleSettings(floor=0.03)
    timeout_s: float = DEFAULTS.timeout_s
    plugins: tuple[str, ...] = ()
    cold_l2: bool = True
    seed: int = 0
    #: rotating operand copies every capture has at least (``measure.copies``): the same on both
    #: sides, from the GPU's L2 and total memory and the operand bytes; None: the runner's rule
    #: (``MIN_COPIES`` on a GPU, one copy on a CPU), as ``--min-copies`` left out gives it
    min_copies: int | None = None
    #: "span": a sample is the CUDA-graph replay's event span per call (what a graph-serving
    #: engine pays, launch gaps included), the kernel names come from the profiled capture step;
    #: "cupti": every round is profiled and a sample is kernel busy time, as in the pytest run.
    #: Both sides always use the same timer; "span" keeps the profiler out of the rounds.
    timer: str = "span"

    def __post_init__(self) -> None:
        if self.replicates < 2:
            raise ValueError(f"--replicates: need at least 2 processes per side, got {self.replicates}")
        if self.rounds < 2 or self.max_rounds < self.rounds or self.more_rounds < 1:
            raise ValueError(f"--rounds: need 2 <= rounds <= max rounds and a step >= 1, got {self.rounds}, "
                             f"{self.max_rounds}, {self.more_rounds}")
        if self.round_samples < 3:
            raise ValueError(f"--round-samples: need at least 3, got {self.round_samples}")
        if self.placement not in ("round", "process"):
            raise ValueError(f"--placement: expected round or process, got {self.placement!r}")
        if self.max_resident is not None and self.max_resident < 2:
            raise ValueError(f"--max-resident: need at least 2 (one process of each side), got {self.max_resident}")
        if not self.round_s > 0:
            raise ValueError(f"round_s: must be > 0 seconds, got {self.round_s!r}")
        for name in ("time_budget_s", "benchmark_budget_s", "timeout_s"):
            v = getattr(self, name)
            if not (v == v and v >= 0) or (name == "timeout_s" and not v > 0):
                raise ValueError(f"{name}: must be a number of seconds >= 0 (> 0 for a timeout), got {v!r}")
