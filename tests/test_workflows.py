"""The GitHub workflows parse and keep their safety properties (CI also runs actionlint)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")
WF = Path(__file__).resolve().parents[1] / ".github" / "workflows"


def _load(name: str) -> dict:
    doc = yaml.safe_load((WF / name).read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


@pytest.mark.parametrize("name", ["ci.yml", "gpu-bench.yml"])
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
    assert job["runs-on"] == ["self-hosted", "gpu"]
    runs = " ".join(s.get("run", "") for s in job["steps"])
    assert "--benchmark-json" in runs and "fp4bench prepare" in runs and "python3 -m venv" in runs
    upload = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "report/" in upload["with"]["path"]
    cache = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/cache"))
    assert "steps.key.outputs.key" in cache["with"]["key"]
