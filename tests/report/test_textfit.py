"""Tables that fit a CI log (``fp4bench.report.textfit``): at most 160 characters a line, what every
row shares said once above the table, long names split at dashes, notes under their row."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from fakes.benchjson import H200, bench_entry, bench_json, samples
from fp4bench.gate.baseline import parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.policy import Policy
from fp4bench.report.tables import verdict_table
from fp4bench.report.textfit import WIDTH, common_parts, common_prefix, fit_table


def _width(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_fit_table_moves_notes_under_the_row_then_wraps_the_name_at_dashes():
    name = ("test_moe[flashinfer-cutlass-moe-g1-000:64x16x128B_c1x1_pingpong_swapab+g2-default-glm-5-b1-tp1-uniform-moe-"
            "t1e256k8a8h6144i2048]")
    rows = [["FAIL", name, "124.2 µs", "+6.6%", "slower beyond floor and noise; " + "x" * 80],
            ["PASS", "test_dense[a]", "9 µs", "+0.1%", ""]]
    lines = fit_table(["verdict", "benchmark", "now", "Δ", "notes"], rows, [False, False, True, True, False],
                      width=100, wrap=1, trail=4)
    assert max(map(len, lines)) <= 100
    col = lines[0].index("benchmark")
    assert lines[2].startswith("FAIL") and lines[2][col:].split()[0].endswith("-")  # cut after a dash
    rest = [ln for ln in lines[3:] if ln.startswith(" " * col) and not ln.startswith(" " * (col + 2))]
    assert "".join([lines[2][col:].split()[0]] + [r.strip() for r in rest]) == name  # nothing lost
    assert any(ln.strip().startswith("slower beyond floor") for ln in lines)  # the notes, under the row
    short = fit_table(["a", "notes"], [["x", "y"]], [False, False], width=100, wrap=0, trail=1)
    assert short == ["a  notes", "-  -----", "x  y"]  # fits: unchanged layout


def test_common_prefix_and_parts():
    assert common_prefix(["bench/t.py::test_a[x]", "bench/t.py::test_b[y]"]) == "bench/t.py::"
    assert common_prefix(["a.py::t", "b.py::t"]) == "" and common_prefix(["a.py::t"]) == ""
    assert common_parts(["cpu; hot; x", "cpu; hot"]) == (["cpu", "hot"], ["x", ""])


def test_verdict_table_of_long_names_fits_160():
    rng = np.random.default_rng(0)
    names = [f"bench/test_fp4_gemm.py::test_moe[flashinfer-cutlass-moe-g1-000:64x16x128B_c1x1_pingpong_swapab+g2-"
             f"default-glm-5-b{b}-tp1-uniform-moe-t{b}e256k8a8h6144i2048]" for b in (1, 64)]
    base = parse_baseline(bench_json([bench_entry(n, samples(rng, 25e-6, 0.01)) for n in names]))
    cur = {n: (samples(rng, 25e-6 * f, 0.01), {"kernels": ["k"]}) for n, f in zip(names, (1.3, 1.0))}
    text = verdict_table(compare(base, cur, {}, Policy(), current_fingerprint=replace(H200, driver="590.2")))
    assert _width(text) <= WIDTH
    assert "benchmark names: bench/test_fp4_gemm.py::<name> (the table and the notes below it leave the prefix out)" in text
    assert text.count("bench/test_fp4_gemm.py::") == 1  # the prefix is said once, not per row
