"""``fp4bench`` env / workload / baseline approve and the dispatcher, run in-process."""

from __future__ import annotations

import json
import re

import pytest

from fakes.benchjson import H200, bench_entry, bench_json, write
from fp4bench.backends import registry
from fp4bench.backends.registry import all_backends
from fp4bench.cli import main


def test_env_lists_every_backend_with_a_reason(capsys):
    assert main(["env", "--device", "cpu"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+gpu_slug\s+cpu$", out, re.M)
    lines = out.split("backends:")[1].strip().splitlines()
    names = [b.name for b in all_backends()]
    assert len(lines) == len(names) >= 6
    for name, line in zip(names, lines):
        m = re.match(rf"^{re.escape(name)}\s+(available|skipped|error)\s+\[[a-z,]+\] \S+: (.+)$", line.strip())
        assert m, line
        assert m.group(2).strip()  # a reason, never empty
    state = {ln.split()[0]: ln.split()[1] for ln in lines}
    assert state["torch-reference"] == "available" and state["torch-bf16"] == "available"
    assert state["flashinfer-cutlass"] == "skipped" and state["torch-fp8"] == "skipped"


def test_env_plugin_backends_are_listed(capsys, monkeypatch):
    registry.all_backends()  # --plugin registers into the process-wide registry: undo it afterwards
    monkeypatch.setattr(registry, "_registry", dict(registry._registry))
    assert main(["env", "--device", "cpu", "--plugin", "fp4bench.testing.faults"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^\s+fault-zero-band\s+available\s+\[dense\]", out, re.M)
    assert "fault-zero-band" in {b.name for b in all_backends()}


def test_workload_glm5_decode_arithmetic(capsys):
    assert main(["workload"]) == 0  # defaults: glm-5 at 512, 1024
    out = capsys.readouterr().out
    assert out.startswith("glm-5: H=6144 I=2048 E=256 top_k=8 TP=1")
    rows = {int(ln.split()[0]): ln.split() for ln in out.splitlines()[2:]}
    assert rows[512][1] == "16.00" and rows[1024][1] == "32.00"  # 512 * 8 / 256, 1024 * 8 / 256
    assert main(["workload", "--models", "glm-5", "--batches", "64", "--tp", "8"]) == 0
    out = capsys.readouterr().out
    assert "TP=8" in out and out.splitlines()[2].split()[:2] == ["64", "2.00"]


def test_workload_and_shapes_take_the_sweeps_plural_options(capsys):
    """``--models``/``--batches``/``--tp`` mean what they mean in a sweep: lists, one block per model and TP."""
    assert main(["workload", "--models", "glm-5,deepseek-v3", "--batches", "64", "--tp", "1,8"]) == 0
    heads = [ln.split(":")[0] + " " + ln.split()[-1] for ln in capsys.readouterr().out.splitlines() if "top_k=" in ln]
    assert heads == ["glm-5 TP=1", "glm-5 TP=8", "deepseek-v3 TP=1", "deepseek-v3 TP=8"]
    assert main(["shapes", "--models", "glm-5,deepseek-v3", "--batches", "1", "--routing", "uniform,zipf:1.2",
                 "--gpu", "b200"]) == 0
    out = capsys.readouterr().out
    heads = [(ln.split(":")[0], ln.split()[-1]) for ln in out.splitlines() if "top_k=" in ln]
    assert heads == [("glm-5", "routing=uniform"), ("glm-5", "routing=zipf:1.2"),
                     ("deepseek-v3", "routing=uniform"), ("deepseek-v3", "routing=zipf:1.2")]
    assert out.count("B200: ridge point") == 1  # both models are NVFP4: one ridge point


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["frobnicate"], "unknown command 'frobnicate'"),
        (["workload", "--models", "gpt-9"], "unknown model 'gpt-9'"),
        (["workload", "--batches", "0"], "batch"),
        (["workload", "--tp", "3"], "fp4bench workload:"),
    ],
)
def test_usage_errors_exit_2(capsys, argv, message):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_help_and_no_arguments(capsys):
    assert main(["--help"]) == 0
    assert "commands:" in capsys.readouterr().out
    assert main([]) == 2


def _candidate(tmp_path, name, clean, verdicts=None):
    data = bench_json([bench_entry("bench/test_fp4_gemm.py::test_dense[x]", [1e-5, 1.1e-5, 0.9e-5, 1e-5, 1e-5])],
                      fingerprint=H200, clean=clean, verdicts=verdicts)
    return write(tmp_path / "baselines" / "nvidia-h200" / "candidates" / name, data)


def test_baseline_approve_refuses_a_dirty_run_unless_forced(tmp_path, capsys):
    root = tmp_path / "baselines"
    dirty = _candidate(tmp_path, "dirty.json", clean=False, verdicts={"FAIL": 1})
    assert main(["baseline", "approve", str(dirty), "--baselines", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fp4bench baseline approve: ") and "not clean" in err
    assert not (root / "nvidia-h200" / "approved.json").exists()

    assert main(["baseline", "approve", str(dirty), "--baselines", str(root), "--force"]) == 0
    approved = root / "nvidia-h200" / "approved.json"
    assert capsys.readouterr().out.strip() == (f"approved: {approved} (slim format; the first approved baseline "
                                               "of this GPU)")  # nothing was replaced
    approval = json.loads(approved.read_text())["approval"]
    assert approval["forced"] is True and approval["from"] == str(dirty)

    # a clean run replaces it without force
    clean = _candidate(tmp_path, "clean.json", clean=True)
    assert main(["baseline", "approve", str(clean), "--baselines", str(root)]) == 0
    assert "the file it replaced is in git's history" in capsys.readouterr().out
    assert json.loads(approved.read_text())["approval"]["forced"] is False
    assert not (root / "nvidia-h200" / "history").exists()


def test_baseline_migrate_rewrites_in_the_slim_format(tmp_path, capsys):
    run = _candidate(tmp_path, "run.json", clean=True)
    out = tmp_path / "slim.json"
    assert main(["baseline", "migrate", str(run), "--out", str(out)]) == 0
    assert f"slim baseline written: {out}" in capsys.readouterr().out
    assert json.loads(out.read_text())["format"] == "fp4bench-baseline"
    assert main(["baseline", "migrate", str(tmp_path / "nope.json"), "--out", str(tmp_path / "n.json")]) == 2
    assert "fp4bench baseline migrate: baseline file" in capsys.readouterr().err


def test_baseline_approve_missing_file(tmp_path, capsys):
    assert main(["baseline", "approve", str(tmp_path / "nope.json"), "--baselines", str(tmp_path)]) == 2
    assert "does not exist" in capsys.readouterr().err
