"""``pytest bench`` on the simulated Blackwell machine, run inside the test's own process.

A child interpreter per run costs an import of torch and pytest each time; an in-process run
(``pytest.main``, as pytester's inline runs do) costs the run only. What makes a run its own
machine, as a fresh process would be:

* the environment (``FP4SIM_*``, ``PYTHONPATH``) is set for the run and restored after it; the
  modules first imported during the run are forgotten after it (``fp4sim_world`` reads its
  environment when imported, so each run builds its own world; the fake ``flashinfer`` and
  ``sgl_kernel`` packages and the distribution folder on the path are that run's), except the
  torch, numpy and scipy modules (tests/conftest.py) and ``fp4sim_ops``, whose operator
  registrations torch keeps for the life of the process;
* the run starts with an empty backend registry and imports the built-in adapter modules afresh:
  an adapter instance keeps the library it loaded (``FlashInferDense._lib``), which must be this
  run's fake ``flashinfer``. fp4bench's other modules are kept once imported (imported and
  assertion-rewritten once, not once a run): the simulation patches them only through
  ``monkeypatch``, undone at the end of each run;
* the fake libraries' building blocks (``fakes.*``: classes and functions without state, each
  run's instances are its ``fp4sim_world``'s) and the modules of installed distributions
  (site-packages: pytest's plugins such as hypothesis's and pytest-benchmark, and what they import)
  are kept once imported: a run cannot change them, and each fresh import would compile them
  again (``PYTHONDONTWRITEBYTECODE`` leaves no cached bytecode), the entry-point plugins' packages
  assertion-rewritten, ~1 s a run for hypothesis alone;
* the objects alive before the run are set aside from the garbage collector for its duration
  (``gc.freeze``): the runner's ``release`` calls ``gc.collect()`` before every gated window,
  which over this test process's heap costs ~0.3 s a call and in a ``pytest bench`` process a
  fraction of it; it still collects everything the run itself made;
* ``sys.path``, the working directory, the registry and torch's thread count are restored.

``run`` returns what ``subprocess.run(..., capture_output=True, text=True)`` would: the exit
status, stdout and stderr.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import _pytest.pytester
import pytest
import torch
from _pytest.capture import _get_multicapture

from fp4bench.backends import registry

#: modules an in-process run keeps after it (besides those of tests/conftest.py)
KEPT = ("fp4sim_ops",)
_ADAPTERS = "fp4bench.backends.builtin."


#: where installed distributions live (their modules are kept)
_INSTALLED = tuple({os.path.join(sysconfig.get_paths()[k], "") for k in ("purelib", "platlib")})


def _kept(name: str) -> bool:
    return (name in KEPT or (name.startswith("fp4bench.") and not _adapter(name)) or name.startswith("fakes.")
            or _installed(name))


def _installed(name: str) -> bool:
    return (getattr(sys.modules.get(name), "__file__", None) or "").startswith(_INSTALLED)


def _adapter(name: str) -> bool:
    return name.startswith(_ADAPTERS) and not name[len(_ADAPTERS):].startswith("_")


@dataclass(frozen=True)
class Run:
    """The outcome of one in-process run, named as ``subprocess.CompletedProcess`` names it."""

    returncode: int
    stdout: str
    stderr: str


class _NoGcCollect:
    """As pytester's inline runs: skip the unraisable-exception plugin's garbage collections at
    the end of the run (seconds per run, for nothing these runs check)."""

    @staticmethod
    def pytest_configure(config: pytest.Config) -> None:
        try:
            from _pytest.unraisableexception import gc_collect_iterations_key
        except ImportError:  # pytest before 8.4 collects nothing there
            return
        config.stash[gc_collect_iterations_key] = 0


def run(args: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """``pytest *args`` in this process, in ``cwd``, with ``env`` added to the environment
    (``PYTHONPATH`` also put first on ``sys.path``)."""
    modules = _pytest.pytester.SysModulesSnapshot(preserve=_kept)
    paths = _pytest.pytester.SysPathsSnapshot()
    saved_env, saved_cwd, threads = dict(os.environ), os.getcwd(), torch.get_num_threads()
    saved_registry = registry._registry, registry._loaded_builtins
    capture = _get_multicapture("sys")
    try:
        for var in [v for v in os.environ if v.startswith("PYTEST_XDIST_")]:
            del os.environ[var]  # an xdist worker's: the inner pytest-benchmark would disable itself
        os.environ.update(env)
        sys.path[:0] = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        os.chdir(cwd)
        importlib.invalidate_caches()
        registry._registry, registry._loaded_builtins = {}, False
        for name in [m for m in sys.modules if _adapter(m)]:
            del sys.modules[name]  # back after the run (the snapshot)
        capture.start_capturing()
        gc.freeze()
        try:
            ret = pytest.main([str(a) for a in args], plugins=[_NoGcCollect()])
        except SystemExit as exc:
            ret = exc.code
        finally:
            gc.unfreeze()
            out, err = capture.readouterr()
            capture.stop_capturing()
    finally:
        registry._registry, registry._loaded_builtins = saved_registry
        torch.set_num_threads(threads)
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        paths.restore()
        during = dict(sys.modules)
        modules.restore()
        _relink(during)
    return Run(int(ret), out, err)


def _relink(during: dict[str, object]) -> None:
    """Point each kept package's submodule attributes at the kept modules again. An import
    binds a submodule as an attribute of its package, and ``from package import submodule``
    takes that attribute without looking at ``sys.modules``: a kept package (``fp4bench.run``)
    still naming a forgotten submodule (``fp4bench.run.case`` of the last run) would hand the
    next run a module patched by nobody."""
    for name, module in during.items():
        parent, _, child = name.rpartition(".")
        package = sys.modules.get(parent)
        if package is None or getattr(package, child, None) is not module:
            continue
        if name in sys.modules:
            setattr(package, child, sys.modules[name])
        else:
            delattr(package, child)
