"""What an ``fp4bench ab`` run produced: per benchmark the two sides' results and every process's
part (``Paired``), the processes and their crashes, and the run as a whole (``AbRun``, with each
GPU's part when it ran on several)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fp4bench.ab.estimate import AbEstimate
from fp4bench.gate.rule import RuleSettings


@dataclass
class SideResult:
    """What one side produced for one benchmark (its processes together)."""

    status: str = "pending"  # measured | failed | skipped | unsupported | lost | out of memory
    reason: str = ""
    samples: list[float] = field(default_factory=list)
    #: the memory report (bytes: ``peak`` of one process, ``free`` and ``total`` of the GPU) of
    #: this side's first capture, or of the process that ran out of memory; None off CUDA
    memory: dict[str, int] | None = None
    extra_info: dict[str, Any] = field(default_factory=dict)
    digest: str | None = None
    check_s: float = 0.0  # prepare + verify wall time (JIT build/load included), all processes
    #: NVML per timing round (SM clock, power, temperature, throttling); empty on CPU
    telemetry: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class ProcPart:
    """One process's part of one benchmark."""

    proc: str
    side: str
    slot: int
    #: position in this benchmark's check/capture order (0 = allocated first)
    alloc_index: int
    status: str = "pending"  # measured | failed | out of memory | lost (died: its rounds are not used)
    reason: str = ""
    digest: str | None = None
    #: round index -> median seconds of that round's samples
    rounds: dict[int, float] = field(default_factory=dict)
    #: captured and not timed since: the next round uses this placement as it is
    fresh: bool = False
    samples: list[float] = field(default_factory=list)


@dataclass
class ProcInfo:
    """One worker process of the run."""

    proc: str
    side: str
    slot: int
    start_index: int  # 0 = started first in the run
    pid: int | None = None
    extra: bool = False  # joined one undecided benchmark only
    replaces: str | None = None
    crash: str | None = None


@dataclass(frozen=True)
class Crash:
    proc: str
    side: str
    benchmark: str
    during: str
    reason: str


@dataclass
class Paired:
    name: str
    a: SideResult
    b: SideResult
    #: the process ids of every round, in the order they were timed
    order: list[list[str]] = field(default_factory=list)
    parts: list[ProcPart] = field(default_factory=list)
    estimate: AbEstimate | None = None
    #: why rounds stopped: decided, budget, rounds cap, ...
    stopped: str = ""
    crashes: list[Crash] = field(default_factory=list)
    #: set when the processes' operand digests differ: which processes share which digest
    digest_mismatch: str = ""
    #: the processes of each turn when the slots took turns (device memory); empty: all at once
    turns: list[list[str]] = field(default_factory=list)
    #: the first capturing process's memory report (bytes: peak, free, total); None off CUDA
    memory: dict[str, int] | None = None
    #: processes that may hold this benchmark at once (``schedule.resident_capacity``); None: no limit
    capacity: int | None = None
    #: replays per process and round (``replays_per_round``), the same in every round and process
    round_samples: int | None = None
    #: seconds this benchmark took, checks, captures, rounds and releases included
    wall_s: float = 0.0


@dataclass
class AbRun:
    fingerprints: dict[str, dict]
    versions: dict[str, dict[str, str | None]]
    pairs: list[Paired]
    check_seconds: dict[str, float]
    #: per side, the test-only backends its worker registered (``{name: description}``)
    test_only: dict[str, dict[str, str]] = field(default_factory=dict)
    #: benchmarks listed but never judged because the run was interrupted (Ctrl-C / SIGINT)
    not_reached: list[str] = field(default_factory=list)
    processes: list[ProcInfo] = field(default_factory=list)
    crashes: list[Crash] = field(default_factory=list)
    settings: RuleSettings = RuleSettings(floor=0.03)
    wall_s: float = 0.0
    #: backend names each side's workers registered
    known_backends: dict[str, list[str]] = field(default_factory=dict)
    #: a run spread over several GPUs (``ab.multi``): each GPU's part; empty for a one-GPU run
    gpus: list[GpuPart] = field(default_factory=list)
    #: benchmark -> UUID of the GPU that measured it (several GPUs only)
    gpu_of: dict[str, str] = field(default_factory=dict)


@dataclass
class GpuPart:
    """One GPU's part of a run spread over several GPUs: the benchmarks the partition gave it,
    its own run (None when it never listed the sweep) and why it stopped early, if it did."""

    index: int
    uuid: str
    name: str
    benchmarks: list[str] = field(default_factory=list)
    run: AbRun | None = None
    #: every benchmark its workers listed, and every GPU's share as that listing partitions it
    listed: list[str] = field(default_factory=list)
    planned: list[list[str]] = field(default_factory=list)
    #: the exception that ended its run ('' when it finished or was interrupted)
    error: str = ""
