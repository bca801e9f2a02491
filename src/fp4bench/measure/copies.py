"""How many rotating operand copies a timed case gets (pure arithmetic: no torch, no device).

A timed case rotates over ``n`` copies of its operands, each its own allocation (a clone of the
operand set, then the backend's ``prepare``), and every sample covers all of them
(``measure.timing``: at least one call per copy). Two things ask for more than one copy:

* **cold L2**: the rotation must span more than the L2, so that a call does not find its
  weights left in L2 by the previous call: ``ceil(L2_MULTIPLE * L2 / footprint)`` copies, where
  the footprint is the bytes one call moves (``Problem.bytes_moved``).
* **placement**: the time of a memory-bound call depends on where its buffers landed in device
  memory. On an H200 (docs/results-h200.md, runs 19, 23, 24) the same bytes and kernel moved to
  fresh memory gave a grouped bf16 b1 row 83.3 or 98.6 µs (18 % apart) depending on the
  allocation, and operands released and made again in one process land on nearly the same
  placement every time, so re-measuring in one process does not sample it. With 4 copies, each
  its own allocation, the spread between placements fell from 1.05 % to 0.04 % (bf16 grouped b1
  down) and from 2.91 % to 0.42 % (gate_up): a measurement then averages several placements
  instead of drawing one. So every case gets at least ``min_copies`` (default ``MIN_COPIES``).

Bounded by ``MAX_COPIES`` and by a device-memory budget: ``MEMORY_FRACTION`` of the GPU's
*total* memory divided by the bytes of one copy. Total, never free, memory: every process on
one GPU (``fp4bench ab``'s two sides, a run and its baseline's run) computes the same count for
the same case, whatever else holds memory at that moment. The bytes of one copy are those a
copy clones (``run.operand_copies.copy_bytes``: the tensors a backend of the case's formats reads): the same
in every process that draws the same operands. 40 %: GLM-5's bf16 grouped layer holds all 256
experts' weights (12 GiB a copy), and 4 copies of it need 48 GiB, 34 % of an H200's 139.8 GiB;
a quarter would leave that row at 2 copies.

``--fp4-l2 hot`` (and any CPU run) uses one copy: the point of hot L2 is to re-read the same
buffers.
"""

from __future__ import annotations

import math

from fp4bench.options.values import MAX_COPIES, MEMORY_FRACTION, MIN_COPIES  # noqa: F401 (the rule's defaults)

#: the rotation spans this many L2s for a cold L2
L2_MULTIPLE = 3


def copy_count(*, l2_bytes: int, footprint_bytes: float, copy_bytes: float, total_bytes: int,
               min_copies: int = MIN_COPIES, max_copies: int = MAX_COPIES,
               memory_fraction: float = MEMORY_FRACTION) -> int:
    """Rotating copies for a cold-L2 case on a GPU with ``l2_bytes`` of L2 and ``total_bytes`` of
    memory: enough to span ``L2_MULTIPLE`` L2s and at least ``min_copies``, at most
    ``max_copies`` and at most what ``memory_fraction`` of the total memory holds at
    ``copy_bytes`` a copy; never fewer than one."""
    if min_copies < 1 or max_copies < 1:
        raise ValueError(f"copy counts must be >= 1, got min {min_copies}, max {max_copies}")
    want = max(min_copies, math.ceil(L2_MULTIPLE * l2_bytes / max(1.0, float(footprint_bytes))))
    fit = int(memory_fraction * total_bytes // max(1.0, float(copy_bytes)))
    return max(1, min(max_copies, want, fit))
