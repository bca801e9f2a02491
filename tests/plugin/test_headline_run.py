"""A pytest run reports each benchmark by its headline median (``gate.record.headline_median``):
the results table, the results JSON's ``extra_info`` and the CSV show the same time, over the
windows the run took, and say what it is; pytest-benchmark's own ``stats`` stay window 1's."""

from __future__ import annotations

import csv
import io
import json

import pytest

import fp4bench.gate.compare  # noqa: F401  (imported once, not by every inline run)
import fp4bench.report.tables  # noqa: F401
from fakes.pytest_run import TINY
from fp4bench.gate.headline import LEGEND
from fp4bench.gate.record import headline_median
from fp4bench.report.tables import format_seconds

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_registry")

STEADY = ["--fp4-plugin", "fakes.pytest_run", "--fp4-backends", "steady-spin"]


def test_the_table_the_json_and_the_csv_show_the_headline_median_of_every_window(bench):
    res = bench.runpytest(*TINY, *STEADY, "--fp4-windows", "3", "--benchmark-json", "r.json", "--fp4-csv", "r.csv")
    out = res.stdout.str()
    assert res.ret == 0, out
    data = json.loads((bench.path / "r.json").read_text())
    windows = data["fp4bench"]["windows"]
    rows = {r["fullname"]: r for r in csv.DictReader(io.StringIO((bench.path / "r.csv").read_text()))}
    table = out.split("fp4bench results (CPU)")[1]
    assert LEGEND in table  # the table says what its median is
    assert len(data["benchmarks"]) == 2
    for b in data["benchmarks"]:
        ws = windows[b["fullname"]]
        assert len(ws) == 3 and b["stats"]["data"] == ws[0]  # pytest-benchmark's stats: window 1
        head = headline_median(ws)
        x = b["extra_info"]
        assert x["median_s"] == pytest.approx(head, rel=1e-12)
        assert x["median_is"] == "geometric mean of 3 window medians"
        assert x["tflops"] == pytest.approx(x["flops"] / head / 1e12)
        assert float(rows[b["fullname"]]["median_s"]) == pytest.approx(head, rel=1e-12)
        role = x["role"]
        line = next(line for line in table.splitlines() if role in line)
        assert f" {format_seconds(head)} " in f" {line} ", (line, format_seconds(head))
        assert "  3  " in line  # the windows column
