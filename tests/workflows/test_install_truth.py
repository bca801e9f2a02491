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
    assert "install .ci-venv .ci/torch-cpu.txt\n" in run and 'pip install -q -r "$2"\n' in run
    assert f"pip install {TORCH_REQ}" in readme
    assert env["deps"].strip() == TORCH_REQ and tox["testenv:report"]["deps"].strip() == TORCH_REQ
    code = "\n".join(re.findall(r"```bash\n(.*?)```", readme, re.S)) + run + (ROOT / "tox.ini").read_text()
    assert not re.search(r"torch==[\d.]+(?![\d.]*\+cpu)", code)  # no second pin, none of the CUDA build
    # extras
    # (CI adds the lint extra: its ruff phase, before the tests)
    assert "pip install -q -e '.[test,report,lint]'" in run and "pip install -e '.[test,report]'" in readme
    assert "bin/ruff check src tests bench conftest.py\n" in run
    assert [e.strip() for e in env["extras"].split(",")] == ["test", "report"]
    # the test command
    assert f".ci-venv/bin/python -m {TEST_COMMAND}\n" in run and f"python -m {TEST_COMMAND}\n" in readme
    assert env["commands"].strip() == f"{TEST_COMMAND} {{posargs}}"
    bench = next(ln for ln in run.splitlines() if "pytest bench" in ln)
    assert bench.split("pytest", 1)[1] in readme


def test_ci_runs_the_suite_once_the_torch_api_tests_under_the_newest_torch_and_the_fast_set_elsewhere():
    """One full run of the suite per push (pinned torch, one Python); the newest torch runs only
    the tests of torch's own API; the other Pythons run the suite without the end-to-end tests."""
    import yaml

    run = (ROOT / ".ci" / "run").read_text()
    assert run.count("-m pytest tests ") == 3
    assert ".ci-venv-newest/bin/python -m pytest tests -q -p no:cacheprovider -m torch_api\n" in run
    assert f'.ci-venv/bin/python -m {TEST_COMMAND} -m "not e2e"\n' in run
    jobs = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]
    matrix = jobs["tests"]["strategy"]["matrix"]
    full = [m for m in matrix["include"] if m["suite"] == "full"]
    assert len(full) == 1 and {m["suite"] for m in matrix["include"]} == {"full", "fast"}
    assert len({m["python"] for m in matrix["include"]}) == len(matrix["include"]) >= 3
    (step,) = [s for s in jobs["tests"]["steps"] if s.get("run") == "bash .ci/run"]
    assert step["env"] == {"FP4BENCH_CI_SUITE": "${{ matrix.suite }}"}
    markers = (ROOT / "pyproject.toml").read_text()
    assert '"e2e: ' in markers and '"torch_api: ' in markers
