"""Files a gated pytest run writes besides pytest-benchmark's JSON: ``--fp4-verdict-json``,
``--fp4-csv`` and the markdown verdict in ``$GITHUB_STEP_SUMMARY`` (GitHub Actions job page).

Every output path of the run (these, ``--fp4-log``, ``--benchmark-json``) is checked by
``check_outputs`` when the session is configured, before any case runs, and written through
``fp4bench.outputs`` (the one write path); ``--fp4-force`` lets them replace existing files (the
line log is then truncated). ``-`` is standard output for ``--fp4-verdict-json`` and
``--fp4-csv``; the line log and ``--benchmark-json`` are files. A write that fails at the end is
one line naming the file, and the run exits 3 (incomplete).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import pytest




def check_outputs(config: pytest.Config, st: Any, log_path: Path | None) -> None:
    """``OutputError`` (a ``ValueError``) for the first output path the run may not write (the
    caller removes the candidate name reserved for ``--fp4-save-baseline``: the run never starts)."""
    from fp4bench.gate.store import partial_path
    from fp4bench.outputs import check_output, check_outputs as check_all
    from fp4bench.protected import RUN
    from fp4bench.report.machine import step_summary_path

    opt = config.getoption
    compare = opt("benchmark_compare", default=None)
    read = [f.path for f in st.baselines.files] if st.baselines is not None else [st.baseline_path]
    inputs = [*read, compare if isinstance(compare, str) else None, st.json_path]
    roots = [opt("fp4_baselines")]
    outs = check_all({"--fp4-verdict-json": opt("fp4_verdict_json"), "--fp4-csv": opt("fp4_csv")}, inputs,
                     force=opt("fp4_force"), roots=roots)
    if log_path is not None:  # the default log is the candidate's own: the run owns it
        owner = RUN if st.json_path is not None and log_path == Path(str(st.json_path) + ".lines.jsonl") else None
        outs.append(check_output(log_path, "--fp4-log", inputs=[*inputs, *outs], force=opt("fp4_force"),
                                 owner=owner, roots=roots, stdout=False))
    user_json = opt("benchmark_json", default=None)
    own = () if st.json_path is None else (st.json_path, partial_path(st.json_path))  # the candidate's
    if isinstance(user_json, (str, os.PathLike)) and Path(user_json) not in own:
        # pytest-benchmark's documented meaning is to replace the file: refused only when protected
        check_output(user_json, "--benchmark-json", inputs=[*inputs, *outs], force=True, roots=roots, stdout=False)
    if st.baseline is not None:  # the only runs that write the job summary
        step_summary_path(inputs=[*inputs, *outs])


def write_outputs(st: Any, result: Any, echo: Callable[[str], None]) -> None:
    """``st``: the plugin's session state; ``result``: its CompareResult or None (no baseline)."""
    from fp4bench.gate.verdict_json import dumps
    from fp4bench.report.machine import results_csv, verdict_json, verdict_markdown, write_step_summary

    from fp4bench.plugin.console import not_run

    opt = st.config.getoption
    base = str(st.baseline_path) if st.baseline_path is not None else None
    gone = not_run(st.config)  # a run stopped early (-x, --maxfail, Ctrl-C): not a complete verdict
    if opt("fp4_verdict_json"):
        if result is None:
            echo("fp4bench: --fp4-verdict-json: no baseline active (use --benchmark-compare), nothing written")
        else:
            data = verdict_json(result, base)  # a stopped run's cases are in its coverage (not reached)
            _write(st, "--fp4-verdict-json", dumps(data), "verdict JSON", echo)
    if opt("fp4_csv"):
        _write(st, "--fp4-csv", results_csv(_csv_rows(st), {v.name: v for v in result.verdicts}
                                            if result is not None else None), "results CSV", echo)
    if result is not None:
        md = verdict_markdown(result, base)
        if gone:
            md = (f"> **run incomplete: {len(gone)} cases not run** (stopped early: -x, --maxfail, Ctrl-C or an "
                  f"error){'' if opt('fp4_allow_missing') else ' — the gate cannot pass'}\n\n") + md
        from fp4bench.outputs import WriteError

        try:
            target = write_step_summary(md)
        except WriteError as exc:
            echo(f"fp4bench: $GITHUB_STEP_SUMMARY: {exc}; verdict not added to the job summary")
            _incomplete(st)
            return
        if target is not None:
            echo(f"fp4bench: verdict added to the job summary ({target})")


def _write(st: Any, option: str, text: str, what: str, echo: Callable[[str], None]) -> None:
    """Write one output atomically. A write that fails anyway (the folder removed during the run,
    a full disk) is one line naming the option, and the run cannot pass: its outputs are not all
    there (exit 3, the "incomplete" status). The measured cases are on disk already: the line log
    and pytest-benchmark's JSON are written before this."""
    from fp4bench.outputs import is_stdout, write_document

    path = st.config.getoption(option.lstrip("-").replace("-", "_"))
    try:
        write_document(path, text)
    except OSError as exc:
        echo(f"fp4bench: {option}: {exc}; {what} not written")
        _incomplete(st)
        return
    if not is_stdout(path):
        echo(f"fp4bench: {what} written to {path}")


def _incomplete(st: Any) -> None:
    """A write failed at the end: the run cannot pass (exit 3, the "incomplete" status)."""
    session = st.config.pluginmanager.get_plugin("session")
    if session is not None and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # 3: incomplete


def _csv_rows(st: Any) -> list:
    """The measured cases as report rows (same columns as ``fp4bench report``)."""
    from fp4bench.gate.record import with_windows
    from fp4bench.measure.peaks import peak_for
    from fp4bench.plugin.finish import judged_windows
    from fp4bench.report.data import case_row

    peaks = peak_for(st.fingerprint.gpu_name) if st.device is not None and st.device.type == "cuda" else None
    return [case_row(with_windows(name, name, judged_windows(st, name), dict(extra)), peaks)
            for name, (_, extra) in st.measured.items()]
