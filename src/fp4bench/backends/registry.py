"""Backend discovery: built-in modules, the ``fp4bench.backends`` entry-point group, plugins.

Adding a backend = one module in ``fp4bench.backends.builtin`` defining ``BACKENDS = [...]``. Third parties
ship a module with the same attribute and either declare it under the entry-point group
``fp4bench.backends`` or pass ``--fp4-plugin=module`` / ``load_plugin("module")``. A plugin
module may instead (or also) define ``wrap_backends(get_backend) -> list[Backend]``: each
returned backend replaces the registered one of the same name, so benchmark names stay those
of an unwrapped run (``fp4bench.testing.slowdown``).
Discovery only imports our adapter modules; adapters import their libraries lazily in
``availability`` so that a broken library never breaks discovery.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from fp4bench.backends._errors import one_line
from fp4bench.backends.base import Backend
from fp4bench.options.values import KINDS

_registry: dict[str, Backend] = {}
_loaded_builtins = False


def _check_backend(backend: object) -> str | None:
    """What is wrong with ``backend`` as a registry entry, or None: benchmark ids and the
    recorded availability keys (``name|problem|tactic``) are built from its name and kinds."""
    if not isinstance(backend, Backend):
        return f"{backend!r} is not a fp4bench Backend"
    what = f"{type(backend).__module__}.{type(backend).__qualname__}"
    name = getattr(backend, "name", None)
    if not isinstance(name, str) or not name.strip() or "|" in name:
        return f"{what}: name must be a non-empty string without '|', got {name!r}"
    kinds = getattr(backend, "kinds", None)
    if not isinstance(kinds, (set, frozenset)) or not kinds or not kinds <= set(KINDS):
        return f"{what} (backend {name!r}): kinds must be a non-empty set of {', '.join(KINDS)}, got {kinds!r}"
    return None


def register(backend: Backend) -> None:
    """Add one backend; a second backend with the same name is a programming error."""
    bad = _check_backend(backend)
    if bad:
        raise TypeError(bad)
    old = _registry.get(backend.name)
    if old is not None and type(old) is not type(backend):
        raise ValueError(f"backend name {backend.name!r} registered twice ({type(old).__name__}, {type(backend).__name__})")
    _registry[backend.name] = backend


def _register_module(mod: ModuleType) -> None:
    backends = getattr(mod, "BACKENDS", None)
    wrap = getattr(mod, "wrap_backends", None)
    if backends is None and wrap is None:
        raise ValueError(f"backend module {mod.__name__} defines no BACKENDS list")
    if backends is not None and not isinstance(backends, (list, tuple)):
        raise TypeError(f"{mod.__name__}.BACKENDS must be a list of backends, got {type(backends).__name__} "
                        f"{backends!r:.80}")
    for i, b in enumerate(backends or ()):
        bad = _check_backend(b)
        if bad:
            raise TypeError(f"{mod.__name__}.BACKENDS[{i}]: {bad}")
        register(b)
    wrapped = wrap(get_backend) if wrap is not None else ()
    if not isinstance(wrapped, (list, tuple)):
        raise TypeError(f"{mod.__name__}.wrap_backends returned {type(wrapped).__name__}, not a list of backends")
    for b in wrapped:
        bad = _check_backend(b)
        if bad:
            raise TypeError(f"{mod.__name__}.wrap_backends returned a bad backend: {bad}")
        get_backend(b.name)  # only a registered backend is replaced
        _registry[b.name] = b


def load_plugin(module_name: str) -> None:
    """Import ``module_name`` and register its ``BACKENDS`` (the --fp4-plugin option)."""
    try:
        mod = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--fp4-plugin: cannot import backend module {module_name!r}: {exc}") from exc
    except (Exception, SystemExit) as exc:  # any error of the plugin's own code, sys.exit() included
        raise ValueError(f"--fp4-plugin: importing backend module {module_name!r} raised "
                         f"{one_line(exc)}") from exc
    try:
        _register_module(mod)
    except (Exception, SystemExit) as exc:  # BACKENDS / wrap_backends of the wrong shape, or raising
        msg = str(exc) if type(exc) in (ValueError, TypeError) else one_line(exc)
        raise ValueError(f"--fp4-plugin {module_name}: {msg}") from exc



def _load_builtins() -> None:
    global _loaded_builtins
    if _loaded_builtins:
        return
    _loaded_builtins = True
    import fp4bench.backends.builtin as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_"):  # the adapters' shared helpers
            continue
        _register_module(importlib.import_module(f"{pkg.__name__}.{info.name}"))
    for ep in importlib.metadata.entry_points(group="fp4bench.backends"):
        _register_module(ep.load())


def all_backends() -> list[Backend]:
    _load_builtins()
    return [_registry[k] for k in sorted(_registry)]


def test_only(names: Iterable[str] | None = None) -> dict[str, str]:
    """``{name: description}`` of the registered test-only backends (faults, slowdown wrappers)
    among ``names`` (None: all): a run that measures any of them is a test of the gate."""
    chosen = all_backends() if names is None else [get_backend(n) for n in names]
    return {b.name: b.describe() for b in chosen if b.test_only}


def get_backend(name: str) -> Backend:
    _load_builtins()
    try:
        return _registry[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(_registry))}") from None
