"""One comparison, told the same way everywhere: the terminal verdict, the markdown verdict and
``report.md`` show each benchmark's headline median (``gate.record.headline_median``), its Δ,
interval and verdict, and the rule in the same words; none shows the retired statistics.

The benchmarks have three windows of very different medians, so the window-1 median, the
median of all samples pooled and the headline median are three different numbers: an output
that showed another one would fail here.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fp4bench.gate.baseline import load_baseline, make_section
from fp4bench.gate.compare import compare
from fp4bench.gate.headline import rescaled
from fp4bench.gate.record import headline_median
from fp4bench.gate.verdict import Status
from fp4bench.report.machine import verdict_markdown
from fp4bench.report.tables import format_interval, format_seconds, policy_text, verdict_table

pytest.importorskip("matplotlib")

PREFIX = "bench/t.py::"
UNIT = replace(H200, gpu_uuid="GPU-00aa")  # one unit on both sides: full sensitivity


def _run(rng, path, medians: dict[str, list[float]]):
    """A result file of dense benchmarks, each with one window per median in ``medians[name]``
    (window medians apart: the pooled and the window-1 median differ from the headline)."""
    entries, windows = [], {}
    for name, meds in medians.items():
        ws = [samples(rng, m, 0.004, 15) for m in meds]
        flops, nbytes = 2 * 64 * 4096 * 6144, 17e6
        extra = {"backend": name, "tactic": "default", "problem": f"glm-5-b64-{name}", "kind": "dense",
                 "model": "glm-5", "role": "shared_gate_up", "m": 64, "act_format": "nvfp4",
                 "weight_format": "nvfp4", "flops": flops, "bytes": nbytes}
        fullname = f"{PREFIX}test_dense[{name}]"
        entries.append(bench_entry(fullname, ws[0], extra))
        windows[fullname] = ws
    data = bench_json(entries, UNIT)
    data["fp4bench"] = make_section(UNIT, {}, {"models": ["glm-5"]}, True, None, windows)
    return write(path, data)


@pytest.fixture
def compared(tmp_path):
    rng = np.random.default_rng(7)
    shape = np.array([20e-6, 20.1e-6, 20.6e-6])
    base = _run(rng, tmp_path / "base.json", {"steady": shape, "slower": 1.5 * shape})
    new = _run(rng, tmp_path / "new.json", {"steady": 1.001 * shape, "slower": 1.5 * 1.25 * shape})
    b, n = load_baseline(base), load_baseline(new)
    result = compare(b, n.as_current(), current_fingerprint=n.fingerprint)
    return b, n, new, result


def _row(text: str, name: str, sep: str) -> list[str]:
    line = next(line for line in text.splitlines() if name in line and line.lstrip(sep + " ").startswith(
        ("PASS", "FAIL", "AMBIGUOUS", "**FAIL", "**AMBIGUOUS")))
    return [c.strip() for c in line.split(sep) if c.strip()] if sep else line.split()


def test_terminal_markdown_and_report_agree_on_the_headline_median_and_the_verdict(compared, tmp_path):
    from fp4bench.report.document import build_report

    base, new, new_path, result = compared
    terminal = verdict_table(result)
    markdown = verdict_markdown(result)
    report = build_report([new], tmp_path / "report", result).markdown.read_text()
    by_name = {v.name: v for v in result.verdicts}
    assert {v.status for v in result.verdicts} == {Status.PASS, Status.FAIL}
    for name in ("steady", "slower"):
        full = f"{PREFIX}test_dense[{name}]"
        v = by_name[full]
        head_base, head_new = headline_median(base.benchmarks[full].windows), headline_median(new.benchmarks[full].windows)
        # the headline is neither window 1's median nor every sample pooled
        w1 = float(np.median(new.benchmarks[full].windows[0]))
        pooled = float(np.median(new.benchmarks[full].samples))
        assert format_seconds(head_new) not in (format_seconds(w1), format_seconds(pooled))
        assert (v.base_median, v.new_median) == (head_base, head_new)
        assert math.isclose(v.ratio, head_new / head_base, rel_tol=1e-12)  # Δ is the headlines' ratio
        cells = [format_seconds(head_base), format_seconds(head_new), f"{v.pct:+.1f}%", format_interval(v.interval),
                 "3+3"]
        t_row = " ".join(_row(terminal, f"test_dense[{name}]", ""))
        md_row = _row(markdown, f"test_dense[{name}]", "|")
        rp_row = _row(report, f"test_dense[{name}]", "|")
        assert md_row == rp_row  # report.md embeds the markdown verdict
        assert md_row[0].strip("*") == v.status.value and t_row.startswith(v.status.value)
        for cell in cells:
            assert cell in t_row and cell in md_row, (cell, t_row, md_row)
        # report.md's throughput table shows the same time for the run it reports
        assert re.search(rf"\| {name} \| glm-5 shared_gate_up \| 64 \| {re.escape(format_seconds(head_new))} \|", report)
    rule = policy_text(result)
    assert rule in " ".join(" ".join(terminal.split("\n")).split())
    assert rule in markdown and rule in report
    for retired in ("Holm", "p_adj", "α"):
        assert retired not in markdown and retired not in report and retired not in terminal


def test_rates_at_the_headline_median_scale_with_it():
    extra = {"flops": 2e9, "bytes": 1e7, "tflops": 100.0, "tbps": 0.5, "pct_peak_compute": 10.0,
             "pct_peak_bandwidth": 50.0}
    out = rescaled(extra, 2e9 / 50e12, 3)  # a headline where the rate is 50 TFLOP/s, half window 1's
    assert out["median_s"] == 2e9 / 50e12 and out["median_is"] == "geometric mean of 3 window medians"
    assert out["tflops"] == pytest.approx(50.0) and out["pct_peak_compute"] == pytest.approx(5.0)
    assert out["tbps"] == pytest.approx(1e7 / (2e9 / 50e12) / 1e12)
    assert out["pct_peak_bandwidth"] == pytest.approx(50.0 * out["tbps"] / 0.5)
    assert set(rescaled({}, 1e-5, 1)) == {"median_s", "median_is"}  # no counts recorded: no rates made up
