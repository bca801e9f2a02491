"""The GitHub workflows parse and keep their safety properties (CI also runs actionlint)."""

from __future__ import annotations

import re

import pytest
from fakes.paths import ROOT

yaml = pytest.importorskip("yaml")
WF = ROOT / ".github" / "workflows"


def _load(name: str) -> dict:
    doc = yaml.safe_load((WF / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


@pytest.mark.parametrize("name", ["ci.yml", "gpu-bench.yml", "upgrade-gate.yml"])
def test_workflow_is_valid_and_bounded(name):
    doc = _load(name)
    assert doc["permissions"] == {"contents": "read"}
    for job in doc["jobs"].values():
        assert isinstance(job["timeout-minutes"], int)
        for step in job["steps"]:
            if "uses" in step:
                action, version = step["uses"].split("@")
                assert int(re.match(r"v(\d+)", version).group(1)) >= {"actions/setup-python": 5}.get(action, 4)


def test_gpu_bench_never_runs_fork_code_and_uploads_always():
    doc = _load("gpu-bench.yml")
    assert set(doc["on"]) == {"schedule", "push", "workflow_dispatch"}
    assert doc["on"]["push"]["branches"] == ["main"] and "concurrency" in doc
    job = doc["jobs"]["gate"]
    assert job["runs-on"][:2] == ["self-hosted", "gpu"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "--benchmark-json" in runs and "fp4bench prepare" in runs and "python3 -m venv" in runs
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "report/" in upload["with"]["path"]
    restore = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache/restore"))
    assert "steps.key.outputs.key" in restore["with"]["key"]


@pytest.mark.parametrize("name,job", [("gpu-bench.yml", "gate"), ("upgrade-gate.yml", "ab")])
def test_gpu_jobs_share_one_concurrency_group_per_runner(name, job):
    doc = _load(name)
    runner = "inputs.runner || vars.FP4BENCH_RUNNER"
    assert doc["concurrency"] == {"group": "fp4bench-gpu-${{ %s }}" % runner, "cancel-in-progress": False}
    assert doc["jobs"][job]["runs-on"] == ["self-hosted", "gpu", "${{ %s }}" % runner]


@pytest.mark.parametrize("name,job", [("gpu-bench.yml", "gate"), ("upgrade-gate.yml", "ab")])
def test_jit_cache_is_saved_even_when_the_gate_fails_and_built_before_timing(name, job):
    steps = _load(name)["jobs"][job]["steps"]
    saves = [s for s in steps if s.get("uses", "").startswith("actions/cache/save")]
    assert saves and all(s["if"].startswith("always()") for s in saves)
    assert not [s for s in steps if s.get("uses", "").startswith("actions/cache@")]  # saves only on success
    runs = [s.get("run", "") for s in steps]
    first_prepare = next(i for i, r in enumerate(runs) if "fp4bench prepare" in r)
    timed = next(i for i, r in enumerate(runs) if "pytest bench" in r or "fp4bench ab" in r)
    assert first_prepare < timed and all(steps.index(s) < timed for s in saves)


@pytest.mark.parametrize("name,job", [("gpu-bench.yml", "gate"), ("upgrade-gate.yml", "ab")])
def test_gpu_venvs_come_from_the_stack_file_without_resolving(name, job):
    runs = " ".join(s.get("run", "") for s in _load(name)["jobs"][job]["steps"])
    assert "pip install -q --no-deps -r" in runs and "stack freeze --file" in runs and "--check" in runs
    assert "pip install -q -e" not in runs  # an unpinned install resolves the newest releases


def test_upgrade_gate_takes_candidate_pins_and_uploads_the_report():
    doc = _load("upgrade-gate.yml")
    assert set(doc["on"]) == {"workflow_dispatch"}
    assert {"flashinfer", "torch", "torch_cuda", "runner"} <= set(doc["on"]["workflow_dispatch"]["inputs"])
    upload = next(s for s in doc["jobs"]["ab"]["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "candidate-stack.txt" in upload["with"]["path"]


@pytest.mark.parametrize("name,notice", [("", True), ("h200-a", False)])
def test_gpu_bench_is_skipped_with_a_notice_without_a_runner(tmp_path, name, notice):
    """No runner named (a fork, a repository without a GPU runner): the gate job is skipped
    instead of queuing for a machine that never comes, and the run page says why."""
    import subprocess

    doc = _load("gpu-bench.yml")
    gate, check = doc["jobs"]["gate"], doc["jobs"]["runner"]
    assert gate["needs"] == "runner" and gate["if"] == "needs.runner.outputs.name != ''"
    assert check["runs-on"] == "ubuntu-latest" and check["outputs"]["name"] == "${{ steps.name.outputs.name }}"
    step = check["steps"][0]
    assert step["env"]["NAME"] == "${{ inputs.runner || vars.FP4BENCH_RUNNER }}"
    out = tmp_path / "github_output"
    run = subprocess.run(["bash", "-c", step["run"]], env={"NAME": name, "GITHUB_OUTPUT": str(out), "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, check=True)
    assert ("::notice::gpu-bench skipped: no GPU runner configured" in run.stdout) == notice
    assert out.read_text() == f"name={name}\n"
