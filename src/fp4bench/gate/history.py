"""The approvals of an approved baseline, read from git's history of its file.

Every commit that changed ``baselines/<gpu>/approved.json`` holds one version of it; a version is
an approval when it carries an ``approval`` record (``gate.approve`` writes one: from, at,
forced), and the record is what identifies it. A version whose record is one seen before (the
same file re-serialized, migrated to the slim format, or reverted to) is not another approval,
nor is a version without a record. ``approvals`` returns them oldest first, each with its
commit, and ``medians`` each benchmark's median across them.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import Baseline, BaselineError, parse_text
from fp4bench.gate.record import BenchmarkRecord


class HistoryError(ValueError):
    """The file's history cannot be read from git (not in a repository, never committed)."""


@dataclass(frozen=True)
class Approved:
    """One approval: the commit that recorded it, that commit's date, the file as committed."""

    commit: str
    date: str
    baseline: Baseline

    @property
    def fingerprint(self) -> Fingerprint:
        return self.baseline.fingerprint

    @property
    def label(self) -> str:
        return f"{self.commit[:10]} {self.date[:10]}"


def _git(cwd: Path, *args: str) -> str:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HistoryError(f"git {args[0]}: {exc}") from None
    if proc.returncode != 0:
        raise HistoryError(f"git {' '.join(args[:2])}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout


def record_key(approval: dict) -> str:
    return json.dumps(approval, sort_keys=True)


def approvals(path: str | os.PathLike[str]) -> list[Approved]:
    """Every approval of ``path`` in the history of the git repository it is in, oldest first."""
    return read_history(path)[0]


def read_history(path: str | os.PathLike[str]) -> tuple[list[Approved], list[str]]:
    """(the approvals of ``path``, oldest first; one line per committed version no reader accepts:
    its commit and why)."""
    p = Path(path).absolute()
    if not p.parent.is_dir():
        raise HistoryError(f"{p}: the folder {p.parent} does not exist")
    top = Path(_git(p.parent, "rev-parse", "--show-toplevel").strip())
    rel = p.resolve().relative_to(top.resolve()).as_posix()
    log = _git(top, "log", "--format=%H %cI", "--", rel).split()
    if not log:
        raise HistoryError(f"{path}: no commit of it in the repository at {top}")
    out, seen, unreadable = [], set(), []
    for commit, date in reversed(list(zip(log[::2], log[1::2]))):
        try:
            text = _git(top, "show", f"{commit}:{rel}")
        except HistoryError:
            continue  # deleted at that commit
        try:
            base = parse_text(text, f"{rel}@{commit[:10]}")
        except BaselineError as exc:
            unreadable.append(f"{commit[:10]} {date[:10]}: {exc}")
            continue
        key = record_key(base.approval)
        if not base.approval or key in seen:
            continue
        seen.add(key)
        out.append(Approved(commit, date, base))
    return out, unreadable


def median_s(rec: BenchmarkRecord) -> float:
    """A benchmark's time as the gate reads it: the median of its window medians."""
    return statistics.median(statistics.median(w) for w in rec.windows)


def medians(history: list[Approved]) -> dict[str, list[float | None]]:
    """``{benchmark: [median seconds at each approval, None where it was not measured]}``."""
    names = sorted({n for a in history for n in a.baseline.benchmarks})
    return {n: [median_s(a.baseline.benchmarks[n]) if n in a.baseline.benchmarks else None for a in history]
            for n in names}


def stack_changes(history: list[Approved]) -> list[list[tuple[str, object, object]]]:
    """For each approval, what of the fingerprint changed since the one before (``[]`` for the first)."""
    return [[]] + [a.fingerprint.differences(b.fingerprint) for a, b in zip(history, history[1:])]


def at_revision(path: str | os.PathLike[str], rev: str) -> Approved:
    """The file as committed at git revision ``rev`` (a commit, tag or branch)."""
    p = Path(path).absolute()
    top = Path(_git(p.parent, "rev-parse", "--show-toplevel").strip())
    rel = p.resolve().relative_to(top.resolve()).as_posix()
    commit = _git(top, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    date = _git(top, "log", "-1", "--format=%cI", commit).strip()
    try:
        return Approved(commit, date, parse_text(_git(top, "show", f"{commit}:{rel}"), f"{rel}@{rev}"))
    except BaselineError as exc:
        raise HistoryError(f"--anchor {rev}: {exc}") from None
