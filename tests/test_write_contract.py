"""The write contract (docs/outputs.md) end to end: protection by what a file is, ``-`` as standard
output, a failed write as exit 4 naming the file with nothing half-written, streams that are
regular files only, and the run's own records (line log, pytest-benchmark's candidate) kept clean
when a write fails. Unwritable places are made as CI (root) can: ``RLIMIT_FSIZE``, a device, a
folder where a file should be — never ``chmod``."""

from __future__ import annotations

import contextlib
import json
import os
import resource
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fakes.pytest_run import STEADY_RUN
from fp4bench import cli
from fp4bench.gate.approve import approve
from fp4bench.gate.baseline import write_baseline
from fp4bench.outputs import OutputError, check_output

pytest_plugins = ["pytester"]
NAMES = [f"b.py::t[{i}]" for i in range(3)]
UUID = "GPU-aaaa1111-0000"


def _run(tmp_path: Path, name: str, seed: int = 0, factor: float = 1.0) -> Path:
    rng = np.random.default_rng(seed)
    return write(tmp_path / name, bench_json([bench_entry(n, samples(rng, factor * 30e-6, 0.01)) for n in NAMES]))


@pytest.fixture
def root(tmp_path):
    """An approved baseline with its unit's file under ``baselines/nvidia-h200``."""
    rng = np.random.default_rng(1)
    cand = write_baseline(bench_json([bench_entry(n, samples(rng, 30e-6, 0.01, 8)) for n in NAMES],
                                     fingerprint=replace(H200, gpu_uuid=UUID)), tmp_path / "cand.json")
    r = tmp_path / "baselines"
    approve(cand, r)
    return r


def _bytes(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@contextlib.contextmanager
def file_size_limit(nbytes: int):
    """``RLIMIT_FSIZE``: a write past ``nbytes`` fails with EFBIG (Python ignores SIGXFSZ)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (min(nbytes, hard) if hard != resource.RLIM_INFINITY else nbytes, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))


# --- protection by what a file is -----------------------------------------------------------------

def test_a_units_baseline_is_written_by_approve_only(tmp_path, root, capsys, monkeypatch):
    """Before, ``units/<UUID>.json`` was not ``approved.json``: migrate --out, --force outputs and
    $GITHUB_STEP_SUMMARY replaced or appended to it."""
    unit = root / "nvidia-h200" / "units" / f"{UUID}.json"
    before = _bytes(root)
    base, new = str(_run(tmp_path, "base.json")), str(_run(tmp_path, "new.json", 1, 3.0))
    assert cli.main(["baseline", "migrate", new, "--out", str(unit), "--force"]) == 2
    assert "is a unit's baseline; only 'fp4bench baseline approve' writes one" in capsys.readouterr().err
    assert cli.main(["compare", base, new, "--verdict-json", str(unit), "--force"]) == 2
    assert "--verdict-json" in capsys.readouterr().err
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(unit))
    assert cli.main(["compare", base, new]) == 2
    assert "$GITHUB_STEP_SUMMARY" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    fresh = root / "nvidia-h200" / "units" / "GPU-bbbb2222-0000.json"
    assert cli.main(["baseline", "migrate", new, "--out", str(fresh)]) == 2  # a new file there too
    capsys.readouterr()
    assert _bytes(root) == before


def test_a_symlink_copy_or_hard_link_of_a_baseline_is_one(tmp_path, root, capsys, monkeypatch):
    approved = root / "nvidia-h200" / "approved.json"
    before = approved.read_bytes()
    link = tmp_path / "notes.md"
    os.link(approved, link)  # a hard link: appending to it wrote through to the baseline
    sym = tmp_path / "latest.json"
    sym.symlink_to(approved)
    copy = tmp_path / "copy.json"
    copy.write_bytes(before)
    base, new = str(_run(tmp_path, "base.json")), str(_run(tmp_path, "new.json", 1))
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(link))
    assert cli.main(["compare", base, new]) == 2
    assert f"$GITHUB_STEP_SUMMARY {link}: is a baseline" in capsys.readouterr().err
    monkeypatch.delenv("GITHUB_STEP_SUMMARY")
    for target, kind in ((sym, "is an approved baseline"), (copy, "is a baseline (its content is one)")):
        assert cli.main(["compare", base, new, "--markdown", str(target), "--force"]) == 2
        assert f"--markdown {target}: {kind}" in capsys.readouterr().err
    assert approved.read_bytes() == before and copy.read_bytes() == before and sym.is_symlink()


def test_migrate_never_rewrites_its_input(tmp_path, root, capsys):
    """Before, ``baseline migrate FILE`` without --out rewrote FILE in place (exit 0), although its
    help said it never writes an approved.json."""
    approved = root / "nvidia-h200" / "approved.json"
    before = approved.read_bytes()
    assert cli.main(["baseline", "migrate", str(approved)]) == 2
    assert "--out" in capsys.readouterr().err
    assert cli.main(["baseline", "migrate", str(approved), "--out", str(approved), "--force"]) == 2
    capsys.readouterr()
    assert approved.read_bytes() == before


def test_an_over_long_name_is_a_usage_error(tmp_path, capsys):
    base, new = str(_run(tmp_path, "base.json")), str(_run(tmp_path, "new.json", 1))
    long = tmp_path / ("x" * 300 + ".json")
    assert cli.main(["compare", base, new, "--verdict-json", str(long)]) == 2
    err = capsys.readouterr().err
    assert "File name too long" in err and "Traceback" not in err


# --- '-' is standard output, for every document option ---------------------------------------------

def test_dash_is_standard_output_never_a_file_named_dash(tmp_path, capsys, monkeypatch):
    """Before, ``-`` meant stdout only in compare; elsewhere it was a file named ``-``."""
    monkeypatch.chdir(tmp_path)
    new = str(_run(tmp_path, "new.json", 1))
    assert cli.main(["baseline", "migrate", new, "--out", "-"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["format"] == "fp4bench-baseline" and not (tmp_path / "-").exists()
    with pytest.raises(OutputError, match="this option writes a file, not standard output"):
        check_output("-", "--fp4-log", stdout=False)
    assert cli.main(["report", new, "--out", "-"]) == 2
    assert "names a folder, not standard output" in capsys.readouterr().err
    assert not (tmp_path / "-").exists()


# --- a failed write: exit 4, the file named, nothing half-written -----------------------------------

def test_a_failed_write_is_exit_4_naming_the_file_and_leaves_nothing(tmp_path, capsys):
    """Before: a traceback with exit 1, the code for "regression"."""
    base, new = str(_run(tmp_path, "base.json")), str(_run(tmp_path, "new.json", 1))
    out = tmp_path / "v.json"
    with file_size_limit(200):
        rc = cli.main(["compare", base, new, "--verdict-json", str(out)])
    err = capsys.readouterr().err
    assert rc == 4 and f"cannot write {out}: File too large" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json", "new.json"]


def test_a_device_or_fifo_is_refused_as_an_output(tmp_path, capsys, monkeypatch):
    """Before, a FIFO as $GITHUB_STEP_SUMMARY hung compare (an append skipped the regular-file test)."""
    base, new = str(_run(tmp_path, "base.json")), str(_run(tmp_path, "new.json", 1))
    fifo = tmp_path / "summary.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # an old-code write would not block, only land
    try:
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(fifo))
        assert cli.main(["compare", base, new]) == 2
        assert "not a regular file" in capsys.readouterr().err
        monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/dev/full")
        assert cli.main(["compare", base, new]) == 2
        assert "not a regular file" in capsys.readouterr().err
    finally:
        os.close(reader)
    assert cli.main(["compare", base, new, "--verdict-json", "/dev/full", "--force"]) == 2
    assert "not a regular file" in capsys.readouterr().err


# --- the pytest run's own records ---------------------------------------------------------------

@pytest.mark.usefixtures("isolated_registry", "sim_clock")
def test_a_candidate_pytest_benchmark_cannot_write_leaves_nothing(bench):
    """pytest-benchmark writes the candidate itself; a full disk there was a traceback and a
    truncated candidate that looked like a result."""
    bench.makeconftest(
        "import pytest_benchmark.session as s\n"
        "REAL = s.BenchmarkSession.save_json\n"
        "def full(self, output_json):\n"
        "    with open(self.json, 'wb') as fh:\n"
        "        fh.write(b'{\"machine_info\": ')\n"
        "    raise OSError(28, 'No space left on device')\n"
        "s.BenchmarkSession.save_json = full\n"
        "def pytest_unconfigure(config):  # pytester runs in this process: later runs write again\n"
        "    s.BenchmarkSession.save_json = REAL\n")
    res = bench.runpytest(*STEADY_RUN, "--fp4-save-baseline", "cand.json", "--fp4-windows", "1")
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == 3, out
    assert "--fp4-save-baseline: cannot write cand.json: No space left on device" in out
    assert "Traceback" not in out and "INTERNALERROR" not in out
    assert not list(bench.path.glob("cand.json*partial*")) and not (bench.path / "cand.json").exists()
    assert (bench.path / "cand.json.lines.jsonl").is_file()  # the measured cases are kept


@pytest.mark.usefixtures("isolated_registry", "sim_clock")
def test_a_line_log_that_stops_accepting_lines_is_one_message(bench):
    """``--fp4-log`` was opened lazily and a failed write was an INTERNALERROR mid-run."""
    bench.makeconftest(
        "import os, resource\n"
        "LIMIT = resource.getrlimit(resource.RLIMIT_FSIZE)\n"
        "CALLS = []\n"
        "def pytest_runtest_call(item):\n"
        "    CALLS.append(item)\n"
        "    if len(CALLS) == 2:  # the second case's line no longer fits\n"
        "        resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize('run.lines.jsonl'), LIMIT[1]))\n"
        "def pytest_runtest_teardown(item):\n"
        "    resource.setrlimit(resource.RLIMIT_FSIZE, LIMIT)\n")
    assert not (bench.path / "run.lines.jsonl").exists()
    with file_size_limit(resource.RLIM_INFINITY):  # restored here whatever the run does
        res = bench.runpytest(*STEADY_RUN, "--fp4-log", "run.lines.jsonl")
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == 3, out
    assert "--fp4-log: cannot write run.lines.jsonl: File too large; the line log stops here" in out
    assert "INTERNALERROR" not in out and out.count("the line log stops here") == 1
    lines = (bench.path / "run.lines.jsonl").read_text().splitlines()
    assert [json.loads(x)["type"] for x in lines] == ["header", "case"]  # whole lines only


def test_a_negative_worker_count_is_refused(bench):
    """``pytest -n -1`` ran with pytest-benchmark switched off and measured nothing, exit 0."""
    args, skip = [], False
    for i, a in enumerate(STEADY_RUN):  # pytest-xdist loaded this time
        if skip:
            skip = False
        elif a == "-p" and STEADY_RUN[i + 1].startswith("no:xdist"):
            skip = True
        else:
            args.append(a)
    res = bench.runpytest(*args, "-n", "-1")
    out = res.stdout.str() + res.stderr.str()
    assert res.ret == 4 and "-n -1: the number of workers is >= 0" in out, out
