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
slots take turns (``turns``): a turn is a group of whole slots, A and B of a slot always in the
same turn, timed in rounds of their own and then released before the next turn captures.
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
    report ``{"peak", "free", "total"}`` in bytes, taken after its capture) plus as many more as
    fit in the free memory left above the headroom, each needing that process's peak. ``limit``
    (``--max-resident``) caps it. None: no limit (no report, e.g. on CPU, and no ``limit``)."""
    cap = None
    if memory:
        peak, free, total = (int(memory[k]) for k in ("peak", "free", "total"))
        headroom = max(HEADROOM_MIN_BYTES, int(HEADROOM_FRACTION * total))
        cap = 1 + max(0, free - headroom) // max(1, peak)
    if limit is not None:
        cap = limit if cap is None else min(cap, limit)
    return cap


def turns(slots: Sequence[Slot], capacity: int | None) -> list[list[int]]:
    """The slot indices grouped into turns of ``max(1, capacity // 2)`` slots (a slot is one
    process of each side); one turn of every slot when they all fit (or ``capacity`` is None)."""
    live = [i for i, s in enumerate(slots) if s != (None, None)]
    procs = sum(1 for i in live for p in slots[i] if p is not None)
    if capacity is None or capacity >= procs:
        return [live] if live else []
    per = max(1, capacity // 2)
    return [live[i:i + per] for i in range(0, len(live), per)]
