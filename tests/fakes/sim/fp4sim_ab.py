"""Backend plugin (test-only) for ``fp4bench ab`` workers: the ``fp4sim`` simulation, applied on
import, in a process that is no pytest run (``--plugin fp4sim_ab``). It adds no backend: the
built-in adapters drive the fake libraries the worker's ``PYTHONPATH`` puts first.

A timed comparison of the simulation (``FP4SIM_CALL_S``) is decided by the simulated launch time
only while the fake's own CPU work stays below it. That work is small torch ops (a few hundred
microseconds to a few milliseconds at sim-tiny's shapes) which torch would split over its
intra-op threads: on a loaded machine each parallel region can then wait a scheduler time slice
for a descheduled thread, and a call grew from ~1 ms to ~40 ms at random. One intra-op thread
keeps the fake's CPU time far below a simulated launch of tens of milliseconds.
"""

import pytest
import torch

import fp4sim

torch.set_num_threads(1)
fp4sim.install(pytest.MonkeyPatch())
BACKENDS: list = []
