"""The one-line verdict says why a run fails: benchmarks that could not be judged fail the gate
(no verdict is not a pass), and the line says so instead of reading like a measured slowdown
("4 AMBIGUOUS → regression")."""

from __future__ import annotations

import numpy as np

from fakes.benchjson import bench_entry, bench_json, samples, write
from fp4bench.cli.compare import compare_main


def test_a_run_that_could_not_be_judged_says_so(tmp_path, capsys):
    rng = np.random.default_rng(0)
    names = [f"b.py::t[{i}]" for i in range(4)]
    base = write(tmp_path / "b.json", bench_json([bench_entry(n, samples(rng, 30e-6, 0.01, 30)) for n in names]))
    new = write(tmp_path / "n.json", bench_json([bench_entry(n, samples(rng, 30e-6, 0.01, 3)) for n in names]))
    assert compare_main([str(base), str(new)]) == 1
    summary = [line for line in capsys.readouterr().out.splitlines() if line.startswith("summary:")]
    assert summary == ["summary: 4 AMBIGUOUS → regression: 4 benchmarks without a verdict (AMBIGUOUS: too few "
                       "samples, undecided or not judgeable) fail the gate, none was shown slower (exit 1)"]
