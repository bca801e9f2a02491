"""``pytest bench`` on a simulated Blackwell machine (``tests/fakes/sim``), run inside the test's
own process (``fakes/sim/fp4sim_session.py``): the command, its environment and the reading of its
output, for the simulated-run tests."""

from __future__ import annotations

import os
import re
from pathlib import Path

from fakes.paths import ROOT
from fakes.sim import fp4sim_session
from fakes.wrapped import unwrapped

SIM = ROOT / "tests" / "fakes" / "sim"
QUICK = ("--fp4-models", "sim-tiny", "--fp4-time-budget", "0.02", "--fp4-min-samples", "5")
FLASHINFER = ("0.7.2.post1", "0.7.4")  # the simulated releases (tests/fakes/flashinfer_releases.py)
#: timed runs: a simulated launch of 50 ms on the simulated clock (``FP4SIM_CLOCK=sim``), which moves
#: by exactly that much per launch: the simulated device time alone is timed, whatever this machine's
#: load, and nothing is slept. Longer than the sampler's target sample (1 ms) and the time budget
#: (``QUICK``): each sample is one call and each case the fewest calls.
TIMED = {"FP4SIM_CALL_S": "0.05", "FP4SIM_CLOCK": "sim"}


def sim_path(flashinfer: str) -> str:
    """PYTHONPATH of a simulated machine with that FlashInfer release installed."""
    return os.pathsep.join([str(ROOT / "tests"), str(SIM), str(SIM / "dists" / flashinfer)])


def bench(tmp_path: Path, *args: str, gpu: str = "B200", fault: str = "", library: str = "",
          torch_seen: str = "2.9.1", flashinfer: str = FLASHINFER[0],
          env: dict[str, str] | None = None) -> fp4sim_session.Run:
    """``pytest bench -p fp4sim`` on the simulated ``gpu`` with that FlashInfer release, fault and
    library build (``FP4SIM_*``, ``fakes/sim/fp4sim_world.py``), in this process."""
    # this checkout's src first: the venv's editable install may point at another checkout
    full = dict(PYTHONPATH=os.pathsep.join([str(ROOT / "src"), sim_path(flashinfer)]), FP4SIM_GPU=gpu,
                FP4SIM_FAULT=fault, FP4SIM_LIBRARY=library, FP4SIM_TORCH=torch_seen, FP4SIM_FLASHINFER=flashinfer,
                **(env or {}))
    cmd = [str(ROOT / "bench"), "-p", "fp4sim", "-p", "no:cacheprovider", "-q", "-rA", "-W", "ignore::UserWarning",
           "--fp4-baselines", str(tmp_path / "baselines"), *QUICK, *args]
    return fp4sim_session.run(cmd, tmp_path, full)


def outcomes(res: fp4sim_session.Run) -> dict[str, tuple[str, str]]:
    """test id -> (PASSED | FAILED | SKIPPED | ERROR, the one-line message) from ``-rA``."""
    out = {}
    for line in unwrapped(res.stdout).splitlines():
        m = re.match(r"(PASSED|FAILED|ERROR) \S+::test_\w+\[(.+?)\](?: - (.*))?$", line)
        if m:
            out[m.group(2)] = (m.group(1), m.group(3) or "")
            continue
        m = re.match(r"SKIPPED \[\d+\] \S+: (.*)$", line)
        if m:
            out.setdefault("skips", ("SKIPPED", ""))
            out[f"skip:{len(out)}"] = ("SKIPPED", m.group(1))
    return out


def case_outcomes(res: fp4sim_session.Run) -> dict[str, str]:
    """test id -> PASSED | FAILED | ERROR of every case that ran."""
    return {k: s for k, (s, _) in outcomes(res).items() if s != "SKIPPED"}
