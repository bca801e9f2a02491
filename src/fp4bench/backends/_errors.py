"""Telling a tactic the library cannot run for this problem from a bug in our call.

Both arrive as ``RuntimeError`` from the FP4 libraries (TVM-FFI turns a C++
``std::runtime_error`` and a failed ``TVM_FFI_ICHECK`` argument check alike into
``RuntimeError``). Only the messages a library's launcher raises *per tactic* -- CUTLASS
``can_implement``, ``initialize``, ``run``, workspace size -- are a property of the tactic
(recorded as "unsupported"); anything else is an error of the case, so that a marshalling
bug can never be recorded, and approved, as "every tactic unsupported".
"""

from __future__ import annotations

from collections.abc import Sequence

from fp4bench.backends.base import TacticUnsupported


def tactic_failure(exc: BaseException, label: str, patterns: Sequence[str]) -> TacticUnsupported | None:
    """A one-line ``TacticUnsupported`` when ``exc``'s message contains one of ``patterns``
    (the library's per-tactic errors), else None (the caller re-raises ``exc``)."""
    msg = str(exc)
    if not any(p in msg for p in patterns):
        return None
    line = next((ln.strip() for ln in msg.splitlines() if any(p in ln for p in patterns)), msg.strip())
    return TacticUnsupported(f"{label}: {line[:500]}")


def one_line(exc: BaseException) -> str:
    """``Type: first line of the message``: how a backend's or plugin's own exception is named
    in a one-line error (a SyntaxError's message names the file and line)."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0].strip() if lines else '(no message)'}"
