"""README, ``.ci/run`` and tox install the same CPU torch, the same extras, and run the same test command."""

from __future__ import annotations

import configparser
import re
from fakes.paths import ROOT

TEST_COMMAND = "pytest tests -q -p no:cacheprovider"
TORCH_REQ = "-r .ci/torch-cpu.txt"


def test_the_torch_requirement_is_the_cpu_build_from_the_cpu_index():
    lines = [ln for ln in (ROOT / ".ci" / "torch-cpu.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert lines[0] == "--extra-index-url https://download.pytorch.org/whl/cpu"
    assert len(lines) == 2 and re.fullmatch(r"torch==\d+\.\d+\.\d+\+cpu", lines[1])  # never PyPI's CUDA build


def test_readme_ci_and_tox_agree():
    run = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    env = tox["testenv"]
    # torch: the same requirement file everywhere, installed before the package
    assert f"pip install -q {TORCH_REQ}\n" in run and f"pip install {TORCH_REQ}" in readme
    assert env["deps"].strip() == TORCH_REQ and tox["testenv:report"]["deps"].strip() == TORCH_REQ
    code = "\n".join(re.findall(r"```bash\n(.*?)```", readme, re.S)) + run + (ROOT / "tox.ini").read_text()
    assert not re.search(r"torch==[\d.]+(?![\d.]*\+cpu)", code)  # no second pin, none of the CUDA build
    # extras
    assert "pip install -q -e '.[test,report]'" in run and "pip install -e '.[test,report]'" in readme
    assert [e.strip() for e in env["extras"].split(",")] == ["test", "report"]
    # the test command
    assert f"python -m {TEST_COMMAND}\n" in run and f"python -m {TEST_COMMAND}\n" in readme
    assert env["commands"].strip() == f"{TEST_COMMAND} {{posargs}}"
    bench = next(ln for ln in run.splitlines() if "pytest bench" in ln)
    assert bench.split("pytest", 1)[1] in readme
