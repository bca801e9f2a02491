"""``fp4bench compare`` run in-process on synthetic files: exit codes 0 / 1 / 2 and the output."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import B200, H200, bench_entry, bench_json, samples, write
from fp4bench.cli.compare import compare_main

NAMES = [f"bench/test_moe.py::test_grouped[ds-v3-b{b}]" for b in (1, 64, 512)]
#: both files of a pair from one GPU unit (the rule's full sensitivity)
UNIT = replace(H200, gpu_uuid="GPU-00aa")


def run_pair(tmp_path, factors, new_fp=UNIT, drop=(), avail_base=None, avail_new=None, seed=0):
    rng = np.random.default_rng(seed)
    base = bench_json([bench_entry(n, samples(rng, 30e-6, 0.01)) for n in NAMES], availability=avail_base,
                      fingerprint=UNIT)
    new = bench_json(
        [bench_entry(n, samples(rng, 30e-6 * f, 0.01)) for n, f in zip(NAMES, factors) if n not in drop],
        fingerprint=new_fp, availability=avail_new,
    )
    return write(tmp_path / "base.json", base), write(tmp_path / "new.json", new)


def test_exit_0_when_unchanged(tmp_path, capsys):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0], new_fp=replace(UNIT, driver="590.2"))
    assert compare_main([str(b), str(n)]) == 0
    out = capsys.readouterr().out
    assert "what changed: driver 580.1 → 590.2" in out
    assert "3 PASS" in out and "exit 0" in out


def test_exit_1_on_regression(tmp_path, capsys):
    b, n = run_pair(tmp_path, [1.0, 1.12, 1.0])
    assert compare_main([str(b), str(n)]) == 1
    out = capsys.readouterr().out
    first_row = out.split("\n---")[1].splitlines()[1]  # the row after the header rule
    assert first_row.startswith("FAIL") and "b64" in first_row
    # the same slowdown under a 15 % floor is no FAIL, but beyond its 7.5 % guard band on one
    # window a side: not "no regression" either (re-measure, exit 3)
    assert compare_main([str(b), str(n), "--floor", "15"]) == 3
    assert "re-measure" in capsys.readouterr().out
    assert compare_main([str(b), str(n), "--floor", "30"]) == 0


def test_missing_fails_unless_allowed(tmp_path, capsys):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0], drop=(NAMES[2],))
    assert compare_main([str(b), str(n)]) == 3  # fewer judged than expected: incomplete
    out = capsys.readouterr().out
    assert "MISSING (1)" in out
    assert out.rstrip().endswith("→ INCOMPLETE: judged 2 of 3 expected benchmarks (1 MISSING) (exit 3)")
    assert compare_main([str(b), str(n), "--allow-missing"]) == 0


def test_lost_tactic_fails(tmp_path):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0], avail_base={"fi|p|t": "ok"}, avail_new={"fi|p|t": "unsupported: gone"})
    assert compare_main([str(b), str(n)]) == 1


def test_exit_2_incompatible_gpu(tmp_path, capsys):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0], new_fp=B200)
    assert compare_main([str(b), str(n)]) == 2
    err = capsys.readouterr().err
    assert "NVIDIA H200" in err and "NVIDIA B200" in err


def test_exit_2_bad_files(tmp_path, capsys):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0])
    assert compare_main([str(b), str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "corrupt.json").write_text("{not json")
    assert compare_main([str(tmp_path / "corrupt.json"), str(n)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    plain = write(tmp_path / "plain.json", bench_json([bench_entry(NAMES[0], [1e-5] * 5)], fingerprint=None))
    assert compare_main([str(b), str(plain)]) == 2
    assert "fp4bench" in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra",
    [["--verdict-min-samples", "x"], ["--floor", "-1"], ["--verdict-min-samples", "1"],
     ["--dispatch", "ignore"], ["--bogus"]],
)
def test_exit_2_usage(tmp_path, capsys, extra):
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0])
    assert compare_main([str(b), str(n), *extra]) == 2
    assert capsys.readouterr().err.strip()


def test_usage_missing_args_and_help(capsys):
    assert compare_main([]) == 2
    assert compare_main(["--help"]) == 0
    assert "exit status" in capsys.readouterr().out


def test_fractional_floor_is_accepted(tmp_path):
    """pytest-benchmark rejects median:2.5% (its compare-fail takes whole percents only); we take it."""
    b, n = run_pair(tmp_path, [1.0, 1.0, 1.0])
    assert compare_main([str(b), str(n), "--floor", "2.5"]) == 0
