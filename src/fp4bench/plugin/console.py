"""What a pytest run of fp4bench cases prints, for people reading a CI log.

* a progress line for long runs (``--fp4-progress``, every 30 s by default), through the
  terminal reporter so it shows without ``-s`` and never once per case;
* skip reasons that name the backend and the problem, reported at the case's own test
  location (not at the plugin line that raised the skip), and one named skip instead of
  pytest's "got empty parameter set" when no selected backend runs a kind;
* the results table fitted to ``fp4bench.report.textfit.WIDTH`` with what every row shares said once;
* the cases a stopped run (``-x``, ``--maxfail``, Ctrl-C) never ran: "not run", not MISSING.

Registered as a plugin by ``fp4bench.plugin``; its per-run state lives in ``config.stash``.
"""

from __future__ import annotations

from fp4bench import clock
from dataclasses import dataclass, field
from typing import Any, Callable, NoReturn, Sequence

import pytest

from fp4bench.report.textfit import WIDTH, common_parts, fit_message, fit_table

PROGRESS_DEFAULT_S = 30.0




# --- progress / ETA ------------------------------------------------------------------------


def duration(seconds: float) -> str:
    """``42s``, ``3m12s``, ``1h05m``: short enough for a progress line."""
    s = int(round(max(seconds, 0.0)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def progress_line(done: int, total: int, elapsed_s: float, failed: int = 0, skipped: int = 0,
                  unit: str = "cases", later: int = 0, later_what: str = "") -> str:
    """``fp4bench: 120/418 cases, 3m12s elapsed, ETA 7m57s``; the ETA assumes the cases left
    take as long on average as the ones done (skipped cases included, as they are in the
    remaining ones too), and counts ``later`` more of them after these (the further windows of
    ``--fp4-windows``, named by ``later_what``)."""
    counts = ", ".join(f"{n} {what}" for n, what in ((failed, "failed"), (skipped, "skipped")) if n)
    eta = duration(elapsed_s / done * (total - done + later)) if done else "?"
    tail = f" (with {later_what})" if later and later_what else ""
    return (f"fp4bench: {done}/{total} {unit}{f' ({counts})' if counts else ''}, "
            f"{duration(elapsed_s)} elapsed, ETA {eta}{tail}")


@dataclass
class Tracker:
    """The run's fp4bench cases: planned (collected and selected), finished (with outcome)."""

    interval_s: float = PROGRESS_DEFAULT_S
    clock: Callable[[], float] = clock.now
    planned: list[str] = field(default_factory=list)
    finished: dict[str, str] = field(default_factory=dict)
    t0: float | None = None
    last_line: float | None = None
    #: windows per case (``--fp4-windows``): passes 2.. walk every case again after the tests
    windows: int = 1

    def due(self) -> str | None:
        """The progress line when one is due now (``interval_s`` since the first case or the
        last line), else None. Never after the last case: the summary follows."""
        if self.interval_s <= 0 or self.t0 is None or not self.planned or len(self.finished) >= len(self.planned):
            return None
        now = self.clock()
        if now - (self.last_line if self.last_line is not None else self.t0) < self.interval_s:
            return None
        self.last_line = now
        outcomes = list(self.finished.values())
        more = self.windows - 1
        return progress_line(len(self.finished), len(self.planned), now - self.t0,
                             outcomes.count("failed"), outcomes.count("skipped"), later=more * len(self.planned),
                             later_what=f"{more} further window{'s' if more > 1 else ''} of each case after them")

    def windows_due(self, done: int, total: int, started: float) -> str | None:
        """During the further windows (``--fp4-windows``' passes 2..N after the tests): the progress
        line when one is due (same interval), with the ETA of the windows left."""
        if self.interval_s <= 0 or done >= total:
            return None
        now = self.clock()
        if now - max(started, self.last_line if self.last_line is not None else started) < self.interval_s:
            return None
        self.last_line = now
        return progress_line(done, total, now - started, unit="further windows")

    def not_run(self) -> list[str]:
        return [n for n in self.planned if n not in self.finished]


_TRACKER = pytest.StashKey[Tracker]()


def plan(config: pytest.Config, names: Sequence[str]) -> None:
    """Tell the run's console which fp4bench cases it runs: the xdist controller collects none
    itself and learns them from a worker (``plugin.xdist``)."""
    plugin = config.pluginmanager.get_plugin("fp4bench.plugin.console")
    if plugin is not None:
        plugin.plan(names)


def tracker(config: pytest.Config) -> Tracker:
    t = config.stash.get(_TRACKER, None)
    if t is None:
        interval = config.getoption("fp4_progress", default=PROGRESS_DEFAULT_S)  # >= 0: its type's bounds
        t = config.stash[_TRACKER] = Tracker(interval_s=PROGRESS_DEFAULT_S if interval is None else interval)
    return t


def case_of(item: pytest.Item):
    """The item's ``CaseSpec``, or None (not an fp4bench case, or the named empty one)."""
    from fp4bench.run.sweep import CaseSpec

    spec = item.callspec.params.get("fp4_case") if hasattr(item, "callspec") else None
    return spec if isinstance(spec, CaseSpec) else None


class ConsolePlugin:
    """The per-run hooks (one instance per ``pytest.Config``, registered by ``fp4bench.plugin``)."""

    def __init__(self, config: pytest.Config) -> None:
        from fp4bench.run.windows import window_count

        self.config = config
        self.tracker = tracker(config)  # a bad --fp4-progress is a usage error before anything runs
        self.tracker.windows = window_count(config)
        self._planned: set[str] = set()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.plan([i.nodeid for i in session.items if case_of(i) is not None])

    def plan(self, names: Sequence[str]) -> None:
        """The run's fp4bench cases (collected and selected), in order."""
        self.tracker.planned = list(names)
        self._planned = set(self.tracker.planned)

    def pytest_runtest_logstart(self, nodeid: str, location) -> None:
        if self.tracker.t0 is None and nodeid in self._planned:
            self.tracker.t0 = self.tracker.clock()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # a case has finished once its call ran, or its setup failed or skipped (as the line log counts)
        if report.nodeid in self._planned and (report.when == "call" or (report.when == "setup" and not report.passed)):
            self.tracker.finished[report.nodeid] = report.outcome

    def windows_progress(self, done: int, total: int, started: float) -> None:
        """A progress line of the further windows, when one is due."""
        line = self.tracker.windows_due(done, total, started)
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if line is not None and tr is not None:
            tr.write_line(line)

    @pytest.hookimpl(trylast=True)  # after the terminal reporter has written this case's result
    def pytest_runtest_logfinish(self, nodeid: str, location) -> None:
        line = self.tracker.due() if nodeid in self._planned else None
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if line is None or tr is None:
            return
        _write_between_results(tr, line)


def _write_between_results(tr: Any, line: str) -> None:
    """``line`` on a line of its own between two test results, without the blank lines a plain
    ``write_line`` leaves in pytest's progress output."""
    if getattr(tr, "showfspath", True):
        # file-name mode (default, -v): end the open line; pytest ends ours when it starts the
        # next result line (for a None path it writes no progress "[ n%]" onto ours first),
        # or with the newline it writes at the end of the session
        tr.ensure_newline()
        tr.write(line)
        tr.currentfspath = None
    else:
        # -q: dots with no file name, so pytest does not know a line is open and writes the next
        # dot right after whatever is there: the line is ended on both sides here
        if getattr(getattr(tr, "_tw", None), "width_of_current_line", 0):
            tr.write("\n")
        tr.write_line(line)


# --- skip reasons ---------------------------------------------------------------------------


def problem_label(problem: Any) -> str:
    """``glm-5 b4 moe M=4 top8 of 256 experts H=6144 I=2048``: what a reader needs to know
    which case this is, shorter than the test id."""
    o = problem.origin
    where = f"{o.model} b{o.batch}" + (f" tp{o.tp}" if o.tp != 1 else "") + (
        f" {o.routing}" if o.routing != "uniform" else "")
    if problem.kind == "dense":
        dims = f"M={problem.m} N={problem.n} K={problem.k}"
    elif problem.kind == "grouped":
        dims = f"M={problem.total_rows} ({problem.active_experts} of {problem.num_experts} experts) N={problem.n} K={problem.k}"
    else:
        dims = (f"M={problem.num_tokens} top{problem.top_k} of {problem.num_experts} experts "
                f"H={problem.hidden} I={problem.inter}")
    return f"{where} {o.role or problem.kind} {dims}"


def skip_reason(spec: Any, reason: str) -> str:
    """``<backend> [<tactic>] on <problem>: <reason>`` (the backend's own name is not repeated
    when the reason starts with it, as availability reasons do)."""
    for prefix in (f"{spec.backend}: ", f"{spec.backend} "):
        if reason.startswith(prefix):
            reason = reason[len(prefix):]
            break
    tactic = "" if spec.tactic.label == "default" else f" [{spec.tactic.label}]"
    return f"{spec.backend}{tactic} on {problem_label(spec.problem)}: {reason}"


#: the whole text of the case's skip or failure message, one line (what the run log records)
REASON = pytest.StashKey[str]()


def _shown_path(node: Any) -> str:
    """The test file as pytest's short summary names it: relative to where pytest was started."""
    import os

    try:
        return os.path.relpath(str(node.path), str(node.config.invocation_params.dir))
    except ValueError:  # another drive (Windows)
        return str(node.path)


def skip(spec: Any, reason: str, node: Any) -> NoReturn:
    """Skip the running case ``node``, reported at its test's location with ``skip_reason``
    (without ``_use_item_location`` pytest reports a skip raised in a fixture at the plugin's
    line), wrapped so that pytest's ``SKIPPED [1] path:line: <reason>`` lines fit ``WIDTH``."""
    _, line, _ = node.reportinfo()
    prefix = f"SKIPPED [99] {_shown_path(node)}:{(line or 0) + 1}: "  # room for a count of 2 digits
    node.stash[REASON] = full = skip_reason(spec, reason)
    text = "\n".join(fit_message(full, WIDTH - len(prefix)))
    try:
        exc = pytest.skip.Exception(text, _use_item_location=True)
    except TypeError:  # a pytest without item locations for skips
        pytest.skip(text)
    raise exc


def fail(node: Any, text: str, headline: str) -> NoReturn:
    """Fail the running case ``node`` with ``text`` (no traceback). pytest's short summary prints
    ``FAILED <test id> - Failed: <first line>``: a text too long for that line goes whole under
    ``headline`` (the outcome in a few words), every line within ``WIDTH``."""
    test = node.nodeid[node.nodeid.find("::"):] if "::" in node.nodeid else ""
    room = WIDTH - len(f"FAILED {_shown_path(node)}{test} - Failed: ")
    node.stash[REASON] = text
    pytest.fail("\n".join(fit_message(text, room, headline)), pytrace=False)


def empty_reason(kind: str | None, opts: Any, backends: Sequence[Any]) -> str:
    """Why a benchmark function has no case, in the user's terms."""
    if kind is None:
        return "no fp4bench case in this sweep"
    if kind not in opts.kinds:
        return f"{kind} not selected (--fp4-kinds {','.join(opts.kinds)})"
    chosen = [b for b in backends if opts.backends is None or b.name in opts.backends]
    if not any(kind in b.kinds for b in chosen):
        which = f"--fp4-backends {','.join(opts.backends)}" if opts.backends else "no registered backend does"
        return f"no selected backend runs {kind} ({which})"
    return (f"no {kind} problems in this sweep (models {','.join(opts.models)}, batches "
            f"{','.join(map(str, opts.batches))})")


def parametrize_empty(metafunc: pytest.Metafunc, reason: str) -> None:
    """One skipped ``[none]`` case carrying ``reason`` instead of an empty parameter set."""
    metafunc.parametrize("fp4_case", [pytest.param(None, marks=pytest.mark.skip(reason=reason), id="none")])


# --- results table ---------------------------------------------------------------------------

#: row keys in display order; the tactic is last before the notes: it is the one long name that
#: may have to continue on the next line (fused-MoE tactics run to ~50 characters)
RESULT_COLUMNS = ("backend", "problem", "size", "median_s", "windows", "tflops", "gbps", "pct_peak", "pct_peak_bw",
                  "noise", "sqnr_db", "tactic", "notes")


def results_lines(rows: Sequence[dict], width: int = WIDTH) -> list[str]:
    """The sweep's rows as a table of lines at most ``width``: columns empty in every row are
    left out, a backend / tactic / problem shared by every row and the notes every row has are
    said once above the table."""
    from fp4bench.report.tables import table_cells

    if not rows:
        return ["(no results)"]
    rows = [dict(r) for r in rows]
    common, notes = common_parts([str(r.get("notes") or "") for r in rows])
    for r, n in zip(rows, notes):
        r["notes"] = n
    cols = [c for c in RESULT_COLUMNS if any(r.get(c) not in (None, "") for r in rows)]
    several = any((r.get("windows") or 1) > 1 for r in rows)
    if "windows" in cols and not several:  # one window each: the median is that window's
        cols.remove("windows")
    shared = _shared_columns(rows, cols)
    head = []
    if several:
        from fp4bench.gate.headline import LEGEND

        head.append(LEGEND)
    if shared:
        head.append("every row: " + ", ".join(shared))
    if common:
        head.append("notes of every row: " + "; ".join(common))
    header, cells, right = table_cells(rows, cols)
    if several and "noise" in cols:  # the timer's own confidence interval is window 1's
        header[cols.index("noise")] = "CI95 w1"
    return head + fit_table(header, cells, right, width, wrap=cols.index("tactic") if "tactic" in cols else None,
                            trail=cols.index("notes") if "notes" in cols else None)


def _shared_columns(rows: Sequence[dict], cols: list[str]) -> list[str]:
    """Remove from ``cols`` the case columns every row has the same value in; ``"<column> <value>"``
    for each, to be said once above the table."""
    shared = []
    if len(rows) > 1:
        for c in ("backend", "tactic", "problem", "size"):
            if c in cols and len({str(r.get(c)) for r in rows}) == 1:
                cols.remove(c)
                shared.append(f"{c} {rows[0][c]}")
    return shared


#: the checks table of a run that timed nothing: case, time, what its check found
CHECK_COLUMNS = ("backend", "problem", "size", "time_s", "tactic", "check")
NOT_TIMED = "time: not measured (--benchmark-disable: every case's output is checked against the reference, nothing is timed)"


def checks_lines(rows: Sequence[dict], width: int = WIDTH) -> list[str]:
    """The checked cases of a run that timed nothing (``report.tables.check_row``) as a table of
    lines at most ``width``: what ran, on which shape, and what its check found."""
    from fp4bench.report.tables import table_cells

    if not rows:
        return ["(no case was checked)"]
    cols = list(CHECK_COLUMNS)
    shared = _shared_columns(rows, cols)
    head = [NOT_TIMED] + (["every row: " + ", ".join(shared)] if shared else [])
    header, cells, right = table_cells(list(rows), cols)
    return head + fit_table(header, cells, right, width, wrap=cols.index("tactic") if "tactic" in cols else None,
                            trail=cols.index("check"))


def skipped_lines(skipped: dict[str, str], backend_of: dict[str, str], checked: Sequence[dict],
                  width: int = WIDTH) -> list[str]:
    """One line per backend with skipped cases: how many, how many of its cases ran, and why
    (its most common reason; ``-rs`` lists every case)."""
    from collections import Counter

    from fp4bench.report.textfit import wrap_line

    reasons: dict[str, Counter] = {}
    for name, reason in skipped.items():
        backend = backend_of.get(name)
        if backend is not None:
            for prefix in (f"{backend}: ", f"{backend} "):
                reason = reason.removeprefix(prefix)
            reasons.setdefault(backend, Counter())[reason] += 1
    ran = Counter(r["backend"] for r in checked)
    lines = []
    for backend in sorted(reasons):
        why = reasons[backend]
        first = why.most_common(1)[0][0]
        others = len(why) - 1
        text = (f"{backend}: {sum(why.values())} skipped" + (f", {ran[backend]} ran" if ran[backend] else "")
                + f": {first}" + (f" (and {others} other reason{'s' if others > 1 else ''})" if others else ""))
        lines += wrap_line(text, width, indent=4)
    return lines


# --- a stopped run -----------------------------------------------------------------------------


def not_run(config: pytest.Config) -> list[str]:
    """fp4bench cases collected and selected but never run (the run stopped before them)."""
    t = config.stash.get(_TRACKER, None)
    return t.not_run() if t is not None else []


def stopped_lines(config: pytest.Config, baseline_names: Sequence[str], gating: bool) -> list[str]:
    """The lines under the verdict (or results) of a run that stopped before all its cases:
    what was not run, and what that means for the gate."""
    from fp4bench.run.linelog import not_reached_lines

    gone = not_run(config)
    if not gone:
        return []
    t = config.stash[_TRACKER]
    lines = ["", f"run INCOMPLETE: {len(gone)} of {len(t.planned)} cases not run (the run stopped early: "
                 "-x, --maxfail, Ctrl-C or an error)"]
    lines += not_reached_lines(gone, set(baseline_names), limit=20,
                               why="not run, neither renamed nor removed")
    if gating:
        if config.getoption("fp4_allow_missing"):
            lines.append("--fp4-allow-missing: the gate judged only the cases that ran")
        else:
            lines.append("an incomplete run cannot pass the gate; --fp4-allow-missing judges only what ran")
    return lines
