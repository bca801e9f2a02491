"""SIGTERM stops a run as Ctrl-C does (``plugin.signals``): in a real process, sent while the second
case runs, the run ends as interrupted (exit 2), the line log keeps the first case and its ``end``
line says ``interrupted``, and the candidate is recorded as not clean. One real process: it is in
the e2e set (``-m e2e``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.paths import ROOT
from fakes.pytest_run import BENCH_FILE, TINY

#: the second case waits until it is signalled; the first one is on the line log by then
CONFTEST = """
import os, time
CALLS = []
def pytest_runtest_call(item):
    CALLS.append(item)
    if len(CALLS) == 2:
        open("second-case-started", "w").close()
        for _ in range(600):  # a bound, not a timing: the SIGTERM ends it
            time.sleep(0.1)
"""


@pytest.mark.e2e
def test_sigterm_ends_the_run_as_interrupted_and_keeps_its_records(tmp_path):
    (tmp_path / "test_fp4_gemm.py").write_text(BENCH_FILE)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *TINY, "--fp4-plugin", "fakes.pytest_run",
                             "--fp4-backends", "steady-spin", "--fp4-save-baseline", "cand.json"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        marker = tmp_path / "second-case-started"
        while not marker.exists() and proc.poll() is None:
            try:
                proc.wait(0.05)
            except subprocess.TimeoutExpired:
                pass
        assert proc.poll() is None, proc.stdout.read()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 2, out
    assert "SIGTERM: the run was stopped" in out and "Traceback" not in out
    lines = [json.loads(x) for x in (tmp_path / "cand.json.lines.jsonl").read_text().splitlines()]
    assert [x["type"] for x in lines] == ["header", "case", "end"]
    assert lines[-1]["interrupted"] is True
    cand = tmp_path / "cand.json"
    assert not cand.exists() or json.loads(cand.read_text())["fp4bench"]["clean"] is False
    assert not list(Path(tmp_path).glob("*.partial-*"))
