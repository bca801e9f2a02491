"""Baseline files: validation errors, per-GPU selection, candidates and approval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import numpy as np
import pytest

from fakes.benchjson import B200, H200, bench_entry, bench_json, samples, write
from fp4bench.gate.approve import approve
from fp4bench.gate.baseline import (SCHEMA, BaselineError, availability_key, availability_value, load_baseline,
                                    make_section, write_baseline)
from fp4bench.gate.compatibility import IncompatibleBaseline, check_compatible
from fp4bench.gate.store import approved_path, available_models, candidate_path, select_baseline

RNG = np.random.default_rng(0)


def entries(n=3, med=20e-6):
    return [
        bench_entry(f"bench/test_fp4.py::test_gemm[m{i}]", samples(RNG, med, 0.01, 8), {"kernels": ["k"]})
        for i in range(n)
    ]


def test_load_round_trip(tmp_path):
    avail = {availability_key("flashinfer-cutlass", "ds-v3-b64", "tile128"): "ok",
             availability_key("sgl", "ds-v3-b64", "default"): availability_value(False, "needs sm100")}
    p = write(tmp_path / "b.json", bench_json(entries(), availability=avail))
    b = load_baseline(p)
    assert b.fingerprint == H200 and b.clean is True
    assert list(b.benchmarks) == [f"bench/test_fp4.py::test_gemm[m{i}]" for i in range(3)]
    rec = b.benchmarks["bench/test_fp4.py::test_gemm[m1]"]
    assert len(rec.samples) == 8 and rec.extra_info == {"kernels": ["k"]} and rec.name == "test_gemm[m1]"
    assert rec.median == pytest.approx(float(np.median(rec.samples)))
    assert b.availability["sgl|ds-v3-b64|default"] == "unsupported: needs sm100"
    assert b.sweep == {"models": ["synthetic"]}
    assert set(b.as_current()) == set(b.benchmarks)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.pop("benchmarks"), "no 'benchmarks'"),
        (lambda d: d.update(benchmarks=[]), "no 'benchmarks'"),
        (lambda d: d["benchmarks"][1]["stats"].pop("data"), r"test_gemm\[m1\].*no raw samples.*--benchmark-json"),
        (lambda d: d["benchmarks"][0]["stats"].update(data=[]), "raw samples are required"),
        (lambda d: d["benchmarks"][0]["stats"].update(data=[1e-5, "x"]), "invalid sample.*x"),
        (lambda d: d["benchmarks"][0]["stats"].update(data=[1e-5, -1.0]), "invalid sample"),
        (lambda d: d["benchmarks"].append(d["benchmarks"][0]), "appears twice"),
        (lambda d: d.pop("fp4bench"), "no 'fp4bench' section"),
        (lambda d: d["fp4bench"].update(schema=SCHEMA + 1), "newer than this fp4bench supports"),
        (lambda d: d["fp4bench"].update(schema="1"), "must be an integer"),
        (lambda d: d["fp4bench"].pop("fingerprint"), "no fingerprint"),
        (lambda d: d["fp4bench"]["fingerprint"].pop("gpu_name"), "bad fingerprint.*gpu_name"),
        (lambda d: d["fp4bench"].update(availability={"a|b|c": "yes"}), "must be 'ok' or 'unsupported"),
        (lambda d: d["fp4bench"].update(clean="yes"), "clean"),
    ],
)
def test_load_errors(tmp_path, mutate, match):
    d = bench_json(entries())
    mutate(d)
    p = write(tmp_path / "bad.json", d)
    with pytest.raises(BaselineError, match=match) as ei:
        load_baseline(p)
    assert str(p) in str(ei.value)


def test_missing_and_corrupt_files(tmp_path):
    with pytest.raises(BaselineError, match="does not exist"):
        load_baseline(tmp_path / "nope.json")
    p = tmp_path / "corrupt.json"
    p.write_text('{"benchmarks": [')
    with pytest.raises(BaselineError, match="not valid JSON"):
        load_baseline(p)
    p.write_text("[1, 2]")
    with pytest.raises(BaselineError, match="JSON object"):
        load_baseline(p)
    assert issubclass(BaselineError, ValueError)


def test_real_pytest_benchmark_json_loads(tmp_path):
    """Our parser reads what pytest-benchmark itself writes (plus the fp4bench section)."""
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent("""
        import pytest
        @pytest.mark.parametrize("n", [10, 20])
        def test_sum(benchmark, n):
            benchmark.extra_info["kernels"] = ["sum"]
            benchmark.pedantic(sum, args=(range(n),), rounds=6, iterations=1)
    """))
    out = tmp_path / "out.json"
    # an xdist worker's variables would make the child's pytest-benchmark think it is a worker too
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "pytest_benchmark.plugin", "-p", "no:cacheprovider",
         "test_tiny.py", f"--benchmark-json={out}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    data = json.loads(out.read_text())
    with pytest.raises(BaselineError, match="no 'fp4bench' section"):
        write_baseline(data, tmp_path / "x.json")
    data["fp4bench"] = make_section(H200, clean=True)
    b = load_baseline(write_baseline(data, tmp_path / "real.json"))
    assert set(b.benchmarks) == {"test_tiny.py::test_sum[10]", "test_tiny.py::test_sum[20]"}
    assert all(len(r.samples) == 6 and r.extra_info == {"kernels": ["sum"]} for r in b.benchmarks.values())


def test_write_baseline_validates_and_is_atomic(tmp_path):
    d = bench_json(entries())
    d["benchmarks"][0]["stats"].pop("data")
    with pytest.raises(BaselineError, match="raw samples"):
        write_baseline(d, tmp_path / "x" / "y.json")
    assert not (tmp_path / "x" / "y.json").exists()
    p = write_baseline(bench_json(entries()), tmp_path / "x" / "y.json")
    assert load_baseline(p).fingerprint == H200
    assert [f.name for f in p.parent.iterdir()] == ["y.json"]  # no temp files left


def test_select_approved_not_newest(tmp_path):
    root = tmp_path / "baselines"
    approved = write_baseline(bench_json(entries(med=20e-6)), approved_path(root, "nvidia-h200"))
    newer = candidate_path(root, "nvidia-h200", datetime(2030, 1, 1, tzinfo=timezone.utc))
    write_baseline(bench_json(entries(med=40e-6)), newer)
    os.utime(newer, (4e9, 4e9))  # newest by mtime and by name: still not selected
    assert select_baseline(root, H200) == approved


def test_select_without_approved_lists_models(tmp_path):
    root = tmp_path / "baselines"
    write_baseline(bench_json(entries(), fingerprint=B200), approved_path(root, "nvidia-b200"))
    write_baseline(bench_json(entries()), candidate_path(root, "nvidia-h200"))  # only a candidate
    with pytest.raises(BaselineError) as ei:
        select_baseline(root, H200)
    msg = str(ei.value)
    assert "NVIDIA H200" in msg and "nvidia-h200/approved.json" in msg and "nvidia-b200" in msg
    assert available_models(root) == ["nvidia-b200"]
    with pytest.raises(BaselineError, match="none"):
        select_baseline(tmp_path / "empty", H200)


def test_candidate_path_is_unique_and_utc(tmp_path):
    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    p1 = candidate_path(tmp_path, "nvidia-h200", when)
    assert p1 == tmp_path / "nvidia-h200" / "candidates" / "20260304T050607Z.json"
    write_baseline(bench_json(entries()), p1)
    p2 = candidate_path(tmp_path, "nvidia-h200", when)
    assert p2 != p1 and p2.name == "20260304T050607Z-1.json"


def test_approve_refuses_dirty_and_unknown_candidates(tmp_path):
    root = tmp_path / "baselines"
    dirty = write_baseline(bench_json(entries(), clean=False, verdicts={"FAIL": 2, "PASS": 1}),
                           candidate_path(root, "nvidia-h200"))
    with pytest.raises(BaselineError, match="not clean.*FAIL"):
        approve(dirty, root)
    failed_verdicts = write_baseline(bench_json(entries(), clean=True, verdicts={"FAIL": 1}), tmp_path / "c2.json")
    with pytest.raises(BaselineError, match="not clean"):
        approve(failed_verdicts, root)
    unknown = write_baseline(bench_json(entries(), clean=None), tmp_path / "c3.json")
    with pytest.raises(BaselineError, match="does not record whether"):
        approve(unknown, root)
    assert not approved_path(root, "nvidia-h200").exists()
    forced = approve(dirty, root, force=True)
    assert load_baseline(forced.approved).approval["forced"] is True


def test_approve_replaces_the_approved_file_in_the_slim_format(tmp_path):
    root = tmp_path / "baselines"
    first = write_baseline(bench_json(entries(med=20e-6)), candidate_path(root, "nvidia-h200"))
    a1 = approve(first, root, now=datetime(2026, 1, 1, tzinfo=timezone.utc))
    assert a1.approved == root / "nvidia-h200" / "approved.json"
    name = "bench/test_fp4.py::test_gemm[m0]"
    assert load_baseline(a1.approved).benchmarks[name].median == pytest.approx(20e-6, rel=0.05)
    second = write_baseline(bench_json(entries(med=30e-6)), tmp_path / "elsewhere" / "run.json")
    a2 = approve(second, root, now=datetime(2026, 2, 1, tzinfo=timezone.utc))
    new = load_baseline(a2.approved)
    assert new.benchmarks[name].median == pytest.approx(30e-6, rel=0.05)
    assert new.approval == {"from": str(second), "at": "20260201T000000Z", "forced": False}
    assert json.loads(a2.approved.read_text())["format"] == "fp4bench-baseline"
    assert sorted(p.name for p in (root / "nvidia-h200").iterdir()) == ["approved.json", "candidates"]  # no history/
    with pytest.raises(BaselineError, match="already the approved"):
        approve(a2.approved, root)


def test_approve_files_by_gpu_model(tmp_path):
    root = tmp_path / "baselines"
    cand = write_baseline(bench_json(entries(), fingerprint=B200), tmp_path / "b200.json")
    assert approve(cand, root).approved == root / "nvidia-b200" / "approved.json"
    assert select_baseline(root, B200) == root / "nvidia-b200" / "approved.json"


def test_check_compatible():
    from dataclasses import replace

    newer = replace(H200, driver="590.2", cuda="13.1")
    assert check_compatible(H200, newer) == [("driver", "580.1", "590.2"), ("cuda", "13.0", "13.1")]
    assert check_compatible(H200, H200) == []
    with pytest.raises(IncompatibleBaseline) as ei:
        check_compatible(H200, B200)
    assert "NVIDIA H200" in str(ei.value) and "NVIDIA B200" in str(ei.value)
    assert "9.0" in str(ei.value) and "10.0" in str(ei.value)
    with pytest.raises(IncompatibleBaseline, match="9.1"):
        check_compatible(H200, replace(H200, compute_capability="9.1"))


def test_availability_key_rejects_separator():
    assert availability_key("a", "b", "c") == "a|b|c"
    with pytest.raises(ValueError, match="tactic"):
        availability_key("a", "b", "t|1")
    with pytest.raises(ValueError, match="backend"):
        availability_key("", "b", "c")
    assert availability_value(True) == "ok"
    assert availability_value(False, "smem") == "unsupported: smem"


def test_approve_writes_the_units_own_baseline_and_runs_on_that_unit_prefer_it(tmp_path):
    from dataclasses import replace

    from fp4bench.gate.store import unit_path

    root = tmp_path / "baselines"
    mine, other = replace(H200, gpu_uuid="GPU-5fe16972-aaaa"), replace(H200, gpu_uuid="GPU-be452afc-bbbb")
    res = approve(write_baseline(bench_json(entries(), fingerprint=mine), tmp_path / "c.json"), root)
    own = root / "nvidia-h200" / "units" / "GPU-5fe16972-aaaa.json"
    assert res.unit == own == unit_path(root, "nvidia-h200", "GPU-5fe16972-aaaa") and own.is_file()
    assert load_baseline(own).benchmarks.keys() == load_baseline(res.approved).benchmarks.keys()
    assert select_baseline(root, mine) == own
    # another unit (or an unknown one) falls back to the model-level file
    assert select_baseline(root, other) == res.approved
    assert select_baseline(root, replace(H200, gpu_uuid=None)) == res.approved
    # a run without a UUID writes no unit file
    res2 = approve(write_baseline(bench_json(entries(), fingerprint=replace(H200, gpu_uuid=None)),
                                  tmp_path / "c2.json"), root / "x")
    assert res2.unit is None


def test_a_uuid_that_is_not_one_is_never_a_file_name(tmp_path):
    from fp4bench.gate.store import unit_path

    with pytest.raises(BaselineError, match="GPU UUID"):
        unit_path(tmp_path, "nvidia-h200", "../../etc/passwd")


def _two_unit_candidate(tmp_path, name="c.json", per_unit=None):
    """A candidate of a run spread over two GPUs: each benchmark records the UUID that measured it."""
    from dataclasses import replace

    per_unit = per_unit or {"GPU-aaaa1111-0000": [0, 1], "GPU-bbbb2222-0000": [2]}
    benches = [bench_entry(f"bench/test_fp4.py::test_gemm[m{i}]", samples(RNG, 20e-6, 0.01, 8),
                           {"kernels": ["k"], "gpu_uuid": uuid})
               for uuid, idx in per_unit.items() for i in idx]
    fp = replace(H200, gpu_uuid="GPU-aaaa1111-0000")  # the run's own fingerprint names its first GPU
    return write_baseline(bench_json(benches, fingerprint=fp), tmp_path / name)


def test_approving_a_two_unit_candidate_writes_each_unit_its_own_benchmarks(tmp_path, capsys):
    from fp4bench.cli import main
    from fp4bench.gate.store import unit_path

    root = tmp_path / "baselines"
    cand = _two_unit_candidate(tmp_path)
    assert main(["baseline", "approve", str(cand), "--baselines", str(root)]) == 0
    out = capsys.readouterr().out
    a, b = (unit_path(root, "nvidia-h200", u) for u in ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000"))
    assert f"  {a} (2 benchmarks)" in out and f"  {b} (1 benchmarks)" in out
    ua, ub, model = load_baseline(a), load_baseline(b), load_baseline(root / "nvidia-h200" / "approved.json")
    assert sorted(ua.benchmarks) == ["bench/test_fp4.py::test_gemm[m0]", "bench/test_fp4.py::test_gemm[m1]"]
    assert sorted(ub.benchmarks) == ["bench/test_fp4.py::test_gemm[m2]"]
    assert (ua.fingerprint.gpu_uuid, ub.fingerprint.gpu_uuid) == ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000")
    assert len(model.benchmarks) == 3  # the model-level file: every benchmark, each with its unit
    assert model.benchmarks["bench/test_fp4.py::test_gemm[m2]"].extra_info["gpu_uuid"] == "GPU-bbbb2222-0000"
    assert ub.benchmarks["bench/test_fp4.py::test_gemm[m2]"].samples == model.benchmarks[
        "bench/test_fp4.py::test_gemm[m2]"].samples


def test_a_unit_file_is_replaced_never_merged_and_other_units_are_left_alone(tmp_path):
    from dataclasses import replace

    from fp4bench.gate.store import unit_path

    root = tmp_path / "baselines"
    approve(_two_unit_candidate(tmp_path, "c1.json"), root)
    third = unit_path(root, "nvidia-h200", "GPU-cccc3333-0000")
    approve(write_baseline(bench_json(entries(), fingerprint=replace(H200, gpu_uuid="GPU-cccc3333-0000")),
                           tmp_path / "c0.json"), root)
    before = third.read_text()
    # the next multi-GPU run put m1 on the second unit: the first unit's file loses it
    res = approve(_two_unit_candidate(tmp_path, "c2.json", {"GPU-aaaa1111-0000": [0],
                                                           "GPU-bbbb2222-0000": [1, 2]}), root)
    a, b = (unit_path(root, "nvidia-h200", u) for u in ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000"))
    assert [(p, n) for p, n in res.units] == [(a, 1), (b, 2)] and res.unit is None
    assert sorted(load_baseline(a).benchmarks) == ["bench/test_fp4.py::test_gemm[m0]"]
    assert third.read_text() == before


def test_a_partial_unit_file_does_not_shadow_the_model_baseline(tmp_path):
    """A unit file of one GPU's share gates only that share: a run on that GPU takes the model-level
    file, which holds every benchmark, instead of leaving the rest ungated."""
    from dataclasses import replace

    root = tmp_path / "baselines"
    res = approve(_two_unit_candidate(tmp_path), root)
    for uuid in ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000"):  # each unit file holds part of the benchmarks
        assert (root / "nvidia-h200" / "units" / f"{uuid}.json").is_file()
        assert select_baseline(root, replace(H200, gpu_uuid=uuid)) == res.approved
    # a one-GPU approval on that unit (every benchmark) is its own baseline again
    full = write_baseline(bench_json(entries(), fingerprint=replace(H200, gpu_uuid="GPU-bbbb2222-0000")),
                          tmp_path / "one.json")
    res = approve(full, root)
    assert select_baseline(root, replace(H200, gpu_uuid="GPU-bbbb2222-0000")) == res.unit


def test_a_benchmark_uuid_that_is_not_one_writes_nothing(tmp_path):
    root = tmp_path / "baselines"
    cand = _two_unit_candidate(tmp_path, per_unit={"GPU-aaaa1111-0000": [0], "../evil": [1]})
    with pytest.raises(BaselineError, match="GPU UUID '../evil'"):
        approve(cand, root)
    assert not (root / "nvidia-h200" / "approved.json").exists()
