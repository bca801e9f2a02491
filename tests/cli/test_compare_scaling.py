"""A large compare scales linearly: the work of ``fp4bench compare`` (with its verdict JSON and
markdown) grows in proportion to the benchmarks, judged by counting Python function calls
(``cProfile``), not by the wall clock. A 20,000-benchmark compare took over a minute when the
verdict table tested membership in a list of verdicts (every verdict compared with every other)."""

from __future__ import annotations

import cProfile
import contextlib
import io
import pstats

import numpy as np

from fakes.benchjson import bench_entry, bench_json, write
from fp4bench.cli.compare import compare_main


def _calls(tmp_path, n: int) -> int:
    rng = np.random.default_rng(n)
    names = [f"b.py::t[{i}]" for i in range(n)]
    base = write(tmp_path / f"b{n}.json", bench_json([bench_entry(x, list(rng.normal(1e-5, 1e-7, 5))) for x in names]))
    new = write(tmp_path / f"n{n}.json", bench_json([bench_entry(x, list(rng.normal(1e-5, 1e-7, 5))) for x in names]))
    prof = cProfile.Profile()
    with contextlib.redirect_stdout(io.StringIO()):
        prof.enable()
        compare_main([str(base), str(new), "--verdict-json", str(tmp_path / f"v{n}.json"),
                      "--markdown", str(tmp_path / f"m{n}.md")])
        prof.disable()
    return sum(v[1] for v in pstats.Stats(prof).stats.values())


def test_compare_work_grows_linearly_with_the_benchmarks(tmp_path):
    """The calls a compare adds from 100 to 400 benchmarks are 6x those it adds from 50 to 100 when
    the work is linear (a fixed cost per run cancels in the differences); a comparison of every
    verdict with every other makes them ~7.5x. About 3 s on an idle machine: a 400-benchmark
    compare under cProfile is the smallest that shows a quadratic part clearly."""
    _calls(tmp_path, 5)  # imports and first-use work out of the count
    c50, c100, c400 = _calls(tmp_path, 50), _calls(tmp_path, 100), _calls(tmp_path, 400)
    assert (c400 - c100) < 6.6 * (c100 - c50), (c50, c100, c400)
