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
*total* memory holds everything the case keeps at once (``measure.holdings.case_bytes``): the
operand set the copies are cloned from (with the bf16 originals of quantized weights), the first
copy's prepared layouts, and per further copy what it keeps (its layouts and what its prepared
operands read of its clone in place), with the rest of the clone of the copy being made. Total, never free,
memory: every process on one GPU (``fp4bench ab``'s two sides, a run and its baseline's run)
computes the same count for the same case, whatever else holds memory at that moment; the bytes
counted follow from the operands and the adapter's code (``measure.holdings``), the same in every
process that draws the same operands. 40 %: GLM-5's bf16 grouped layer holds all 256 experts'
weights (12 GiB an operand set, a copy clones all of it), and 4 copies of it need 48 GiB, 34 % of
an H200's 139.8 GiB; a quarter would leave that row at 2 copies. On an 80 GB card the same
budget (31.7 GiB) holds 2 copies of it, and 1 of GLM-5's W4A16 MoE layer (22.8 GiB of operands
and 4.8 GiB of layouts; a further copy keeps 4.8 GiB and clones 4.8 GiB more while it is made), so
two processes of such a case fit beside each other (docs/measurement.md, "Device memory of a case").

``--fp4-l2 hot`` (and any CPU run) uses one copy: the point of hot L2 is to re-read the same
buffers.
"""

from __future__ import annotations

import math

from fp4bench.options.values import MAX_COPIES, MEMORY_FRACTION, MIN_COPIES  # noqa: F401 (the rule's defaults)

#: the rotation spans this many L2s for a cold L2
L2_MULTIPLE = 3


def copy_count(*, l2_bytes: int, footprint_bytes: float, copy_bytes: float, total_bytes: int,
               held_bytes: float | None = None, transient_bytes: float = 0.0, min_copies: int = MIN_COPIES,
               max_copies: int = MAX_COPIES, memory_fraction: float = MEMORY_FRACTION) -> int:
    """Rotating copies for a cold-L2 case on a GPU with ``l2_bytes`` of L2 and ``total_bytes`` of
    memory: enough to span ``L2_MULTIPLE`` L2s and at least ``min_copies``, at most
    ``max_copies`` and at most what ``memory_fraction`` of the total memory holds when the case
    with its first copy holds ``held_bytes`` (default: ``copy_bytes``, a case that is only its
    copy), each further copy keeps ``copy_bytes`` and the one being made holds
    ``transient_bytes`` more (``measure.holdings.CaseBytes``); never fewer than one."""
    if min_copies < 1 or max_copies < 1:
        raise ValueError(f"copy counts must be >= 1, got min {min_copies}, max {max_copies}")
    want = max(min_copies, math.ceil(L2_MULTIPLE * l2_bytes / max(1.0, float(footprint_bytes))))
    per_copy = max(1.0, float(copy_bytes))
    held = per_copy if held_bytes is None else float(held_bytes)
    fit = 1 + int((memory_fraction * total_bytes - held - transient_bytes) // per_copy)
    return max(1, min(max_copies, want, fit))
