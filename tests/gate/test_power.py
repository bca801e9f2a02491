"""``fp4bench power``: detection power of the gate on synthetic A/A pairs, and its command line."""

from __future__ import annotations

import numpy as np
import pytest

from fakes.benchjson import B200, H200, bench_entry, bench_json, samples, write
from fp4bench.cli.power import power_main
from fp4bench.gate.baseline import load_baseline
from fp4bench.gate.power import detection_power, scaled

NAMES = [f"bench/test_moe.py::test_grouped[glm-5-b{b}]" for b in (1, 4, 16, 64, 256, 512)]


def _pair(tmp_path, rel_sigma=0.005, b_fp=H200, seed=0, names_b=NAMES):
    rng = np.random.default_rng(seed)
    a = bench_json([bench_entry(n, samples(rng, 40e-6, rel_sigma, 60)) for n in NAMES])
    b = bench_json([bench_entry(n, samples(rng, 40e-6, rel_sigma, 60)) for n in names_b], fingerprint=b_fp)
    return write(tmp_path / "a.json", a), write(tmp_path / "b.json", b)


def test_scaled_multiplies_every_sample(tmp_path):
    _, b = _pair(tmp_path)
    run = load_baseline(b)
    out = scaled(run, 1.07)
    for name, rec in run.benchmarks.items():
        assert np.allclose(out[name][0], np.asarray(rec.samples) * 1.07, rtol=1e-15)
    with pytest.raises(ValueError, match="> 0"):
        scaled(run, 0.0)


def test_power_rises_with_the_slowdown(tmp_path):
    a, b = (load_baseline(p) for p in _pair(tmp_path))
    rows = detection_power(a, b, [0.0, 0.02, 0.15])
    assert [r.timed for r in rows] == [6, 6, 6]
    assert rows[0].fail == 0  # unchanged: no false alarm
    assert rows[2].fail == 6  # beyond twice the floor: every benchmark fails, even one window a side
    assert rows[0].fail <= rows[1].fail <= rows[2].fail
    assert rows[2].median_delta == pytest.approx(0.15, abs=0.01)
    assert sum((rows[1].fail, rows[1].ambiguous, rows[1].passed, rows[1].other)) == 6


def test_only_common_benchmarks_count(tmp_path):
    a, b = (load_baseline(p) for p in _pair(tmp_path, names_b=NAMES[:4]))
    assert detection_power(a, b, [0.1])[0].timed == 4


def test_different_gpu_models_are_refused(tmp_path, capsys):
    a, b = _pair(tmp_path, b_fp=B200)
    assert power_main([str(a), str(b)]) == 2
    assert "NVIDIA H200" in capsys.readouterr().err


def test_cli_prints_one_row_per_slowdown(tmp_path, capsys):
    a, b = _pair(tmp_path)
    assert power_main([str(a), str(b), "--slowdowns", "0, 15%"]) == 0
    out = capsys.readouterr().out
    assert "floor 5%, guard band 2.5%" in out
    rows = [ln.split() for ln in out.splitlines()[2:]]
    assert [r[0] for r in rows] == ["0.00%", "15.00%"]
    assert rows[0][1:4] == ["0", "/", "6"] and rows[1][1:4] == ["6", "/", "6"]


@pytest.mark.parametrize("arg", ["x", "3,,5", "-100", "1e4"])
def test_cli_bad_slowdowns_name_the_value(tmp_path, capsys, arg):
    a, b = _pair(tmp_path)
    assert power_main([str(a), str(b), "--slowdowns", arg]) == 2
    assert "--slowdowns" in capsys.readouterr().err


def test_cli_missing_file(tmp_path, capsys):
    a, _ = _pair(tmp_path)
    assert power_main([str(a), str(tmp_path / "nope.json")]) == 2
    assert "nope.json does not exist" in capsys.readouterr().err
