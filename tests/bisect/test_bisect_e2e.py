"""The one real-process bisect: real venvs (pip from a local wheel folder over the shared base
environment) and a real ``fp4bench ab`` run (worker processes timing the ``ab-release`` backend,
whose call time is the installed release's, ``fakes.bisect_env``). The least that is real end to
end: two releases, the newer slower, so one ab run names the culprit; a rerun resumes from the
state without measuring; a release that does not install is ReleaseBroken with pip's reason. The
search over longer ranges is tested on the simulated clock (test_search.py). Its time is the
workers' start-up (torch imported by four processes) and three pip installs (one failing)."""

from __future__ import annotations

import os
import subprocess

import pytest

from fakes.bisect_releases import PACKAGE, wheel_folder
from fakes.paths import FAKES, ROOT
from fp4bench.bisect.search import ReleaseBroken
from fp4bench.bisect.venvs import READY, VenvBuilder
from fp4bench.cli.main import main

BENCH = "ab-release-t0-glm-5-b1-tp8-uniform-shared_down-m1n6144k256"
AB_ARGS = ("--plugin bisect_env --backends ab-release --kinds dense --batches 1 --tp 8 --device cpu "
           "--replicates 2 --rounds 2 --max-rounds 2 --round-samples 3")


@pytest.mark.e2e
def test_a_real_bisect_names_the_release_that_made_the_kernel_slower(tmp_path, monkeypatch, capsys):
    # 2 ms a call, 6 ms from 0.7.2 on, on the workers' simulated clock
    wheels = wheel_folder(tmp_path / "wheels", {"0.7.1": 0.002, "0.7.2": 0.006, "0.7.2.post1": 0.006},
                          broken=("0.7.2.post1",))
    path = [str(ROOT / "src"), str(FAKES), str(FAKES.parent), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in path if p))
    monkeypatch.setenv("FAKE_CLOCK", "sim")  # the workers' calls take their release's time exactly, whatever the load
    argv = ["bisect", PACKAGE, "0.7.1", "0.7.2", "--only", BENCH, "--wheels", str(wheels), "--no-prepare",
            "--cache", str(tmp_path / "cache"), "--ab-args", AB_ARGS]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert "culprit: flashinfer-python 0.7.2 (slower than 0.7.1, the release before it)" in out, out + err
    assert err.count("bisect: fp4bench ab ") == 1  # the ends are the final pair
    assert main(argv) == 1  # resumed: every step from the state file
    out2, err2 = capsys.readouterr()
    assert "culprit: flashinfer-python 0.7.2 " in out2 and "bisect: fp4bench ab" not in err2

    build = VenvBuilder(tmp_path / "cache" / "venvs", PACKAGE, wheels=str(wheels), prepare=False)
    venv = build("0.7.2")
    assert (venv / READY).is_file()  # the cached venv the bisect built
    torch_at = subprocess.run([str(venv / "bin" / "python"), "-c",
                               "import importlib.util as u; print(u.find_spec('torch').origin)"],
                              capture_output=True, text=True, check=True).stdout
    assert torch_at.strip() and not torch_at.startswith(str(venv))  # shared with the base, not installed
    with pytest.raises(ReleaseBroken, match=r"0\.7\.2\.post1: pip install failed .*flashinfer-missing-dependency"):
        build("0.7.2.post1")
