"""``fp4bench bisect`` on the command line: usage errors before anything is built, and a whole
bisect over releases listed by an index's JSON API, with the venvs and the ab steps replaced by
the simulated releases (``fakes.bisect_releases``): the table, the culprit and its release page."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fakes.bisect_releases import PACKAGE, VERSIONS, call_s, sim_measure
from fp4bench.bisect import step, venvs
from fp4bench.bisect.search import ReleaseBroken
from fp4bench.cli.main import main

BENCH = "flashinfer-cutlass-default-glm5"
SIM_BENCH = "sim-bf16-default-glm-5-b1-tp8-uniform-shared_down-m1n6144k256"


def _index(tmp_path: Path) -> str:
    root = tmp_path / "index"
    (root / PACKAGE).mkdir(parents=True)
    files = [{"filename": "f.whl", "yanked": False}]
    (root / PACKAGE / "json").write_text(json.dumps({"releases": {v: files for v in VERSIONS}}))
    for v in VERSIONS:
        (root / PACKAGE / v).mkdir()
        (root / PACKAGE / v / "json").write_text(json.dumps(
            {"info": {"release_url": f"https://pypi.org/project/{PACKAGE}/{v}/"}}))
    return root.as_uri()


@pytest.fixture
def simulated(monkeypatch):
    """The venvs and the ab steps of the simulated releases: 0.7.2.post1 on +8 %, 0.7.1 does not install."""
    built = []

    def build(self, v):
        built.append(v)
        if v == "0.7.1":
            raise ReleaseBroken(f"{PACKAGE} {v}: pip install failed (exit 1): simulated")
        return Path(self.cache) / v

    monkeypatch.setattr(venvs.VenvBuilder, "__call__", build)
    monkeypatch.setattr(venvs.VenvBuilder, "base", lambda self: {"site": [], "python": "3"})
    monkeypatch.setattr(step, "ab_measure", lambda names, floor, ab_args, run_ab:
                        sim_measure(call_s("0.7.2.post1", 0.08), floor, benchmark=names[0]))
    return built


def test_a_bisect_names_the_culprit_with_its_release_page_and_resumes(tmp_path, simulated, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    argv = ["bisect", PACKAGE, "0.6.18.post1", "0.7.4", "--only", BENCH, "--index", _index(tmp_path), "--no-prepare"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert "culprit: flashinfer-python 0.7.2.post1 (slower than 0.7.2," in out
    assert "release page: https://pypi.org/project/flashinfer-python/0.7.2.post1/" in out
    assert "0.7.1: flashinfer-python 0.7.1: pip install failed" in out
    assert "| 0.7.4 | 0.6.18.post1 |" in out and "FAIL" in out
    state = tmp_path / ".fp4bench-bisect" / "flashinfer-python-0.6.18.post1-0.7.4.json"
    steps = json.loads(state.read_text())["steps"]
    monkeypatch.setattr(step, "ab_measure", lambda *a, **k: lambda *pair: pytest.fail(f"measured {pair} again"))
    assert main(argv) == 1  # the rerun takes every step from the state file
    assert capsys.readouterr().out.count("culprit: flashinfer-python 0.7.2.post1") == 1
    assert json.loads(state.read_text())["steps"] == steps


def test_the_failing_benchmarks_come_from_a_verdict_json(tmp_path, simulated, capsys, monkeypatch):
    import numpy as np

    from fakes.benchjson import bench_entry, bench_json, samples
    from fp4bench.gate.baseline import parse_baseline
    from fp4bench.gate.compare import compare
    from fp4bench.report.machine import verdict_json

    monkeypatch.chdir(tmp_path)
    rng = np.random.default_rng(0)
    names = [f"bench/test_fp4_gemm.py::test_dense[{BENCH}]", "bench/test_fp4_gemm.py::test_dense[same]"]
    base = parse_baseline(bench_json([bench_entry(n, samples(rng, 20e-6, 0.005)) for n in names]))
    now = {names[0]: ([samples(rng, 28e-6, 0.005) for _ in range(3)], {}),  # +40 %: FAIL
           names[1]: ([samples(rng, 20e-6, 0.005) for _ in range(3)], {})}
    (tmp_path / "gate.json").write_text(json.dumps(verdict_json(compare(base, now), baseline="approved.json")))
    args = ["bisect", PACKAGE, "0.6.18.post1", "0.7.4", "--index", _index(tmp_path), "--no-prepare"]
    assert main([*args, "--failed", str(tmp_path / "gate.json")]) == 1
    assert f"benchmarks: {BENCH}\n" in capsys.readouterr().out  # the FAIL one only, by its ab id
    (tmp_path / "v.json").write_text(json.dumps({"format": "something else"}))
    assert main([*args, "--failed", str(tmp_path / "v.json")]) == 2
    assert "--failed " in capsys.readouterr().err


@pytest.mark.parametrize("extra, what", [
    ([], "--failed VERDICT.json or --only IDS"),
    (["--only", "a", "--failed", "x.json"], "--failed VERDICT.json or --only IDS"),
    (["--only", "a", "--wheels", "/no/such/folder"], "--wheels /no/such/folder: no such folder"),
])
def test_usage_errors_before_anything_is_built(tmp_path, simulated, capsys, extra, what):
    assert main(["bisect", PACKAGE, "0.6.18.post1", "0.7.4", "--state", str(tmp_path / "s.json"), *extra]) == 2
    assert what in capsys.readouterr().err and simulated == []


def test_stack_files_as_the_ends(tmp_path, simulated, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(f"# stack\n{PACKAGE}==0.7.2\ntorch==2.13.0\n")
    bad.write_text(f"{PACKAGE}==0.7.4\ntorch==2.14.0\n")
    assert main(["bisect", PACKAGE, str(good), str(bad), "--only", BENCH, "--index", _index(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "held at GOOD's pins (the bad stack changes them too; bisect them separately): torch" in out
    assert "releases: 0.7.2, 0.7.2.post1, 0.7.4" in out and "culprit: flashinfer-python 0.7.2.post1" in out
    (tmp_path / "none.txt").write_text("torch==2.13.0\n")
    assert main(["bisect", PACKAGE, str(tmp_path / "none.txt"), str(bad), "--only", BENCH]) == 2
    assert "the stack file pins no flashinfer-python" in capsys.readouterr().err


def test_a_bisect_through_fp4bench_ab_on_simulated_workers(tmp_path, capsys, monkeypatch):
    """The real ``fp4bench ab`` (in-process workers on the simulated clock, ``fakes.inproc_worker``)
    judges every step: each venv's workers take its release's kernel time, +8 % from 0.7.2 on."""
    from fakes import inproc_worker as inproc

    times = call_s("0.7.2", 0.08)

    def build(self, v):
        (Path(self.cache) / v / "bin").mkdir(parents=True, exist_ok=True)
        python = Path(self.cache) / v / "bin" / "python"
        if not python.exists():
            python.symlink_to(sys.executable)
        return Path(self.cache) / v

    def behaviour(spec):
        v = Path(spec.python).parent.parent.name
        return inproc.Behaviour(call_s=times[v], process_sd=0.003, call_sd=0.01, version=v, check_s=0.1)

    monkeypatch.setattr(venvs.VenvBuilder, "__call__", build)
    monkeypatch.setattr(venvs.VenvBuilder, "base", lambda self: {"site": [], "python": "3"})
    monkeypatch.chdir(tmp_path)
    ab_args = (f"--plugin {inproc.PLUGIN} --backends {inproc.BACKEND} --kinds dense --batches 1 --tp 8 --device cpu "
               "--replicates 2 --rounds 4 --max-rounds 4 --round-samples 5")
    with inproc.workers(behaviour):
        code = main(["bisect", PACKAGE, "0.7.1", "0.7.4", "--only", SIM_BENCH, "--index", _index(tmp_path),
                     "--no-prepare", "--ab-args", ab_args])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert "culprit: flashinfer-python 0.7.2 (slower than 0.7.1, the release before it)" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("| 0.7.2 | 0.7.1 |"))
    assert 6.0 < float(row.split("|")[3].strip().rstrip("%")) < 10.0 and "FAIL" in row
    assert "verdict" in err and "benchmark" in err  # ab's own report, on stderr
