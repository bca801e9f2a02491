"""The deployed stack end to end on a CPU: ``fp4bench stack freeze`` of a runner's venv, then the
pip steps of ``upgrade-gate.yml`` and ``gpu-bench.yml`` read from the YAML and run as shell.

Offline and fast: the packages are tiny fake wheels (``tests/fakes/dists.py``) in a folder pip
uses as its only index (``PIP_NO_INDEX``, ``PIP_FIND_LINKS``; this machine's pip config is
ignored); ``python3 -m venv`` is a fake that lays out a venv without ``ensurepip``; the project
installed with ``pip install -e .`` is a fake ``fp4bench`` whose ``prepare`` and ``ab`` log the
venv they ran in (its ``stack`` command is the real one). The index holds newer releases than
the stack pins (torch 2.15, flashinfer-python 0.7.0, apache-tvm-ffi 0.2.0): none may appear.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fakes.dists import make_venv, make_wheel
from fakes.paths import FAKES, ROOT
from fp4bench.cli.stack import installed, read_pins, stack_main

yaml = pytest.importorskip("yaml")
WF = ROOT / ".github" / "workflows"
DISTS = FAKES / "dists.py"

DEPLOYED = {"torch": "2.13.0+cpu", "flashinfer-python": "0.6.1", "apache-tvm-ffi": "0.1.0"}
CANDIDATE = {"CANDIDATE_TORCH": "2.14.0", "CANDIDATE_TORCH_CUDA": "cu130", "CANDIDATE_FLASHINFER": "0.6.2"}

FAKE_CLI = '''
import importlib.metadata as m, json, os, sys

def main():
    argv = sys.argv[1:]
    if argv[:1] == ["stack"]:  # the real command, run from the checkout under test
        real = os.environ["FAKE_REAL_PY"]
        os.execve(real, [real, "-m", "fp4bench", *argv], dict(os.environ, PYTHONPATH=os.environ["FAKE_REAL_SRC"]))
    rec = {"cmd": argv[0], "argv": argv, "prefix": sys.prefix, "flashinfer": m.version("flashinfer-python"),
           "torch": m.version("torch")}
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(json.dumps(rec) + "\\n")
    if argv[0] == "prepare":
        os.makedirs(os.path.join(os.environ["FLASHINFER_WORKSPACE_BASE"], ".cache", "flashinfer", rec["flashinfer"]))
        return 0
    if argv[0] == "ab":
        open(argv[argv.index("--verdict-json") + 1], "w").write("{}")
        print("fake ab verdict")
        return int(os.environ.get("FAKE_AB_RC", "0"))
    return 2
'''


def _index(folder: Path) -> None:
    for v, req in (("2.13.0+cpu", ()), ("2.14.0+cu130", ("nvidia-cublas==13.0.1",)),
                   ("2.15.0+cu130", ("nvidia-cublas>=13.0.1",))):
        make_wheel(folder, "torch", v, req)
    for v in ("13.0.1", "13.1.0"):
        make_wheel(folder, "nvidia-cublas", v)
    for v in ("0.6.1", "0.6.2", "0.7.0"):
        make_wheel(folder, "flashinfer-python", v, ("torch", "apache-tvm-ffi>=0.1"))
    for v in ("0.1.0", "0.2.0"):
        make_wheel(folder, "apache-tvm-ffi", v)


def _project(ws: Path) -> None:
    """The checkout the workflow runs in: a fake fp4bench project built by tests/fakes/dists.py."""
    shutil.copy(DISTS, ws / "fakebackend.py")
    (ws / "fakecli.py").write_text(FAKE_CLI)
    (ws / "pyproject.toml").write_text('[build-system]\nrequires = []\nbuild-backend = "fakebackend"\n'
                                       'backend-path = ["."]\n')


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stack")
    wheels, ws, bin_ = tmp / "wheels", tmp / "ws", tmp / "bin"
    ws.mkdir(), bin_.mkdir()
    _index(wheels)
    _project(ws)
    (bin_ / "python3").write_text(f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = venv ]; then exec "{sys.executable}" '
                                  f'"{DISTS}" venv "$3"; fi\nexec "{sys.executable}" "$@"\n')
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 10.0\n")
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "GITHUB_", "VIRTUAL_ENV"))}
    env.update(PATH=f"{bin_}{os.pathsep}{env['PATH']}", PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1",
               PIP_FIND_LINKS=str(wheels), PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1",
               FAKE_NAME="fp4bench", FAKE_VERSION="0.1.0", FAKE_MODULE="fakecli.py",
               FAKE_SCRIPTS="fp4bench=fakecli:main", FAKE_REAL_PY=sys.executable, FAKE_REAL_SRC=str(ROOT / "src"),
               FAKE_LOG=str(tmp / "calls.jsonl"), RUNNER="r1", RUNNER_OS="Linux", EXTRA_ARGS="",
               FLASHINFER_WORKSPACE_BASE=str(ws / ".fi-cache"), **CANDIDATE)
    # the runner's deployed venv, frozen with the real command into the checkout's stack/r1.txt
    deployed = make_venv(tmp / "deployed")
    subprocess.run([str(deployed / "bin" / "pip"), "install", "-q", *(f"{k}=={v}" for k, v in DEPLOYED.items())],
                   env=env, check=True, cwd=tmp)
    assert stack_main(["freeze", "--runner", "r1", "--python", str(deployed), "--stack-dir", str(ws / "stack")]) == 0
    return {"ws": ws, "env": env, "log": tmp / "calls.jsonl"}


def _steps(workflow: str, job: str) -> tuple[dict, list[dict]]:
    doc = yaml.safe_load((WF / workflow).read_text())
    j = doc["jobs"][job]
    return j.get("env", {}), j["steps"]


def _run_steps(world, workflow: str, job: str, names: tuple[str, ...] | None = None, **extra) -> list[dict]:
    """Run a job's ``run`` steps (or those whose name starts with one of ``names``) as GitHub would
    on Linux (``bash -e``; ``shell: bash`` adds ``-o pipefail``), with $GITHUB_OUTPUT and
    $GITHUB_PATH honoured. Every variable of the job's ``env`` must come from the test."""
    job_env, steps = _steps(workflow, job)
    env = dict(world["env"], **extra)
    assert set(job_env) <= set(env), f"{workflow}: the test does not set {set(job_env) - set(env)}"
    results = []
    for i, step in enumerate(steps):
        if "run" not in step or (names and not step.get("name", "").startswith(names)):
            continue
        assert "${{" not in step["run"], f"{workflow}: step {step.get('name')!r} uses an expression in its script"
        out, path = world["ws"] / f".out{i}", world["ws"] / ".path"
        out.write_text(""), path.touch()
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c"] if step.get("shell") == "bash" \
            else ["bash", "-e", "-c"]
        res = subprocess.run([*shell, step["run"]], cwd=world["ws"], env=dict(env, GITHUB_OUTPUT=str(out),
                             GITHUB_PATH=str(path)), capture_output=True, text=True, timeout=120)
        results.append({"name": step.get("name"), "rc": res.returncode, "out": res.stdout + res.stderr})
        if res.returncode != 0:
            break
    return results


def _versions(venv: Path) -> dict[str, str]:
    return {n: v for n, v in installed(str(venv / "bin" / "python"))[1].items() if n not in ("pip", "fp4bench")}


def _calls(world) -> list[dict]:
    return [json.loads(line) for line in world["log"].read_text().splitlines()] if world["log"].exists() else []


@pytest.fixture(scope="module")
def gate(world):
    return _run_steps(world, "upgrade-gate.yml", "ab")


def test_stack_file_pins_the_deployed_venv_with_torchs_index(world):
    text = (world["ws"] / "stack" / "r1.txt").read_text()
    assert read_pins(world["ws"] / "stack" / "r1.txt") == DEPLOYED
    assert "--extra-index-url https://download.pytorch.org/whl/cpu\n" in text
    assert "# torch 2.13.0+cpu: variant cpu" in text and "# flashinfer-python 0.6.1" in text


def test_upgrade_gate_builds_a_from_the_stack_and_b_from_the_stack_plus_the_candidate(world, gate):
    assert [r["rc"] for r in gate] == [0] * len(gate), gate[-1]["out"]
    ws = world["ws"]
    assert _versions(ws / ".venv-current") == DEPLOYED  # A = the deployed stack, nothing newer
    assert _versions(ws / ".venv-candidate") == {"torch": "2.14.0+cu130", "flashinfer-python": "0.6.2",
                                                 "apache-tvm-ffi": "0.1.0", "nvidia-cublas": "13.0.1"}
    # the stack file B would become, with the candidate torch's index
    cand = ws / "candidate-stack.txt"
    assert read_pins(cand) == _versions(ws / ".venv-candidate")
    assert "--extra-index-url https://download.pytorch.org/whl/cu130" in cand.read_text()


def test_upgrade_gate_prepares_both_sides_before_ab_and_prints_how_to_adopt(world, gate):
    calls, ws = _calls(world), world["ws"]
    assert [(c["cmd"], Path(c["prefix"]).name, c["flashinfer"]) for c in calls] == [
        ("prepare", ".venv-current", "0.6.1"), ("prepare", ".venv-candidate", "0.6.2"), ("ab", ".venv-current", "0.6.1")]
    assert calls[-1]["argv"][:5] == ["ab", "--a", ".venv-current", "--b", ".venv-candidate"]
    assert sorted(p.name for p in (ws / ".fi-cache" / ".cache" / "flashinfer").iterdir()) == ["0.6.1", "0.6.2"]
    adopt = gate[-1]["out"]
    assert "1. update the stack file: copy candidate-stack.txt" in adopt and "stack/r1.txt" in adopt
    assert "2. re-approve the baseline" in adopt and "fp4bench baseline approve" in adopt


def test_a_rejected_upgrade_fails_the_step_and_prints_no_adoption(world, gate):
    res = _run_steps(world, "upgrade-gate.yml", "ab", ("fp4bench ab",), FAKE_AB_RC="1")
    assert [r["rc"] for r in res] == [1] and "fake ab verdict" in res[0]["out"]
    assert "upgrade accepted" not in res[0]["out"]


def test_nightly_installs_exactly_the_stack_file(world, gate):
    res = _run_steps(world, "gpu-bench.yml", "gate", ("venv of the runner's deployed stack",))
    assert len(res) == 1 and res[0]["rc"] == 0, res[0]["out"]
    assert _versions(world["ws"] / ".venv") == DEPLOYED
    assert "matches" in res[0]["out"]  # the step's own `fp4bench stack freeze --check`


def test_nightly_without_a_stack_file_stops_with_the_way_to_write_it(world, gate):
    res = _run_steps(world, "gpu-bench.yml", "gate", ("venv of the runner's deployed stack",), RUNNER="nobody")
    assert res[0]["rc"] == 2 and "no stack/nobody.txt: freeze the runner's venv with fp4bench stack freeze" in res[0]["out"]


def test_stack_check_lists_what_differs(world, gate, capsys):
    ws = world["ws"]
    assert stack_main(["freeze", "--file", str(ws / "stack" / "r1.txt"), "--python", str(ws / ".venv-candidate"),
                       "--check"]) == 1
    out = capsys.readouterr().out
    assert "torch: stack file 2.13.0+cpu, venv 2.14.0+cu130" in out and "nvidia-cublas: venv 13.0.1, not in" in out
    assert stack_main(["freeze", "--file", str(ws / "nope.txt"), "--check"]) == 2
    assert "nope.txt: no such stack file" in capsys.readouterr().err
