"""Backend plugin (test-only) for ``fp4bench ab`` workers: the ``fp4sim`` simulation, applied on
import, in a process that is no pytest run (``--plugin fp4sim_ab``). It adds no backend: the
built-in adapters drive the fake libraries the worker's ``PYTHONPATH`` puts first.

``FP4SIM_CLOCK=sim`` (set for the workers only, ``--a-env`` / ``--b-env``): the process runs on
``clock.SimClock`` for its whole life, so a simulated launch (``FP4SIM_CALL_S``) advances the clock
by exactly its simulated device time and what the worker times is that time alone, whatever the
machine's load; nothing is slept. The parent (``fp4bench ab`` itself) keeps the real clock: its
waits for the workers' answers are real.

torch runs on one intra-op thread: on a loaded machine each parallel region of the fake's small
torch ops can wait a scheduler time slice for a descheduled thread.

The objects alive once the simulation is installed (torch's, fp4bench's, the fakes') are set aside
from the garbage collector for the life of the process (``gc.freeze``): a worker's ``release``
calls ``gc.collect()`` for every benchmark it drops, and the interpreter collects again at exit,
each ~0.1 s of CPU over a torch process's heap, for the few simulated benchmarks here several
times their own work; what the worker allocates afterwards (operands, captures) is collected as
before.
"""

import contextlib
import gc

import torch

import fp4sim


class _ForLife:
    """What ``fp4sim.install`` asks of a ``pytest.MonkeyPatch``, for a process that keeps the
    simulation until it exits (importing pytest would cost every worker ~0.2 s)."""

    setattr = staticmethod(setattr)

    @staticmethod
    def setitem(mapping, key, value) -> None:
        mapping[key] = value


torch.set_num_threads(1)
fp4sim.install(_ForLife())
#: the simulated clock of a worker, entered for the life of the process
_PROCESS = contextlib.ExitStack()
_PROCESS.enter_context(fp4sim.simulated_clock())
BACKENDS: list = []
gc.freeze()
