"""The end of a pytest run: the whole run against the baseline, and the ``"fp4bench"`` section
of the run's JSON.

``final_compare`` judges each benchmark on the very windows its test judged (so the verdict table
and the test outcomes agree) within the run's scope (what ``-k``/``-m`` and the sweep options left
out is not expected; what a stopped run never reached is counted). ``json_section`` says whether
the saved run is clean enough to become a baseline. ``st`` is the run's
``plugin.session.Fp4Session``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fp4bench.backends.registry import all_backends
from fp4bench.gate.baseline import make_section
from fp4bench.gate.coverage import Scope
from fp4bench.gate.compare import CompareResult, compare
from fp4bench.plugin.console import not_run
from fp4bench.run.sweep import selection_of, unnamed_backends


def final_compare(st: Any) -> CompareResult:
    """The whole run against the baseline (needs one), each benchmark on the windows its test
    judged; each benchmark against the file of the GPU it ran on when the run has unit files or
    was merged from several GPUs (``gate.choice``)."""
    # what -k/-m deselected and what the given sweep options leave out (a backend that runs on
    # this device only when named included) is not expected; the cases a stopped run (-x,
    # --maxfail, Ctrl-C) never reached are not reached
    selected = None if st.sweep is None else selection_of(
        st.sweep, lambda name: st.config.getoption("fp4_" + name, default=None),
        unnamed_backends(st.sweep, all_backends(), getattr(st.device, "type", "cpu")))
    scope = Scope(excluded=frozenset(st.deselected), selected=selected,
                  not_reached=tuple(not_run(st.config)), skipped_now=dict(st.skipped))
    current = {name: (judged_windows(st, name), extra) for name, (_, extra) in st.measured.items()}
    if st.baselines is None or (not st.baselines.units and not st.merged):
        return compare(st.baseline, current, st.availability, st.policy, st.fingerprint,
                       current_sweep=st.measurement(), scope=scope)
    base, policies, notes = st.baselines.merged(st.ran_on(), st.policy)
    result = compare(base, current, st.availability, st.policy, st.fingerprint,
                     current_sweep=st.measurement(), scope=scope, policies=policies)
    result.notes[:0] = notes
    return result


def judged_windows(st: Any, name: str) -> list[list[float]]:
    """The windows of ``name`` this run judges: those its test judged (windows of later
    ``--fp4-windows`` passes are recorded for a later comparison, not judged now); every window
    when the run gates nothing."""
    ws = st.windows[name]
    return ws[:st.judged.get(name, len(ws))]


def headline(st: Any, name: str) -> dict[str, Any]:
    """The headline median of ``name`` over its judged windows, with the rates at that time
    (``gate.headline.rescaled``: the ``extra_info`` entries and results-table values)."""
    from fp4bench.gate.headline import rescaled
    from fp4bench.gate.record import headline_median

    ws = judged_windows(st, name)
    return rescaled(st.measured[name][1], headline_median(ws), len(ws))


def headline_rows(st: Any) -> list[dict]:
    """The results table's rows with each benchmark's headline median and its rates (a row is
    made when the case's first window is measured; further windows change its time)."""
    name_of = {id(row): name for name, row in st.row_of.items()}
    out = []
    for row in st.rows:
        name = name_of.get(id(row))
        if name is None or name not in st.measured:
            out.append(row)
            continue
        h = headline(st, name)
        out.append({**row, "median_s": h["median_s"], "tflops": h.get("tflops", row.get("tflops")),
                    "gbps": h["tbps"] * 1e3 if "tbps" in h else row.get("gbps"),
                    "pct_peak": h.get("pct_peak_compute", row.get("pct_peak")),
                    "pct_peak_bw": h.get("pct_peak_bandwidth", row.get("pct_peak_bw")),
                    "windows": len(judged_windows(st, name))})
    return out


def annotate_entries(st: Any, entries: list[dict]) -> None:
    """Each benchmark entry of the results file carries its headline median in ``extra_info``
    (``median_s``, ``median_is``) and its rates at that time; pytest-benchmark's ``stats`` stay
    what they are: window 1's."""
    for entry in entries:
        name = entry.get("fullname")
        if name in st.measured and isinstance(entry.get("extra_info"), dict):
            entry["extra_info"].update(headline(st, name))


def ran_on(st: Any) -> dict[str, Any]:
    """Each measured benchmark's GPU, as the fingerprint its test was judged with."""
    out = {}
    for name, (_, extra) in st.measured.items():
        uuid = extra.get("gpu_uuid", st.fingerprint.gpu_uuid)
        fp = st.unit_fingerprints.get(uuid)
        out[name] = fp if fp is not None else dataclasses.replace(st.fingerprint, gpu_uuid=uuid)
    return out


def json_section(st: Any) -> dict[str, Any]:
    """The ``"fp4bench"`` section of the run's JSON: fingerprint, availability, sweep, and
    whether the run is clean enough to become a baseline (also kept in ``st.clean``)."""
    verdicts = None
    # pytest-benchmark writes its JSON before any plain pytest_sessionfinish runs: the context
    # check must be done here, or a poisoned run would be saved clean
    st.check_health()
    test_only = st.test_only()
    clean = (st.failed_tests == 0 and not st.interrupted and not st.health and not test_only
             and not not_run(st.config) and not st.window_errors)
    if st.baseline is not None:
        result = st.final_compare()
        verdicts = result.counts()
        clean = clean and result.exit_code == 0  # a run with MISSING or regressed entries is not clean
    sweep = {**(st.sweep.to_dict() if st.sweep else {}), **st.measurement()}
    if test_only:
        sweep["test_only"] = test_only
    st.clean = clean
    section = make_section(st.fingerprint, st.availability, sweep, clean=clean, verdicts=verdicts,
                           windows={k: w for k, w in st.windows.items() if len(w) > 1})
    if st.health:
        section["context_health"] = st.health
    return section
