"""Settings that no longer apply: each is named once per process, with what replaced it."""

from __future__ import annotations

import warnings

_SAID: set[str] = set()


class Fp4benchDeprecation(FutureWarning):
    """A setting fp4bench still parses but no longer applies (shown by default)."""


def warn_once(key: str, message: str) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process."""
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, Fp4benchDeprecation, stacklevel=3)
