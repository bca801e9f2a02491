"""``fp4bench history`` on a git repository of approvals, and ``baseline approve``'s drift options."""

from __future__ import annotations

from fakes.approvals import approve_and_commit, candidate, git_repo
from fp4bench.cli.main import main


def test_history_prints_each_approval_and_median_and_plots(tmp_path, capsys):
    repo = git_repo(tmp_path)
    for k in range(3):
        approve_and_commit(repo, k, flashinfer="0.7.2.post1" if k < 2 else "0.7.4")
    dest = repo / "baselines" / "nvidia-h200" / "approved.json"
    png = tmp_path / "history.png"
    assert main(["history", str(dest), "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    assert f"{dest}: 3 approvals" in out
    assert "#3 " in out and "stack: flashinfer 0.7.2.post1→0.7.4" in out
    assert "benchmarks: bench/test_fp4.py::..." in out  # the shared prefix, once
    row = next(ln for ln in out.splitlines() if ln.startswith("test_gemm[m1] "))
    assert row.split()[1:7] == ["20", "µs", "20.3", "µs", "20.6", "µs"] and row.split()[-1] == "+3.0%"  # 1.015^2
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["history", str(dest), "--plot", str(png)]) == 2  # exists: --force
    assert "already exists" in capsys.readouterr().err


def test_history_of_a_file_outside_git_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "approved.json").write_text("{}")
    assert main(["history", str(tmp_path / "approved.json")]) == 2
    assert "fp4bench history: error: git rev-parse" in capsys.readouterr().err


def test_approve_refuses_drift_and_accept_drift_records_it(tmp_path, capsys):
    repo = git_repo(tmp_path)
    for k in range(4):
        approve_and_commit(repo, k)
    root = str(repo / "baselines")
    run = str(candidate(repo, 4))
    assert main(["baseline", "approve", run, "--baselines", root]) == 2
    err = capsys.readouterr().err
    assert "drifted beyond the 5% floor since the anchor" in err and "--accept-drift" in err
    assert main(["baseline", "approve", run, "--baselines", root, "--floor", "7"]) == 0  # +6.1 % is within 7 %
    capsys.readouterr()
    repo_run = str(candidate(repo, 5))
    assert main(["baseline", "approve", repo_run, "--baselines", root, "--accept-drift"]) == 0
    assert "drift accepted and recorded in its approval record" in capsys.readouterr().out
