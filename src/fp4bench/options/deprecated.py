"""Settings and spellings that are on their way out: each is named once per process, with what
replaced it (a ``FutureWarning``, so Python shows it by default)."""

from __future__ import annotations

import warnings

_SAID: set[str] = set()


class Fp4benchDeprecation(FutureWarning):
    """A setting fp4bench still parses but no longer applies, or an option's old spelling."""


def warn_once(key: str, message: str) -> None:
    """``warnings.warn(message)`` the first time ``key`` is seen in this process."""
    if key not in _SAID:
        _SAID.add(key)
        warnings.warn(message, Fp4benchDeprecation, stacklevel=3)


def warn_renamed(old: str, new: str) -> None:
    """An option given by its deprecated spelling ``old`` (e.g. ``--json``): once, name ``new``."""
    warn_once(f"{old}->{new}", f"fp4bench: {old} is deprecated and will be removed; use {new} (same meaning)")
