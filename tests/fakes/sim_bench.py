"""``pytest bench`` in a child process on a simulated Blackwell machine (``tests/fakes/sim``): the
command, its environment and the reading of its output, for the simulated-run tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from fakes.paths import ROOT
from fakes.wrapped import unwrapped

SIM = ROOT / "tests" / "fakes" / "sim"
QUICK = ("--fp4-models", "sim-tiny", "--fp4-time-budget", "0.02", "--fp4-min-samples", "5")


def sim_path(flashinfer: str) -> str:
    """PYTHONPATH of a simulated machine with that FlashInfer release installed."""
    return os.pathsep.join([str(ROOT / "tests"), str(SIM), str(SIM / "dists" / flashinfer)])


def run_bench(cwd: Path, *args: str, gpu: str, flashinfer: str = "0.7.2.post1", fault: str = "",
              env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``pytest bench -p fp4sim`` on the simulated ``gpu`` with that release and fault (``FP4SIM_*``)."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_XDIST_", "FP4SIM_"))}
    full.update(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), sim_path(flashinfer)]), FP4SIM_GPU=gpu,
                FP4SIM_FAULT=fault, FP4SIM_TORCH="2.9.1", FP4SIM_FLASHINFER=flashinfer, **(env or {}))
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "bench"), "-p", "fp4sim", "-p", "no:cacheprovider", "-q", "-rA",
           "-W", "ignore::UserWarning", "--fp4-baselines", str(cwd / "baselines"), *QUICK, *args]
    return subprocess.run(cmd, cwd=cwd, env=full, capture_output=True, text=True, timeout=300)


def case_outcomes(res: subprocess.CompletedProcess) -> dict[str, str]:
    """test id -> PASSED | FAILED | ERROR, from ``-rA``."""
    return dict((m.group(2), m.group(1)) for m in re.finditer(r"^(PASSED|FAILED|ERROR) \S+::test_\w+\[(.+?)\]",
                                                              unwrapped(res.stdout), re.M))
