"""What one comparison judged, against what it was expected to judge.

Every front end (the pytest session end, ``fp4bench compare``, ``fp4bench ab``) reads this one
account from ``CompareResult.coverage`` instead of counting on its own. A comparison that judged
nothing, or fewer baseline benchmarks than it was expected to, is *incomplete*: it fails with
``EXIT_INCOMPLETE`` and says what was expected and what ran, never "no regression".

* **expected**: the baseline's benchmarks inside the run's selection. What the run chose not to
  measure (``-k``/``-m`` deselection, sweep options such as ``--fp4-backends`` that narrow the
  sweep) is **not selected**: counted, never expected (``narrow``).
* **judged**: expected benchmarks measured in both runs whose timing got a decision (PASS, FAIL,
  AMBIGUOUS on the evidence). An INVALID timing (a clock anomaly) or one with too few samples
  was compared but not judged.
* **missing**: expected, not measured now (renamed, removed, skipped now).
* **not reached**: expected, planned, but the run stopped before it (``-x``, a kill).
* **skipped on both sides**: cases this run skipped that the baseline has no timing for either.

``allow_missing`` lets a *partial* comparison pass when what is missing is reported; an *empty*
one (nothing judged) never passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

#: the gate's decision as a process exit status, shared by every front end (usage errors are
#: the front end's own: 2 for a command, 4 for pytest)
EXIT_OK, EXIT_REGRESSION, EXIT_INCOMPLETE = 0, 1, 3
#: each decision in words (reports, verdict JSON)
OUTCOME = {EXIT_OK: "no regression", EXIT_REGRESSION: "regression", EXIT_INCOMPLETE: "incomplete"}

#: names listed in a collapsed list before "... N more"
SHOWN = 3


@dataclass(frozen=True)
class Scope:
    """What a run selected and reached, as ``compare`` needs it to know what is expected."""

    #: baseline names the run deselected by name (``-k``, ``-m``)
    excluded: frozenset[str] = frozenset()
    #: whether a baseline benchmark (its ``extra_info``) is inside the run's sweep options
    selected: Callable[[Mapping[str, Any]], bool] | None = None
    #: names the run planned but never reached
    not_reached: tuple[str, ...] = ()
    #: cases the run skipped, ``{name: reason}``
    skipped_now: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Coverage:
    """The account of one comparison (names are benchmark fullnames)."""

    expected: tuple[str, ...] = ()
    judged: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    not_reached: tuple[str, ...] = ()
    not_selected: tuple[str, ...] = ()
    skipped_both: tuple[str, ...] = ()
    allow_missing: bool = False
    #: name -> ``"<backend> <model>"`` of the baseline benchmarks, to list many names by group
    groups: Mapping[str, str] = field(default_factory=dict)

    def group(self, name: str) -> str:
        return self.groups.get(name, "other")

    @property
    def empty(self) -> bool:
        """Nothing was judged."""
        return not self.judged

    @property
    def partial(self) -> bool:
        """Fewer expected benchmarks were judged than measured on both sides would give: some are
        missing or were not reached."""
        return bool(self.missing or self.not_reached)

    @property
    def incomplete(self) -> bool:
        """The comparison cannot pass: empty, or partial without ``allow_missing``."""
        return self.empty or (self.partial and not self.allow_missing)

    def summary(self) -> str:
        """One line: ``judged 12 of 14 expected benchmarks (2 MISSING); 40 not selected``."""
        parts = [f"judged {len(self.judged)} of {len(self.expected)} expected benchmark"
                 f"{'' if len(self.expected) == 1 else 's'}"]
        gaps = [f"{len(x)} {what}" for x, what in ((self.missing, "MISSING"), (self.not_reached, "not reached"))
                if x]
        other = len(self.expected) - len(self.judged) - len(self.missing) - len(self.not_reached)
        if other > 0:
            gaps.append(f"{other} compared, not judged: INVALID or too few samples")
        if gaps:
            parts[0] += f" ({', '.join(gaps)})"
        if self.not_selected:
            parts.append(f"{len(self.not_selected)} not selected")
        if self.skipped_both:
            parts.append(f"{len(self.skipped_both)} skipped on both sides")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """Counts, and the names of what was expected but not judged (verdict JSON)."""
        return {"expected": len(self.expected), "judged": len(self.judged), "missing": list(self.missing),
                "not_reached": list(self.not_reached), "not_selected": len(self.not_selected),
                "skipped_both": list(self.skipped_both), "allow_missing": self.allow_missing,
                "summary": self.summary()}

    def problem(self) -> str:
        """Why the comparison is incomplete, in one sentence ('' when it is not)."""
        if self.empty:
            if not self.expected:
                return ("INCOMPLETE: nothing judged: the selection holds none of the baseline's benchmarks "
                        f"({len(self.not_selected)} not selected)")
            return f"INCOMPLETE: nothing judged: {self.summary()}"
        if self.partial and not self.allow_missing:
            return f"INCOMPLETE: {self.summary()}"
        return ""


def narrow(names: Iterable[str], excluded: Collection[str] = (),
           selected: Callable[[str], bool] | None = None) -> tuple[list[str], list[str]]:
    """Split baseline ``names`` into (expected, not selected): a name is not selected when it is in
    ``excluded`` (deselected by name, e.g. ``-k``) or ``selected(name)`` is False (outside the
    run's sweep options). One computation for every way a run narrows what it measures."""
    expected, out = [], []
    for n in names:
        (out if n in excluded or (selected is not None and not selected(n)) else expected).append(n)
    return expected, out


def collapsed(names: Sequence[str], group: Callable[[str], str], prefix: str = "", shown: int = SHOWN) -> list[str]:
    """``names`` as one line per ``group(name)``: ``<group>: N (a, b, c, ... N-3 more)``, each
    name shown without ``prefix``."""
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(group(n), []).append(n.removeprefix(prefix))
    lines = []
    for g, items in groups.items():
        more = f", ... {len(items) - shown} more" if len(items) > shown else ""
        lines.append(f"  {g}: {len(items)} ({', '.join(items[:shown])}{more})")
    return lines


def account(expected: Sequence[str], measured: Collection[str], decided: Collection[str],
            not_reached: Collection[str] = (), not_selected: Sequence[str] = (),
            skipped_both: Sequence[str] = (), allow_missing: bool = False,
            groups: Mapping[str, str] | None = None) -> Coverage:
    """The ``Coverage`` of a comparison: ``measured`` are the names timed now, ``decided`` the
    expected names whose timing verdict was reached."""
    gone = set(not_reached)
    return Coverage(
        expected=tuple(expected),
        judged=tuple(n for n in expected if n in decided),
        missing=tuple(n for n in expected if n not in measured and n not in gone),
        not_reached=tuple(n for n in expected if n in gone and n not in measured),
        not_selected=tuple(not_selected),
        skipped_both=tuple(skipped_both),
        allow_missing=allow_missing,
        groups=dict(groups or {}),
    )


def group_of(extra_info: Mapping[str, Any]) -> str:
    """``"<backend> <model>"`` from a benchmark's ``extra_info`` (``"other"`` without them)."""
    label = " ".join(str(extra_info[k]) for k in ("backend", "model") if extra_info.get(k) is not None)
    return label or "other"
