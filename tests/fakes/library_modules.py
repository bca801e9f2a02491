"""GPU tests and the library modules they call: a module that cannot be loaded or built here
skips the test with the library's reason, as a backend's availability check makes its cases
skip (``fp4bench.backends.jit_cache.unbuilt_reason``: a FlashInfer JIT module that is not built).

FlashInfer raises ``MissingJITCacheError`` (a ``RuntimeError`` defined in ``flashinfer/jit/core.py``,
exported as ``flashinfer.jit.MissingJITCacheError``) when ``FLASHINFER_DISABLE_JIT=1`` and no
prebuilt module exists for the GPU, e.g. ``fp4_quantization_90`` on an H100 with only the W4A16
MoE module prebuilt. Any other error stays the test's to report.

    helpers = loaded_or_skip("FlashInfer's fp4 helper module", lambda: flashinfer.block_scale_interleave(probe))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from fp4bench.backends._errors import one_line

T = TypeVar("T")

#: the exception FlashInfer raises for a JIT module it may not build and has not got prebuilt
MISSING_JIT = "MissingJITCacheError"


def unloadable(exc: BaseException) -> bool:
    """Whether ``exc`` says a library module cannot be loaded or built here: FlashInfer's
    ``MissingJITCacheError`` (matched by name, on the class or a base, from a ``flashinfer``
    module: no import of FlashInfer needed), or a Python module or shared object that does not
    load (``ImportError``, ``OSError``)."""
    if isinstance(exc, (ImportError, OSError)):
        return True
    return any(t.__name__ == MISSING_JIT and t.__module__.split(".")[0] == "flashinfer" for t in type(exc).__mro__)


def loaded_or_skip(what: str, load: Callable[[], T]) -> T:
    """``load()``'s result, or a skip naming ``what`` and the library's reason when it raised an
    ``unloadable`` error; any other error is raised."""
    try:
        return load()
    except Exception as exc:
        if not unloadable(exc):
            raise
        pytest.skip(f"{what} cannot be loaded or built here ({one_line(exc)})")
