"""Fixed-width tables that fit a CI log: every line at most ``WIDTH`` characters.

GitHub's and most CI log viewers do not wrap; a 250-character row is read by scrolling
sideways. The tables here keep their columns aligned and, when a row would be too wide, first
move the free-text column (notes) onto an indented line under its row, then split the one
long-name column over several lines at ``-`` boundaries. What every row shares is said once,
above the table (``common_parts``, ``common_prefix``), instead of in every row.
"""

from __future__ import annotations

import textwrap
from typing import Sequence

#: the longest line a table prints (CI logs stay readable without sideways scrolling)
WIDTH = 160


def common_prefix(names: Sequence[str], sep: str = "::") -> str:
    """The longest ``...::`` prefix all names share (``"bench/test_fp4_gemm.py::"``), or ''.

    Cut only at ``sep`` so what is left is still a recognisable test name."""
    if len(names) < 2:
        return ""
    first = names[0]
    cut = first.rfind(sep)
    while cut >= 0:
        prefix = first[: cut + len(sep)]
        if all(n.startswith(prefix) for n in names):
            return prefix
        cut = first.rfind(sep, 0, cut)
    return ""


def common_parts(texts: Sequence[str], sep: str = "; ") -> tuple[list[str], list[str]]:
    """(parts every text contains, each text without them). Two or more texts only: a note on
    one row is that row's note."""
    split = [[p for p in (t or "").split(sep) if p] for t in texts]
    if len(split) < 2:
        return [], [sep.join(s) for s in split]
    common = [p for p in split[0] if all(p in s for s in split[1:])]
    return common, [sep.join(p for p in s if p not in common) for s in split]


def _chunks(text: str, width: int) -> list[str]:
    """``text`` in pieces of at most ``width``, split after a ``-`` (or ``,``) where possible."""
    out: list[str] = []
    while len(text) > width:
        cut = max(text.rfind("-", 0, width), text.rfind(",", 0, width))
        cut = cut + 1 if cut >= width // 3 else width
        out.append(text[:cut])
        text = text[cut:]
    return out + [text]


def fit_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool], width: int = WIDTH,
              wrap: int | None = None, trail: int | None = None) -> list[str]:
    """Aligned columns (``right[i]``: right-aligned), lines at most ``width`` when possible.

    ``trail`` (free text, last column) moves under its row, indented, when a row is too wide;
    then ``wrap`` (a name column) gets the room that is left and longer cells continue on the
    next lines in the same column."""
    header, right = list(header), list(right)
    rows = [list(r) for r in rows]
    notes: list[str] | None = None

    def widths_of() -> list[int]:
        return [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]

    def total(ws: list[int]) -> int:
        return sum(ws) + 2 * (len(ws) - 1)

    if trail is not None and total(widths_of()) > width:
        notes = [r.pop(trail) for r in rows]
        header.pop(trail)
        right.pop(trail)
        if wrap is not None and wrap > trail:
            wrap -= 1
    widths = widths_of()
    if wrap is not None and total(widths) > width:
        others = total(widths) - widths[wrap]
        widths[wrap] = max(len(header[wrap]), 24, width - others)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right)).rstrip()

    indent = sum(w + 2 for w in widths[:wrap]) if wrap is not None else 4
    out = [line(header), line(["-" * w for w in widths])]
    for i, r in enumerate(rows):
        pieces = _chunks(r[wrap], widths[wrap]) if wrap is not None else [""]
        if wrap is not None:
            r[wrap] = pieces[0]
        out.append(line(r))
        for piece in pieces[1:]:
            out.append(" " * indent + piece)
        if notes and notes[i]:
            out += textwrap.wrap(notes[i], width, initial_indent=" " * (indent + 2),
                                 subsequent_indent=" " * (indent + 2), break_on_hyphens=False)
    return out


def wrap_line(text: str, width: int = WIDTH, indent: int = 2) -> list[str]:
    """One long sentence as lines of at most ``width`` (continuations indented)."""
    return textwrap.wrap(text, width, subsequent_indent=" " * indent, break_on_hyphens=False) or [""]


def fit_message(text: str, room: int, headline: str | None = None, width: int = WIDTH,
                indent: int = 4) -> list[str]:
    """A message printed after a prefix it does not control (pytest's ``SKIPPED [1] path:line: ``
    or ``FAILED <test id> - ``), as lines of at most ``width``; ``room`` is what the prefix leaves
    of the first line.

    Without ``headline`` the text wraps: its first line fills ``room``, the rest continues
    indented. With one (the outcome in a few words), a text that does not fit is given whole on
    the lines under the headline, so the one-line summary still says what happened."""
    if len(text) <= room:
        return [text]
    pad = " " * indent
    if headline is None:
        first = textwrap.wrap(text, max(room, 20), break_on_hyphens=False)[0]
        rest = text[len(first):].strip()
        return [first] + textwrap.wrap(rest, width, initial_indent=pad, subsequent_indent=pad,
                                       break_on_hyphens=False)
    return [headline] + textwrap.wrap(text, width, initial_indent=pad, subsequent_indent=pad, break_on_hyphens=False)
