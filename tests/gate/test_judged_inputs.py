"""Inputs that would make the gate judge nothing or nonsense: impossible times and unknown schema
numbers in a baseline or a run, and ``approve`` of a run the gate could not judge against."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fp4bench.cli import main
from fp4bench.cli.compare import compare_main
from fp4bench.gate.approve import approve
from fp4bench.gate.baseline import BaselineError, parse_baseline
from fp4bench.gate.record import MAX_SAMPLE_S, MIN_SAMPLE_S, check_samples

MED = 23.1e-6
NAME = "bench/test_fp4_gemm.py::test_dense[x]"


def _file(tmp_path, name, data_samples, **kw):
    return write(tmp_path / name, bench_json([bench_entry(NAME, data_samples)], **kw))


@pytest.mark.parametrize("bad", [1e-30, 5e-324, 1e6, MIN_SAMPLE_S / 2, MAX_SAMPLE_S * 2])
def test_impossible_times_are_refused_naming_the_benchmark_and_value(tmp_path, capsys, bad):
    good = samples(np.random.default_rng(1), MED, 0.01)
    base, new = _file(tmp_path, "base.json", good), _file(tmp_path, "new.json", good[:-1] + [bad])
    for args in ([str(base), str(new)], [str(new), str(base)]):  # in the run, and in the baseline
        assert compare_main(args) == 2
        err = capsys.readouterr().err
        assert NAME in err and f"{bad:g} s" in err and "impossible sample" in err, err
        assert "Traceback" not in err


def test_the_limits_keep_real_timings():
    # a 2 µs decode GEMM on an H200 and a 30 s CPU reference call are both timings
    assert check_samples([2e-6, 30.0], "x") == (2e-6, 30.0)
    with pytest.raises(ValueError, match=r"'b' has 1 impossible sample\(s\), e.g. 1e-30 s"):
        check_samples([2e-6, 1e-30], "'b'")


@pytest.mark.parametrize("schema", [-1, 0])
def test_unknown_schema_numbers_are_refused_with_the_supported_list(schema):
    data = bench_json([bench_entry(NAME, [MED] * 5)])
    data["fp4bench"]["schema"] = schema
    with pytest.raises(BaselineError, match=rf"schema' {schema} is not a schema fp4bench wrote \(supported: 1, 2\)"):
        parse_baseline(data)


def _candidate(tmp_path, name, fingerprint=H200, extra=None, n=3):
    rng = np.random.default_rng(2)
    entries = [bench_entry(f"{NAME[:-3]}[{i}]", samples(rng, MED, 0.01), (extra or {}).get(i)) for i in range(n)]
    return write(tmp_path / name, bench_json(entries, fingerprint=fingerprint))


def test_approve_refuses_a_run_of_invalid_timings(tmp_path, capsys):
    root = tmp_path / "baselines"
    every = _candidate(tmp_path, "all.json", extra={i: {"clock_anomaly": "SM clock 345 MHz"} for i in range(3)})
    for force in ([], ["--force"]):
        assert main(["baseline", "approve", str(every), "--baselines", str(root), *force]) == 2
        err = capsys.readouterr().err
        assert "every one of its 3 benchmarks is flagged clock_anomaly/invalid" in err
        assert "never approved, not even with --force" in err
    some = _candidate(tmp_path, "some.json", extra={1: {"invalid": "profiler failed"}})
    assert main(["baseline", "approve", str(some), "--baselines", str(root)]) == 2
    err = capsys.readouterr().err
    assert "1 of its 3 benchmarks are flagged clock_anomaly/invalid" in err and f"{NAME[:-3]}[1]" in err
    assert "--force" in err and "use force" not in err
    assert not (root / "nvidia-h200" / "approved.json").exists()
    assert main(["baseline", "approve", str(some), "--baselines", str(root), "--force"]) == 0


def test_approve_refuses_another_compute_capability_under_the_same_name(tmp_path, capsys):
    root = tmp_path / "baselines"
    assert approve(_candidate(tmp_path, "h200.json"), root).replaced is False
    other = _candidate(tmp_path, "sm100.json", fingerprint=replace(H200, compute_capability="10.0"))
    assert main(["baseline", "approve", str(other), "--baselines", str(root)]) == 2
    err = capsys.readouterr().err
    assert "compute capability 10.0, the approved baseline 9.0" in err
    assert json.loads((root / "nvidia-h200" / "approved.json").read_text())["fingerprint"]["compute_capability"] \
        == "9.0"
