"""Who starts, allocates and times when: the order of an ``fp4bench ab`` run's processes.

Each side runs in ``R`` worker processes ("replicates"); replicate ``i`` of A and of B form
*slot* ``i``. Three orders are fixed here, each alternating so that whatever favours "first"
(physical placement of the first allocations, the first CUDA context, a drifting GPU state)
falls on both sides alike:

* **start**: slot ``i`` starts A before B when ``i`` is even, B before A when odd
  (A1, B1, B2, A2, A3, B3, ...);
* **allocation** (check, prepare, graph capture of one benchmark): the same pattern, flipped
  for every other benchmark, so over two benchmarks each slot's A and B allocate first once;
* **rounds**: every round visits every live process once. Round pair ``k`` (rounds ``2k`` and
  ``2k+1``) uses one sequence and its reverse, so each process's mean position within the pair
  of rounds is the middle (a linear drift adds the same to every process); the first process of
  a round goes A, B, B, A, A, B, ... so each side opens half the rounds; the slots rotate by one
  per round pair, so no process always sits next to the same neighbour.

**Turns** (device memory): every process holds a benchmark's operands, references, prepared
layouts, cold-L2 copies and graph while it is timed. When the first process to capture a
benchmark reports that the GPU cannot hold all of them at once (``resident_capacity``), the
processes take turns (``turns``), each turn timed in rounds of its own and then released before
the next turn captures. While two processes fit, a turn is a group of whole slots, A and B of a
slot always in the same turn (their rounds are shared: the pairing holds). When only one fits,
a turn is one process and the sides alternate in the start pattern (A1, B1, B2, A2, A3, B3, ...:
a slot's two turns are adjacent, and a drift that is linear over the turns falls on both sides
alike); a slot's A and B then share no round (``ab.estimate.ab_estimate_paired``, ``solo``).
Before a turn captures, the GPU's free memory is read again (``fits``): a process that still
holds memory it released would make the turn run out of memory.
"""

from __future__ import annotations

from typing import Sequence

SIDES = ("A", "B")

#: one slot: (A's process id or None, B's process id or None)
Slot = tuple[str | None, str | None]


def _pair(slot: Slot, a_first: bool) -> list[str]:
    a, b = slot
    return [p for p in ((a, b) if a_first else (b, a)) if p is not None]


def start_order(replicates: int) -> list[tuple[str, int]]:
    """(side, slot) in the order the processes are started."""
    if replicates < 1:
        raise ValueError(f"need at least one replicate per side, got {replicates}")
    out: list[tuple[str, int]] = []
    for i in range(replicates):
        out += [("A", i), ("B", i)] if i % 2 == 0 else [("B", i), ("A", i)]
    return out


def alloc_order(slots: Sequence[Slot], benchmark_index: int) -> list[str]:
    """The process ids in the order they check, prepare and capture one benchmark."""
    return [p for i, s in enumerate(slots) for p in _pair(s, (i + benchmark_index) % 2 == 0)]


def round_order(slots: Sequence[Slot], r: int) -> list[str]:
    """The process ids in the order round ``r`` times them (module docstring)."""
    n = len(slots)
    if n == 0:
        return []
    k = r // 2
    x_is_a = k % 2 == 0  # the side that opens the even round of this pair
    seq: list[str] = []
    for pos in range(n):
        slot = slots[(k + pos) % n]
        # X first at even positions and always in the last slot, so the sequence ends on the
        # other side and its reverse (the odd round) opens with that side
        x_first = pos % 2 == 0 or pos == n - 1
        seq += _pair(slot, x_first == x_is_a)
    return seq if r % 2 == 0 else seq[::-1]


#: GPU memory kept free beyond the resident processes' peaks: allocator fragmentation, the
#: idle processes' CUDA contexts, what a capture's graph pool adds after the peak was read
HEADROOM_FRACTION = 0.05
HEADROOM_MIN_BYTES = 2 << 30


def resident_capacity(memory: dict | None, limit: int | None = None) -> int | None:
    """How many processes may hold one benchmark at once: the first process to capture it (its
    figure ``{"peak", "free", "total"}`` in bytes: the larger peak of its check and its capture,
    ``larger_peak``, and the free memory after its capture) plus as many more as fit in the free
    memory left above the headroom, each needing that peak (a later process checks beside the
    earlier ones' captures). ``limit``
    (``--max-resident``) caps it. None: no limit (no report, e.g. on CPU, and no ``limit``)."""
    cap = None
    if memory:
        peak, free = int(memory["peak"]), int(memory["free"])
        cap = 1 + max(0, free - _headroom(memory)) // max(1, peak)
    if limit is not None:
        cap = limit if cap is None else min(cap, limit)
    return cap


#: one process's place in a turn: (slot index, side)
Place = tuple[int, str]


def turns(slots: Sequence[Slot], capacity: int | None, first: str = "A") -> list[list[Place]]:
    """The processes of ``slots`` grouped into turns of at most ``capacity`` processes (module
    docstring): one turn of every process when they all fit (or ``capacity`` is None); turns of
    ``capacity // 2`` whole slots while a slot fits; else one process a turn, side ``first``
    opening slot 0 and the order alternating per slot (A B, B A, A B, ...)."""
    live = [i for i, s in enumerate(slots) if s != (None, None)]
    places = [[(i, side) for side, p in zip(SIDES, slots[i]) if p is not None] for i in live]
    procs = sum(len(x) for x in places)
    if capacity is None or capacity >= procs:
        return [[x for slot in places for x in slot]] if live else []
    if capacity >= 2:
        per = capacity // 2
        return [[x for slot in places[k:k + per] for x in slot] for k in range(0, len(places), per)]
    out = []
    for k, slot in enumerate(places):
        a_first = (first == "A") == (k % 2 == 0)
        out += [[x] for x in sorted(slot, key=lambda x: (x[1] == "A") != a_first)]
    return out


def fits(memory: dict | None, peak: int, processes: int) -> bool:
    """Whether ``processes`` more processes of ``peak`` bytes each fit in the free memory of a
    ``{"free", "total"}`` report (bytes), above the headroom; True without a report (CPU)."""
    return not memory or int(memory["free"]) - _headroom(memory) >= processes * peak


def _headroom(memory: dict) -> int:
    return max(HEADROOM_MIN_BYTES, int(HEADROOM_FRACTION * int(memory["total"])))


def larger_peak(report: dict | None, other: dict | None) -> dict | None:
    """One process's memory figure from two of its reports (its check's and its capture's, or a
    later one's and the figure so far): ``report``'s free and total memory with the larger of the
    two peaks; either report alone where the other is None (off CUDA both are)."""
    if not report or not other:
        return report or other
    return {**report, "peak": max(int(report["peak"]), int(other["peak"]))}


def free_figure(memory: dict | None) -> str:
    """The GPU's free and total memory of a report, in words."""
    if not memory:
        return "no memory report"
    gib = 1 << 30
    return f"{int(memory['free']) / gib:.1f} of {int(memory['total']) / gib:.1f} GiB free"


def memory_figure(memory: dict | None) -> str:
    """A memory report in words: one process's peak and the GPU's free and total memory."""
    if not memory:
        return "no memory report"
    peak = f"peak {int(memory['peak']) / (1 << 30):.1f} GiB a process, " if memory.get("peak") is not None else ""
    return peak + free_figure(memory)
