"""The run's line log: every finished case on disk as soon as it finishes.

A JSON-lines file: a ``header`` line (fingerprint, sweep, the planned benchmark names), one
``case`` line per finished benchmark (samples, extra_info, availability entries), and an
``end`` line when the run finished normally. A file holds one run: it is created fresh (an
existing file is refused, or truncated when asked), and a file with two headers is refused
when read, never merged into one run. Each line is written whole, flushed and fsync'd,
so a run killed with SIGKILL leaves every finished case readable; only a last line cut mid-write
can be lost, and the reader drops it with a note.

``read_line_log`` turns the file into a ``Baseline`` (the shape ``fp4bench compare`` judges)
and says which planned benchmarks were not reached.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Collection

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import Baseline, BaselineError, make_section, parse_baseline

KIND = "fp4bench-line-log"
SUFFIX = ".lines.jsonl"


class LineLog:
    """Writes one run's lines to ``path`` (a stream of ``fp4bench.outputs``, opened here, before the
    run); each ``write`` is one fsynced line, durable before it returns (``WriteError`` when it
    cannot be). ``overwrite``: truncate an existing file (else one is refused: ``OutputError``)."""

    def __init__(self, path: str | os.PathLike[str], overwrite: bool = False, option: str = "--fp4-log"):
        from fp4bench.outputs import open_stream

        self.path = Path(path)
        self._f = open_stream(self.path, option, force=overwrite)
        #: a write failed: the caller stops writing (``plugin.runlog``)
        self.failed = False

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(record, separators=(",", ":"), default=str) + "\n")

    def header(self, fingerprint: Fingerprint, sweep: dict | None, planned: list[str], **extra: Any) -> None:
        from datetime import datetime, timezone

        self.write({"type": "header", "kind": KIND, "fingerprint": fingerprint.to_dict(), "sweep": sweep or {},
                    "planned": list(planned), "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                    **extra})

    def case(self, fullname: str, outcome: str, samples: list[float] | None = None,
             extra_info: dict | None = None, availability: dict[str, str] | None = None, reason: str = "") -> None:
        self.write({"type": "case", "fullname": fullname, "outcome": outcome, "reason": reason,
                    "samples": list(samples or []), "extra_info": dict(extra_info or {}),
                    "availability": dict(availability or {})})

    def end(self, **info: Any) -> None:
        self.write({"type": "end", **info})

    def close(self) -> None:
        self._f.close()


@dataclass
class LoggedRun:
    """A line log read back: the measured cases as a ``Baseline`` and what is missing from it."""

    run: Baseline
    planned: list[str]
    outcomes: dict[str, str]  # fullname -> passed / failed / skipped (every logged case)
    complete: bool  # the ``end`` line is present
    notes: list[str] = field(default_factory=list)

    @property
    def not_reached(self) -> list[str]:
        return [n for n in self.planned if n not in self.outcomes]

    @property
    def partial(self) -> bool:
        return not self.complete or bool(self.not_reached)

    @property
    def failed(self) -> list[str]:
        """Logged cases that failed without a timing (the verdict shows them as MISSING)."""
        return [n for n, o in self.outcomes.items() if o == "failed" and n not in self.run.benchmarks]

    def describe(self) -> str:
        state = "complete" if self.complete else "PARTIAL (the run ended without its end line: killed?)"
        text = f"line log {self.run.source}: {state}; {len(self.outcomes)} of {len(self.planned)} planned cases logged"
        failed = self.failed
        lines = [text] + [f"  note: {n}" for n in self.notes]
        if failed:  # shown as MISSING by the verdict: they ran and failed, they were not renamed
            lines.append(f"  {len(failed)} logged cases FAILED in the run (no timing): "
                         + ", ".join(failed[:5]) + (f", ... {len(failed) - 5} more" if len(failed) > 5 else ""))
        return "\n".join(lines)


def is_line_log(path: str | os.PathLike[str]) -> bool:
    """True when the file's first line is a line-log header (whatever its name). Only a regular
    file is opened: a FIFO or a device would block the read."""
    if not Path(path).is_file():
        return False
    try:
        with open(path, encoding="utf-8") as f:
            first = f.readline()
        return json.loads(first).get("kind") == KIND
    except (OSError, ValueError, AttributeError):
        return False


def read_line_log(path: str | os.PathLike[str]) -> LoggedRun:
    p = Path(path)
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise BaselineError(f"cannot read line log {p}: {exc}") from None
    records, linenos, notes = [], [], []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            if i == len(lines) - 1:  # the write the kill interrupted
                notes.append(f"last line {i + 1} is cut off (killed mid-write); ignored")
                continue
            raise BaselineError(f"line log {p}: line {i + 1} is not JSON: {exc}") from None
        except RecursionError:
            raise BaselineError(f"line log {p}: line {i + 1} nests JSON too deeply") from None
        except ValueError as exc:  # an integer of more digits than Python converts
            raise BaselineError(f"line log {p}: line {i + 1}: a number with too many digits "
                                f"({str(exc).split(':')[0]})") from None
        if not isinstance(record, dict):
            raise BaselineError(f"line log {p}: line {i + 1} is a JSON {type(record).__name__}, not an object "
                                f"(a header, case or end record)")
        records.append(record)
        linenos.append(i + 1)
    if not records or records[0].get("type") != "header" or records[0].get("kind") != KIND:
        raise BaselineError(f"{p}: not an fp4bench line log (no header line)")
    head = records[0]
    _one_run(p, records)
    if not isinstance(head.get("sweep") or {}, dict):
        raise BaselineError(f"line log {p}: line {linenos[0]} (the header): 'sweep' must be an object, got "
                            f"{head.get('sweep')!r:.80}")
    planned = head.get("planned")
    if planned is not None and not (isinstance(planned, list) and all(isinstance(n, str) for n in planned)):
        raise BaselineError(f"line log {p}: line {linenos[0]} (the header): 'planned' must be a list of benchmark names, "
                            f"got {planned!r:.80}")
    benches, avail, outcomes = [], {}, {}
    complete = False
    for n, r in zip(linenos[1:], records[1:]):
        if r.get("type") == "end":
            complete = True
        elif r.get("type") == "case":
            if not isinstance(r.get("fullname"), str):
                raise BaselineError(f"line log {p}: line {n}: a case line without a fullname: {r!r:.200}")
            if not isinstance(r.get("availability") or {}, dict) or not isinstance(r.get("samples") or [], list):
                raise BaselineError(f"line log {p}: line {n}: 'availability' must be an object and 'samples' "
                                    f"a list, got {r!r:.200}")
            outcomes[r["fullname"]] = r.get("outcome", "")
            avail.update(r.get("availability") or {})
            if r.get("samples"):
                benches.append({"fullname": r["fullname"], "name": r["fullname"].rsplit("::", 1)[-1],
                                "stats": {"data": r["samples"]}, "extra_info": r.get("extra_info") or {}})
    try:
        fp = Fingerprint.from_dict(head.get("fingerprint"))
    except (TypeError, ValueError) as exc:
        raise BaselineError(f"line log {p}: bad fingerprint: {exc}") from None
    raw = {"benchmarks": benches, "fp4bench": make_section(fp, avail, head.get("sweep"), clean=None)}
    if benches:  # the same validation as a baseline file (samples finite, names unique)
        run = parse_baseline(raw, source=str(p))
    else:
        run = Baseline(fp, {}, avail, dict(head.get("sweep") or {}), None, {}, str(p))
    return LoggedRun(run, list(head.get("planned") or []), outcomes, complete, notes)


def _one_run(path: Path, records: list) -> None:
    """Refuse a file holding more than one run (two header lines: e.g. appended to by a run that
    reused the path): its cases cannot be told apart, and taking either run would silently drop
    the other's measurements, or judge one GPU's cases under another's fingerprint."""
    heads = [(i, r) for i, r in enumerate(records) if isinstance(r, dict) and r.get("type") == "header"]
    if len(heads) < 2:
        return

    def who(r: dict) -> str:
        fp = r.get("fingerprint") if isinstance(r.get("fingerprint"), dict) else {}
        return f"{fp.get('gpu_name', '?')} started {r.get('started', '?')}"

    runs = "; ".join(f"run {n + 1}: {who(r)}" for n, (_, r) in enumerate(heads))
    raise BaselineError(f"line log {path} holds {len(heads)} runs ({runs}); a line log holds one run: "
                        "keep each run in its own file")


def unreached_report(logged: LoggedRun, baseline: Baseline) -> str:
    """The lines a partial run adds under the verdict table."""
    if not logged.partial and not logged.failed:
        return ""
    return "\n".join(["", logged.describe()] + not_reached_lines(logged.not_reached, baseline.benchmarks))


def not_reached_lines(gone: list[str], baseline_names: Collection[str] = (), limit: int | None = None,
                      why: str = "the run stopped before them") -> list[str]:
    """The NOT REACHED list (shared by ``fp4bench compare`` on a line log and the pytest run
    stopped by -x / --maxfail / Ctrl-C): cases planned but never run are not judged, and are
    not MISSING (which would read as renamed or removed). ``limit``: names listed at most."""
    if not gone:
        return []
    in_base = [n for n in gone if n in baseline_names]
    lines = [f"NOT REACHED ({len(gone)}, {len(in_base)} of them in the baseline) — {why}; not judged:"]
    shown = gone if limit is None else gone[:limit]
    lines += [f"  {n}" for n in shown]
    if len(gone) > len(shown):
        lines.append(f"  ... {len(gone) - len(shown)} more")
    return lines
