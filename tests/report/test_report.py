"""Text tables: the verdict report and the plain sweep table."""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from fakes.benchjson import H200, bench_entry, bench_json, samples
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare, delta_spread
from fp4bench.gate.policy import Policy
from fp4bench.report.tables import describe_changes, format_seconds, verdict_table


def _result():
    rng = np.random.default_rng(0)
    names = ["t[pass]", "t[slow]", "t[gone]", "t[thr]"]
    base = parse_baseline(bench_json([bench_entry(n, samples(rng, 25e-6, 0.01)) for n in names],
                                     availability={"fi|p|a": "ok"}))
    cur = {
        "t[pass]": (samples(rng, 25e-6, 0.01), {}),
        "t[slow]": (samples(rng, 28e-6, 0.01), {}),
        "t[thr]": (samples(rng, 35e-6, 0.01), {"throttled": True, "throttle_reasons": ["SwPowerCap"]}),
        "t[added]": (samples(rng, 1e-3, 0.01), {}),
    }
    unit = replace(H200, gpu_uuid="GPU-00aa")  # one unit on both sides: full sensitivity
    base = replace(base, fingerprint=unit)
    return compare(base, cur, {"fi|p|a": "unsupported: x"}, Policy(throttle="invalid"),
                   current_fingerprint=replace(unit, driver="590.2", torch="2.12.0"))


def test_verdict_table_order_and_sections():
    text = verdict_table(_result())
    lines = text.splitlines()
    assert "what changed: driver 580.1 → 590.2; torch 2.11.0 → 2.12.0" in text
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("-------"))
    header = lines[rule - 1].split()
    assert header[:7] == ["verdict", "benchmark", "base", "now", "Δ", "interval", "windows"]
    statuses = ("FAIL", "MISSING", "INVALID", "NEW", "PASS", "AMBIGUOUS")
    rows = [ln for ln in lines[rule + 1:] if ln.split() and ln.split()[0] in statuses][:6]  # notes wrap
    assert [r.split()[0] for r in rows] == ["FAIL", "FAIL", "MISSING", "INVALID", "NEW", "PASS"]
    assert "t[slow]" in rows[0] and re.search(r"\+1[0-4]\.\d%", rows[0]) and "lost tactic" in rows[1]
    assert "MISSING (1)" in text and "  t[gone]" in text
    assert "NEW (1)" in text and "  t[added]" in text
    assert "suspects to re-measure (1): t[thr]" in text  # a FAIL is decided, not a suspect
    assert text.rstrip().endswith("→ regression (exit 1)")
    col = lines[rule - 1].index("benchmark")  # fixed width: every name starts in the same column
    assert all(r[col - 2: col] == "  " and r[col] != " " for r in rows)


def test_describe_changes_none():
    assert describe_changes([]) == "nothing (same software stack)"
    assert describe_changes([("sgl_kernel", None, "0.3.9")]) == "sgl_kernel - → 0.3.9"


def test_format_seconds():
    assert format_seconds(2.31e-5) == "23.1 µs"
    assert format_seconds(1.5e-3) == "1.5 ms"
    assert format_seconds(2.0) == "2 s"
    assert format_seconds(5e-9) == "5 ns"
    assert format_seconds(None) == "-"


def test_delta_spread_covers_timed_benchmarks_measured_in_both_runs():
    res = _result()
    n, med, p95, mx = delta_spread(res)
    ratios = sorted(abs(v.ratio - 1) for v in res.verdicts if v.kind == "timing" and v.ratio is not None)
    assert n == 3 == len(ratios)  # pass, slow, throttled; not the missing, new or availability entries
    assert med == ratios[1] and mx == ratios[-1] and ratios[1] <= p95 <= ratios[-1]
    assert mx > 0.3  # the throttled one: 35 µs vs 25 µs
    assert f"median |Δ| {med * 100:.2f}%" in verdict_table(res)
