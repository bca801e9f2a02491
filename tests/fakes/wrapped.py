"""pytest output as the tests read it: each wrapped skip or failure message on one line again."""

from __future__ import annotations

import re


def unwrapped(out: str) -> str:
    """``out`` with the continuation lines of wrapped skip and failure messages (indented 4
    spaces: ``plugin_console.skip``/``fail`` keep every line within 160) joined to their line."""
    return re.sub(r"\n {4}(?=\S)", " ", out)
