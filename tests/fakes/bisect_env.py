"""The backend of the real-process bisect test: ``ab-release`` is ``ab_env``'s ``ab-spin`` whose
call time is the ``CALL_S`` of the ``flashinfer-python`` release its venv has installed
(``fakes.bisect_releases`` writes it into each release's wheel), and whose version is that
release's. The module is read from the distribution's own files: on the tests' path,
``flashinfer`` is the CPU fake of this folder. ``FAKE_CLOCK=sim`` in a worker's environment runs
that process on a simulated clock: a call takes exactly its release's time, whatever the load of
the machine the test runs on."""

import contextlib
import importlib.metadata
import os
import runpy
import sys

from ab_env import AbSpin
from fp4bench import clock
from fp4bench.backends.base import Availability

#: the simulated clock of a worker, entered for the life of the process
_PROCESS = contextlib.ExitStack()
_WORKER = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", "").startswith("fp4bench.run.worker")
if os.environ.get("FAKE_CLOCK") == "sim" and _WORKER:  # never the process that starts the workers
    _PROCESS.enter_context(clock.using(clock.SimClock()))
elif os.environ.get("FAKE_CLOCK"):
    raise ValueError(f"FAKE_CLOCK={os.environ['FAKE_CLOCK']!r}: use sim, or leave it unset for the real clock")

_DIST = importlib.metadata.distribution("flashinfer-python")
CALL_S = float(runpy.run_path(str(_DIST.locate_file("flashinfer/__init__.py")))["CALL_S"])


class AbRelease(AbSpin):
    name = "ab-release"

    def availability(self, device):
        return Availability.yes(_DIST.version, "fake release")

    def run(self, prepared, tactic):
        os.environ["FAKE_SPIN_S"] = repr(CALL_S)
        return super().run(prepared, tactic)


BACKENDS = [AbRelease()]
