"""A git repository of approved baselines for the drift and history tests: approval #k+1 is a run
whose every benchmark is (1 + ``STEP``)^k times the first one's, approved and committed."""

from __future__ import annotations

import dataclasses
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from fakes.benchjson import H200, bench_entry, bench_json, write
from fp4bench.gate.approve import approve
from fp4bench.gate.drift import DriftSettings

NAMES = ("bench/test_fp4.py::test_gemm[m1]", "bench/test_fp4.py::test_gemm[m64]")
STEP = 0.015
FLOOR = DriftSettings(floor=0.05)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def git_repo(where: Path) -> Path:
    """An empty git repository at ``where`` with a committer set."""
    git(where, "init", "-q")
    git(where, "config", "user.email", "t@example.com")
    git(where, "config", "user.name", "t")
    git(where, "config", "commit.gpgsign", "false")
    return where


def candidate(repo: Path, k: int, flashinfer: str = "0.7.2.post1") -> Path:
    """Approval #k+1's run: every benchmark (1 + STEP)^k times the first one's time, with noise of
    0.1 % (seeded) around it, far below the 1.5 % steps."""
    rng = np.random.default_rng(k)
    fp = dataclasses.replace(H200, flashinfer=flashinfer)
    entries = [bench_entry(n, (base * (1 + STEP) ** k * np.exp(rng.normal(0, 0.001, 20))).tolist())
               for n, base in zip(NAMES, (20e-6, 80e-6))]
    return write(repo / "runs" / f"run{k}.json", bench_json(entries, fp))


def approve_and_commit(repo: Path, k: int, drift: DriftSettings = FLOOR, **kw):
    res = approve(candidate(repo, k, **kw), repo / "baselines", drift=drift,
                  now=datetime(2026, 1, 1 + k, tzinfo=timezone.utc))
    git(repo, "add", "baselines")
    git(repo, "commit", "-qm", f"approval {k + 1}")
    return res
