"""The output-path policy (``fp4bench.outputs``) and every writer that uses it: a refused path is a
one-line usage error naming the option and the path before anything runs (CLI exit 2, pytest exit
4), an input of the run is never written, an existing file only with --force / --fp4-force, writes
are atomic through a visible temp name, and a write that fails at the end loses no measured case."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

import fp4bench.run.case  # noqa: F401  (imported once here, not by each inline pytest run)
import fp4bench.gate.compare  # noqa: F401
import fp4bench.report.tables  # noqa: F401
import fp4bench.run.sweep  # noqa: F401
from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fp4bench import cli
from fp4bench.cli import ab as cli_ab
from fp4bench.cli import compare as cli_compare
from fp4bench.cli import report as cli_report
from fp4bench.gate.baseline import BaselineError
from fp4bench.run.linelog import LineLog, read_line_log
from fp4bench.outputs import OutputError, check_output, temp_path, write_atomic
from fakes.paths import BENCH_FILE as BENCH
from fakes.pytest_run import STEADY_RUN as RUN

pytest_plugins = ["pytester"]
BENCH_FILE = BENCH.read_text()


# --- the policy --------------------------------------------------------------------------------

def test_check_output_refuses_each_bad_path_naming_option_and_path(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    cases = [("", "--x: an empty path"),
             (str(tmp_path), f"--x {tmp_path}: is a folder"),
             (str(tmp_path / "nodir" / "v.json"), f"the folder {tmp_path / 'nodir'} does not exist"),
             (str(tmp_path / "old.json"), "already exists; choose a new name or pass --force"),
             (str(tmp_path / "approved.json"), "only 'fp4bench baseline approve' writes one")]
    for path, message in cases:
        with pytest.raises(OutputError) as e:
            check_output(path, "--x")
        assert message in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(OutputError, match="is an input of this run"):  # even forced
        check_output(tmp_path / "old.json", "--x", inputs=[str(tmp_path / "old.json")], force=True)
    with pytest.raises(OutputError, match="pass --fp4-force"):
        check_output(tmp_path / "old.json", "--fp4-csv")
    assert check_output(tmp_path / "old.json", "--x", force=True) == tmp_path / "old.json"
    assert check_output(tmp_path / "old.json", "$GITHUB_STEP_SUMMARY", append=True) == tmp_path / "old.json"
    assert check_output(tmp_path / "new.json", "--x") == tmp_path / "new.json"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into any folder")
def test_check_output_refuses_an_unwritable_folder(tmp_path):
    ro = tmp_path / "ro"
    ro.mkdir(mode=0o555)
    with pytest.raises(OutputError, match="is not writable"):
        check_output(ro / "v.json", "--x")


def test_write_atomic_goes_through_a_visible_temp_file_and_leaves_none_on_failure(tmp_path, monkeypatch):
    p = tmp_path / "v.json"
    assert temp_path(p).name == f"v.json.partial-{os.getpid()}"  # not hidden: a user sees a left-over
    p.write_text("old")
    seen = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda a, b: (seen.append(sorted(x.name for x in tmp_path.iterdir())),
                                                     real_replace(a, b)))
    write_atomic(p, "new")
    assert p.read_text() == "new" and seen == [sorted(["v.json", temp_path(p).name])]
    monkeypatch.setattr(os, "replace", lambda a, b: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError):
        write_atomic(p, "newer")
    assert p.read_text() == "new" and sorted(x.name for x in tmp_path.iterdir()) == ["v.json"]


# --- the command line: refused before anything is read or run (exit 2) --------------------------

def _pair(tmp_path) -> tuple[str, str]:
    rng = np.random.default_rng(0)
    names = [f"b.py::t[{i}]" for i in range(3)]
    base = write(tmp_path / "base.json", bench_json([bench_entry(n, samples(rng, 30e-6, 0.01)) for n in names]))
    new = write(tmp_path / "new.json", bench_json([bench_entry(n, samples(rng, 30e-6, 0.01)) for n in names]))
    return str(base), str(new)


@pytest.mark.parametrize("option", ["--verdict-json", "--markdown"])
def test_compare_never_writes_over_the_files_it_compares(tmp_path, capsys, option):
    base, new = _pair(tmp_path)
    before = {p: Path(p).read_bytes() for p in (base, new)}
    for target in (base, new):
        assert cli_compare.compare_main([base, new, option, target, "--force"]) == 2
        err = capsys.readouterr().err
        assert f"{option} {target}: is an input of this run" in err and "Traceback" not in err
    assert {p: Path(p).read_bytes() for p in (base, new)} == before


def test_compare_checks_its_outputs_first_and_overwrites_only_with_force(tmp_path, capsys, monkeypatch):
    base, new = _pair(tmp_path)
    nodir = tmp_path / "nodir" / "v.json"
    assert cli_compare.compare_main([base, new, "--verdict-json", str(nodir)]) == 2
    assert f"--verdict-json {nodir}: the folder {nodir.parent} does not exist" in capsys.readouterr().err
    out = tmp_path / "v.json"
    out.write_text("keep")
    assert cli_compare.compare_main([base, new, "--verdict-json", str(out)]) == 2
    assert "already exists; choose a new name or pass --force" in capsys.readouterr().err
    assert out.read_text() == "keep"
    assert cli_compare.compare_main([base, new, "--verdict-json", str(out), "--force"]) == 0
    assert json.loads(out.read_text())["exit_code"] == 0
    assert cli_compare.compare_main([base, new, "--verdict-json", str(tmp_path / "a.md"), "--markdown",
                                     str(tmp_path / "a.md")]) == 2
    assert "also the file of --verdict-json" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "gone" / "summary.md"))
    assert cli_compare.compare_main([base, new]) == 2
    assert "$GITHUB_STEP_SUMMARY" in capsys.readouterr().err
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")  # appended to by design, not refused
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    assert cli_compare.compare_main([base, new]) == 0
    assert summary.read_text().startswith("earlier step\n") and "PASS" in summary.read_text()


def test_ab_refuses_its_json_path_before_any_worker_starts(tmp_path, capsys):
    from fp4bench.run.worker.pool import spawning

    target = tmp_path / "nodir" / "ab.json"
    with spawning(lambda spec, label: pytest.fail("a worker was made")):
        assert cli_ab.ab_main(["--a", sys.executable, "--b", sys.executable, "--verdict-json", str(target)]) == 2
    assert f"--verdict-json {target}: the folder {target.parent} does not exist" in capsys.readouterr().err
    (tmp_path / "ab.json").write_text("earlier")
    assert cli_ab.ab_main(["--a", sys.executable, "--b", sys.executable, "--verdict-json", str(tmp_path / "ab.json")]) == 2
    assert "pass --force" in capsys.readouterr().err


def test_report_out_is_checked_before_reading(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    base, _ = _pair(tmp_path)
    assert cli_report.report_main([base, "--out", base]) == 2
    assert f"--out {base}: is a file, not a folder" in capsys.readouterr().err
    assert cli_report.report_main([base, "--out", str(tmp_path / "a" / "b")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "report.md").write_text("earlier report")
    assert cli_report.report_main([base, "--out", str(tmp_path / "rep")]) == 2
    assert "report.md: already exists" in capsys.readouterr().err
    assert (tmp_path / "rep" / "report.md").read_text() == "earlier report"


def test_migrate_out_is_no_way_around_approve_and_approve_needs_a_baselines_folder(tmp_path, capsys):
    base, new = _pair(tmp_path)
    approved = tmp_path / "baselines" / "nvidia-h200" / "approved.json"
    approved.parent.mkdir(parents=True)
    assert cli.main(["baseline", "migrate", new, "--out", str(approved), "--force"]) == 2
    err = capsys.readouterr().err
    assert "is an approved baseline; only 'fp4bench baseline approve' writes one" in err and not approved.exists()
    assert cli.main(["baseline", "migrate", new, "--out", base]) == 2
    assert "already exists" in capsys.readouterr().err
    assert cli.main(["baseline", "migrate", new, "--out", new, "--force"]) == 2  # --out FILE itself: an input
    assert "is an input of this run" in capsys.readouterr().err
    assert cli.main(["baseline", "migrate", new, "--out", str(tmp_path / "slim.json")]) == 0
    assert cli.main(["baseline", "approve", new, "--baselines", ""]) == 2
    assert "--baselines: an empty path" in capsys.readouterr().err
    assert not list(Path.cwd().glob("nvidia-h200"))


# --- the line log holds one run -------------------------------------------------------------------

def test_a_line_log_with_two_runs_is_refused_naming_both(tmp_path):
    import dataclasses

    path = tmp_path / "run.lines.jsonl"
    log = LineLog(path)
    log.header(H200, {}, ["a::t[1]"])
    log.case("a::t[1]", "passed", [1e-5, 1.1e-5, 0.9e-5])
    log.close()
    b200 = dataclasses.replace(H200, gpu_name="NVIDIA B200")
    with open(path, "a") as f:  # what an older version did when a second run reused the path
        f.write(json.dumps({"type": "header", "kind": "fp4bench-line-log", "fingerprint": b200.to_dict(),
                            "sweep": {}, "planned": ["a::t[1]"], "started": "2026-12-03T10:00:00+00:00"}) + "\n")
    with pytest.raises(BaselineError) as e:
        read_line_log(path)
    msg = str(e.value)
    assert f"line log {path} holds 2 runs" in msg
    assert "run 1: NVIDIA H200 started 20" in msg and "run 2: NVIDIA B200 started 2026-12-03T10:00:00+00:00" in msg
    with pytest.raises(OutputError, match="already exists"):
        LineLog(path)  # a new run never appends
    log = LineLog(path, overwrite=True)
    log.header(H200, {}, [])
    log.close()
    assert read_line_log(path).planned == []


# --- the pytest plugin: refused before any case runs (exit 4) -------------------------------------

@pytest.fixture
def bench(isolated_registry, sim_clock, pytester):
    """The benchmark file in a pytester folder; its runs (``RUN``) time the steady backend of
    tests/fakes/pytest_run.py on the simulated clock."""
    pytester.makepyfile(test_fp4_gemm=BENCH_FILE)
    return pytester


def _base(bench) -> Path:
    res = bench.runpytest(*RUN, "--fp4-save-baseline", "base.json", "--fp4-windows", "1")
    assert res.ret == 0, res.stdout.str()
    return bench.path / "base.json"


def test_pytest_output_paths_are_refused_before_any_case_runs(bench, monkeypatch):
    base = _base(bench)
    before = base.read_bytes()
    (bench.path / "old.lines.jsonl").write_text("earlier run\n")
    (bench.path / "baselines" / "cpu").mkdir(parents=True)
    refused = [(["--fp4-verdict-json", "base.json"], "--fp4-verdict-json base.json: is an input of this run"),
               (["--fp4-csv", "base.json", "--fp4-force"], "--fp4-csv base.json: is an input of this run"),
               (["--fp4-csv", "nodir/r.csv"], "--fp4-csv nodir/r.csv: the folder nodir does not exist"),
               (["--fp4-log", "."], "--fp4-log .: is a folder"),
               (["--fp4-log", "old.lines.jsonl"], "already exists; choose a new name or pass --fp4-force"),
               (["--benchmark-json", "base.json"], "--benchmark-json base.json: is an input of this run"),
               (["--benchmark-json", "baselines/cpu/approved.json"], "only 'fp4bench baseline approve' writes"),
               (["--fp4-verdict-json", "v.json", "--fp4-csv", "v.json"], "--fp4-csv v.json: also the file of")]
    for extra, message in refused:
        res = bench.runpytest(*RUN, "--fp4-baseline-file", "base.json", *extra)
        out = res.stdout.str() + res.stderr.str()
        assert res.ret == 4, (extra, out)
        assert message in out and "Traceback" not in out and "INTERNALERROR" not in out, (extra, out)
        assert "passed" not in out and "failed" not in out, extra  # no case ran
    assert base.read_bytes() == before and not (bench.path / "baselines" / "cpu" / "approved.json").exists()
    assert (bench.path / "old.lines.jsonl").read_text() == "earlier run\n"
    # a refused --fp4-save-baseline run leaves no empty candidate behind
    res = bench.runpytest(*RUN, "--fp4-save-baseline", "cand.json", "--fp4-csv", "nodir/r.csv")
    assert res.ret == 4 and not (bench.path / "cand.json").exists()
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(bench.path / "gone" / "summary.md"))
    res = bench.runpytest(*RUN, "--fp4-baseline-file", "base.json")
    assert res.ret == 4 and "$GITHUB_STEP_SUMMARY" in res.stdout.str() + res.stderr.str()


def test_fp4_force_truncates_the_line_log_to_this_run(bench):
    (bench.path / "run.lines.jsonl").write_text('{"type":"header","kind":"fp4bench-line-log"}\n')
    res = bench.runpytest(*RUN, "--fp4-log", "run.lines.jsonl", "--fp4-force")
    assert res.ret == 0, res.stdout.str()
    logged = read_line_log(bench.path / "run.lines.jsonl")  # one header: no "holds 2 runs"
    assert logged.complete and len(logged.run.benchmarks) == 2


def test_a_failed_final_write_keeps_every_finished_case_in_the_line_log(bench):
    """The verdict JSON's folder vanishes during the run: one line naming the option, a run that
    cannot pass (exit 3, incomplete), and both measured cases still in the line log."""
    base = _base(bench)
    (bench.path / "out").mkdir()
    bench.makeconftest("import shutil\n\ndef pytest_sessionfinish(session):\n    shutil.rmtree('out')\n")
    res = bench.runpytest(*RUN, "--fp4-baseline-file", str(base), "--fp4-verdict-json", "out/v.json",
                          "--fp4-log", "run.lines.jsonl")
    out = res.stdout.str()
    assert "fp4bench: --fp4-verdict-json: cannot write out/v.json: No such file or directory" in out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert "summary: 2 PASS → no regression" in out and res.ret == 3  # the run passed; its record is not complete
    logged = read_line_log(bench.path / "run.lines.jsonl")
    assert logged.complete and len(logged.run.benchmarks) == 2
    assert all(len(r.samples) >= 3 for r in logged.run.benchmarks.values())
