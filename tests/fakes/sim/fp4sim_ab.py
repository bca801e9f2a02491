"""Backend plugin (test-only) for ``fp4bench ab`` workers: the ``fp4sim`` simulation, applied on
import, in a process that is no pytest run (``--plugin fp4sim_ab``). It adds no backend: the
built-in adapters drive the fake libraries the worker's ``PYTHONPATH`` puts first."""

import pytest

import fp4sim

fp4sim.install(pytest.MonkeyPatch())
BACKENDS: list = []
