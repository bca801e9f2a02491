"""Shared fixtures for the CPU test suite."""

from __future__ import annotations

import os

import _pytest.pytester
import pytest

# fixtures of the in-process bench runs (fakes/pytest_run.py), for every test module
from fakes.pytest_run import quick_runs, shared_run, shared_runs, sim_clock  # noqa: F401

_Snapshot = _pytest.pytester.SysModulesSnapshot


_KEPT = frozenset({"torch", "numpy", "scipy"})


class _KeepTorchModules(_Snapshot):
    """pytester's in-process runs forget every module first imported during the run. torch
    registers C++ operator libraries when some of its submodules are first imported
    (``torch.distributed._functional_collectives`` defines the ``c10d_functional`` library); a
    second import of such a module raises "Only a single TORCH_LIBRARY can be used to register
    the namespace", breaking every later test that reaches it. numpy (2.4 and newer) refuses the
    same for its C extensions ("cannot load module more than once per process", first seen with
    ``numpy.fft`` through ``scipy.stats``), and scipy's extensions sit on numpy's. The modules of
    these three libraries are kept."""

    def __init__(self, preserve=None) -> None:
        def keep(name: str) -> bool:
            return name.split(".", 1)[0] in _KEPT or bool(preserve and preserve(name))

        super().__init__(preserve=keep)


# Installed at import so both of pytester's snapshots (fixture setup and each in-process run) use it.
_pytest.pytester.SysModulesSnapshot = _KeepTorchModules


#: test files that exercise torch's own API (tensor ops and dtypes, FP4 formats, aten ops such as
#: ``_scaled_mm``, the profiler): marked ``torch_api``, the set the newest-torch CI leg runs
TORCH_API = ("formats/", "backends/", "reference/", "measure/test_verify.py", "measure/test_kernels.py",
             "measure/test_copies.py", "measure/test_holdings.py", "measure/test_fidelity.py", "workload/test_operands.py",
             "workload/test_operand_memory.py", "testing/test_slowdown.py", "test_simulated_blackwell.py")
_TESTS = os.path.dirname(os.path.abspath(__file__))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        rel = os.path.relpath(str(item.path), _TESTS).replace(os.sep, "/")
        if rel.startswith(TORCH_API):
            item.add_marker(pytest.mark.torch_api)


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under ``pytest tests -n N`` this process is an xdist worker and has PYTEST_XDIST_WORKER
    set. The sessions the tests start (pytester in-process runs, subprocess pytest runs) are
    fresh single-process sessions, but pytest-benchmark reads that variable and, believing it
    is an xdist worker, disables benchmarking: no samples, no JSON. The variables are hidden for
    the duration of each test (the worker itself read them long before)."""
    for var in [v for v in os.environ if v.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(var)


@pytest.fixture
def one_thread():
    """torch on one intra-op thread for the test: on tensors of a few million elements its thread
    pool costs more than it saves, several times more on a busy machine."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backend registry as it is now, restored after the test: inner pytest runs and plugin
    loads register backends into the process-wide registry. The steady backend of
    ``fakes.pytest_run`` starts each test unslowed and unprepared."""
    from fakes.pytest_run import STEADY
    from fp4bench.backends import registry

    registry.all_backends()
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    monkeypatch.setattr(STEADY, "slow_first", False)
    monkeypatch.setattr(STEADY, "prepares", 0)


@pytest.fixture
def bench(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester folder holding the real benchmark file (``bench/test_fp4_gemm.py``)."""
    from fakes.pytest_run import BENCH_FILE

    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    return pytester


@pytest.fixture
def sim_workers(monkeypatch: pytest.MonkeyPatch):
    """Every fp4bench worker the test starts (``fp4bench ab``, ``fp4bench units``, ``--fp4-isolate``)
    is an in-process fake answering the worker protocol on a simulated clock
    (``fakes/inproc_worker.py``); the fake environments of tests/fakes (``ab_env``) importable as
    in a worker started with ``PYTHONPATH=tests/fakes``. Yields the ``World``: its clock, its
    processes, and ``behaviour_of`` to change what the processes started next do."""
    from fakes import inproc_worker as inproc
    from fakes.paths import FAKES

    monkeypatch.syspath_prepend(str(FAKES))
    with inproc.workers() as world:
        yield world
