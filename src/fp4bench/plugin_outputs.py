"""Files a gated pytest run writes besides pytest-benchmark's JSON: ``--fp4-verdict-json``,
``--fp4-csv`` and the markdown verdict in ``$GITHUB_STEP_SUMMARY`` (GitHub Actions job page)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable


def write_outputs(st: Any, result: Any, echo: Callable[[str], None]) -> None:
    """``st``: the plugin's session state; ``result``: its CompareResult or None (no baseline)."""
    from fp4bench.reporting.machine import results_csv, verdict_json, verdict_markdown, write_step_summary

    from fp4bench.plugin_console import not_run

    opt = st.config.getoption
    base = str(st.baseline_path) if st.baseline_path is not None else None
    gone = not_run(st.config)  # a run stopped early (-x, --maxfail, Ctrl-C): not a complete verdict
    if opt("fp4_verdict_json"):
        if result is None:
            echo("fp4bench: --fp4-verdict-json: no baseline active (use --benchmark-compare), nothing written")
        else:
            data = verdict_json(result, base)  # a stopped run's cases are in its coverage (not reached)
            Path(opt("fp4_verdict_json")).write_text(json.dumps(data, indent=1) + "\n")
            echo(f"fp4bench: verdict JSON written to {opt('fp4_verdict_json')}")
    if opt("fp4_csv"):
        Path(opt("fp4_csv")).write_text(results_csv(_csv_rows(st), {v.name: v for v in result.verdicts}
                                                    if result is not None else None))
        echo(f"fp4bench: results CSV written to {opt('fp4_csv')}")
    if result is not None:
        md = verdict_markdown(result, base)
        if gone:
            md = (f"> **run incomplete: {len(gone)} cases not run** (stopped early: -x, --maxfail, Ctrl-C or an "
                  f"error){'' if opt('fp4_allow_missing') else ' — the gate cannot pass'}\n\n") + md
        target = write_step_summary(md)
        if target is not None:
            echo(f"fp4bench: verdict added to the job summary ({target})")


def _csv_rows(st: Any) -> list:
    """The measured cases as report rows (same columns as ``fp4bench report``)."""
    from fp4bench.gate.baseline import BenchmarkRecord
    from fp4bench.measure.peaks import peak_for
    from fp4bench.reporting.data import case_row

    peaks = peak_for(st.fingerprint.gpu_name) if st.device is not None and st.device.type == "cuda" else None
    return [case_row(BenchmarkRecord(name, name, tuple(samples), dict(extra)), peaks)
            for name, (samples, extra) in st.measured.items()]
