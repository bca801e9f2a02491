"""The backend of the real-process bisect test: ``ab-release`` is ``ab_env``'s ``ab-spin`` whose
call time is the ``CALL_S`` of the ``flashinfer-python`` release its venv has installed
(``fakes.bisect_releases`` writes it into each release's wheel), and whose version is that
release's. The module is read from the distribution's own files: on the tests' path,
``flashinfer`` is the CPU fake of this folder."""

import importlib.metadata
import runpy

from ab_env import AbSpin
from fp4bench.backends.base import Availability

_DIST = importlib.metadata.distribution("flashinfer-python")
CALL_S = float(runpy.run_path(str(_DIST.locate_file("flashinfer/__init__.py")))["CALL_S"])


class AbRelease(AbSpin):
    name = "ab-release"

    def availability(self, device):
        return Availability.yes(_DIST.version, "fake release")

    def run(self, prepared, tactic):
        import os

        os.environ["FAKE_SPIN_S"] = repr(CALL_S)
        return super().run(prepared, tactic)


BACKENDS = [AbRelease()]
