"""``baseline approve`` is one transaction: every file it changes is written first and replaced
together, or nothing changes; approvals of one GPU folder take turns on a lock; a ``units``
symlink out of the baselines root is refused. Unwritable places are made as CI (root) can: a
folder where a file should be, an injected failure of the n-th replace."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples
from fp4bench import outputs
from fp4bench.cli import main
from fp4bench.gate.approve import approve
from fp4bench.gate.baseline import BaselineError, load_baseline, write_baseline
from fp4bench.gate.store import unit_path

import numpy as np

UNITS = ("GPU-aaaa1111-0000", "GPU-bbbb2222-0000")


def _candidate(tmp_path: Path, name: str, scale: float = 1.0) -> Path:
    """A run of 4 benchmarks over both units, ``scale`` times the first one's times. The second
    approvals that must reach the write use a faster run (0.8): a slower one is refused by the
    drift check before anything is written."""
    rng = np.random.default_rng(int(scale * 100))
    benches = [bench_entry(f"bench/test_fp4.py::test_gemm[m{i}]", samples(rng, scale * 20e-6, 0.01, 8),
                           {"kernels": ["k"], "gpu_uuid": UNITS[i % 2]}) for i in range(4)]
    return write_baseline(bench_json(benches, fingerprint=replace(H200, gpu_uuid=UNITS[0])), tmp_path / name)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def approved(tmp_path):
    root = tmp_path / "baselines"
    approve(_candidate(tmp_path, "first.json"), root)
    return root


def test_a_unit_share_that_cannot_be_written_changes_nothing(tmp_path, approved, capsys):
    """Before: approved.json was replaced first, then the unit share failed (exit 2) with the model
    baseline already replaced."""
    before = _tree(approved)
    b = unit_path(approved, "nvidia-h200", UNITS[1])
    b.unlink()
    b.mkdir()  # a folder where the unit's file should be
    before = _tree(approved)
    rc = main(["baseline", "approve", str(_candidate(tmp_path, "second.json", 0.8)), "--baselines", str(approved)])
    err = capsys.readouterr().err
    assert rc == 2 and str(b) in err and "nothing was changed" in err
    assert _tree(approved) == before and b.is_dir()


@pytest.mark.parametrize("fail_at", [1, 2, 3])
def test_a_failed_replace_restores_every_file_already_replaced(tmp_path, approved, monkeypatch, capsys, fail_at):
    """The n-th ``os.replace`` of the commit fails (a disk error): every file replaced before it is
    restored from its backup, no temporary or backup is left, and the command exits 4 naming the
    file it could not write."""
    before = _tree(approved)
    cand = _candidate(tmp_path, "second.json", 0.8)
    real, calls = os.replace, []

    def flaky(a, b):
        if ".partial-" in str(a):  # the commit's replaces (a restore moves a backup back)
            calls.append(b)
            if len(calls) == fail_at:
                raise OSError(28, "No space left on device")
        return real(a, b)

    monkeypatch.setattr(outputs.os, "replace", flaky)
    rc = main(["baseline", "approve", str(cand), "--baselines", str(approved)])
    err = capsys.readouterr().err
    assert rc == 4 and f"cannot write {calls[-1]}: No space left on device" in err and "Traceback" not in err
    assert _tree(approved) == before


def test_a_units_symlink_out_of_the_root_is_refused(tmp_path, approved, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    units = approved / "nvidia-h200" / "units"
    for f in units.iterdir():
        f.rename(elsewhere / f.name)
    units.rmdir()
    units.symlink_to(elsewhere)
    outside = _tree(elsewhere)
    before = (approved / "nvidia-h200" / "approved.json").read_bytes()
    rc = main(["baseline", "approve", str(_candidate(tmp_path, "second.json", 0.8)), "--baselines", str(approved)])
    err = capsys.readouterr().err
    assert rc == 2 and "outside the baseline folder" in err
    assert _tree(elsewhere) == outside and (approved / "nvidia-h200" / "approved.json").read_bytes() == before


def test_approvals_of_one_gpu_folder_take_turns(tmp_path, approved):
    """While one approval holds the GPU folder's lock, another waits: it writes nothing until the
    first is done (judged by what is on disk, not by time)."""
    folder = approved / "nvidia-h200"
    cand = _candidate(tmp_path, "second.json", 1.5)
    before = _tree(approved)
    done = threading.Event()
    with outputs.locked(folder):
        t = threading.Thread(target=lambda: (approve(cand, approved), done.set()))
        t.start()
        t.join(0.5)  # ample for an approval of 4 benchmarks that was not waiting
        assert not done.is_set() and _tree(approved) == before
    t.join()
    assert done.is_set() and load_baseline(folder / "approved.json").approval["from"] == str(cand)


def test_a_refused_first_approval_leaves_no_gpu_folder(tmp_path):
    root = tmp_path / "baselines"
    root.mkdir()
    cand = _candidate(tmp_path, "c.json")
    (root / "nvidia-h200").mkdir()
    (root / "nvidia-h200" / "units").write_text("a file where the units folder should be")
    with pytest.raises(BaselineError):
        approve(cand, root)
    (root / "nvidia-h200" / "units").unlink()
    (root / "nvidia-h200").rmdir()
    dirty = write_baseline({**__import__("json").loads(cand.read_text()),
                            "fp4bench": {**__import__("json").loads(cand.read_text())["fp4bench"], "clean": False}},
                           tmp_path / "dirty.json")
    with pytest.raises(BaselineError, match="not clean"):
        approve(dirty, root)
    assert list(root.iterdir()) == []


def test_a_mig_instance_is_a_unit_like_a_gpu(tmp_path):
    """A MIG instance's UUID (``MIG-<hex>``) names its unit file as a GPU's does."""
    root = tmp_path / "baselines"
    rng = np.random.default_rng(3)
    mig = "MIG-4ae2b5d1-0d5c-5bd9-a2c7-6e2f1f4b1a9c"
    benches = [bench_entry("bench/test_fp4.py::test_gemm[m0]", samples(rng, 20e-6, 0.01, 8), {"kernels": ["k"]})]
    cand = write_baseline(bench_json(benches, fingerprint=replace(H200, gpu_uuid=mig)), tmp_path / "c.json")
    res = approve(cand, root)
    assert res.unit == unit_path(root, "nvidia-h200", mig) and res.unit.is_file()
