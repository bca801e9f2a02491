"""``fp4bench calibrate``'s measurement (``run.calibrate``) through real worker code: in-process fake
workers (``fakes.inproc_worker``) on the simulated clock, whose kernel time carries a process
factor (sd 3 %), a placement factor that a release alone keeps and a fresh placement set redraws
(sd 0.5 %), and per-call noise. The terms measured must come out in that order and near those sizes,
and the file they make must judge the gate's benchmarks of that class (``gate.calibration``)."""

from __future__ import annotations

import json
import math

import pytest

from fakes import inproc_worker as inproc
from fp4bench.gate.calibration import calibration_path, load_calibration, noise_for
from fp4bench.gate.policy import Policy
from fp4bench.measure.timing import TimingConfig
from fp4bench.run.calibrate import calibrate, to_calibration
from fp4bench.run.settings import RunnerSettings
from fp4bench.run.sweep import SweepOptions
from fp4bench.run.worker.pool import WorkerSpec

PLACE_SD = 0.005
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=(inproc.BACKEND,))


def _placement(process, call_s: float) -> float:
    """A placement factor per process and placement set: passes 1 and 2 (a release without a new
    placement) share the process's first, every later pass draws its own (the set its runner was
    last moved to, recorded by ``_record_placement``)."""
    key = getattr(process.child.runner, "sim_placement", None)
    table = process.__dict__.setdefault("_places", {})
    if key not in table:
        table[key] = math.exp(process.rng.normal(0.0, PLACE_SD))
    return call_s * table[key]


@pytest.fixture(autouse=True)
def _record_placement(monkeypatch):
    """Off CUDA ``new_placement`` has nothing to move: here it records the set for ``_placement``."""
    from fp4bench.run.case import CaseRunner

    monkeypatch.setattr(CaseRunner, "new_placement", lambda self, index: setattr(self, "sim_placement", index) or 0)


def _measure(processes=4, windows=5, budget_s=1e9, per_class=3):
    spec = WorkerSpec(init=RunnerSettings(device="cpu", plugins=(inproc.PLUGIN,),
                                          timing=TimingConfig(mode="cpu", min_samples=5, max_samples=5,
                                                              target_rel_ci=None)).to_init())
    behaviour = inproc.Behaviour(call_s=1e-3, call_sd=0.001, process_sd=0.03, kernel_s=_placement)
    with inproc.workers(behaviour, seed=3) as world:
        measured, facts = calibrate(spec, SWEEP.to_dict(), processes=processes, windows=windows, per_class=per_class,
                                    budget_s=budget_s)
    return measured, facts, world


def test_the_terms_come_out_in_the_order_and_size_of_the_simulated_ones():
    """4 processes x 5 passes x 2 benchmarks of real worker code (~5 s: the smallest sample whose
    placement term has the degrees of freedom asserted below)."""
    measured, facts, world = _measure(per_class=2)
    assert facts["processes"] == 4 and len(world.processes) == 4 and len(measured) == 2
    cal = to_calibration(measured, {**facts, "fingerprint": {"gpu_uuid": "GPU-00aa", "gpu_slug": "nvidia-h200"}},
                         "2026-12-06T00:00:00Z", floor=0.05, base_windows=3, max_windows=6)
    d = cal.classes["dense"]
    print({k: round(v, 5) for k, v in d.items()})
    # within: 5 samples of 0.1 % per-call noise; window: a release alone keeps the placement
    assert d["within"] < 0.001 and d["window"] < 0.002
    # placement: 0.5 % per fresh set (its 90 % upper bound, on 24 degrees of freedom)
    assert 0.003 <= d["placement"] <= 0.009
    # process: 3 % per process, on 3 degrees of freedom (shared by the benchmarks): the order holds
    assert d["process_estimate"] > d["placement"] and d["process"] >= d["process_estimate"]
    assert set(cal.classes) == {"dense"}
    assert all(b["class"] == "dense" and b["smallest_fail_pct"] > 5 for b in cal.benchmarks.values())


def test_the_budget_bounds_the_run_at_the_least_a_class_needs():
    measured, facts, world = _measure(processes=5, windows=6, budget_s=0.0, per_class=1)
    assert facts["processes"] == 2 and len(world.processes) == 2
    assert all(len(w) == 3 for m in measured for w in m.log_medians)


def test_the_file_judges_its_class_and_the_header_says_so(tmp_path):
    measured, facts, _ = _measure(processes=2, windows=3, per_class=1)
    cal = to_calibration(measured, {**facts, "fingerprint": {"gpu_uuid": "GPU-00aa", "gpu_slug": "nvidia-h200"}},
                         "2026-12-06T00:00:00Z", floor=0.05, base_windows=3, max_windows=6)
    gpu = tmp_path / "nvidia-h200"
    path = calibration_path(gpu, "GPU-00aa")
    path.parent.mkdir(parents=True)
    path.write_text(cal.text())
    back = load_calibration(path)
    assert back.classes == json.loads(cal.text())["classes"]
    terms = noise_for(gpu, "GPU-00aa")
    assert terms.calibrated and "units/GPU-00aa.calibration.json" in terms.header()
    dense = Policy(noise=terms).rule_settings("dense")
    assert dense.run_sigma == pytest.approx(cal.classes["dense"]["process"])
    m = cal.classes["dense"]
    assert dense.prior_sigma == pytest.approx(math.hypot(max(m["placement"], m["window"]), m["drift"]))
    # a class the calibration did not measure keeps the constants; another unit keeps them all
    assert Policy(noise=terms).rule_settings("moe") == Policy().rule_settings("moe")
    assert not noise_for(gpu, "GPU-00bb").calibrated


def test_a_bad_calibration_file_is_named(tmp_path):
    p = tmp_path / "GPU-1.calibration.json"
    p.write_text(json.dumps({"format": "fp4bench-calibration", "schema": 1,
                             "classes": {"dense": {"within": 0.1, "window": -1, "placement": 0, "process": 0,
                                                   "drift": 0}}}))
    with pytest.raises(ValueError, match=r"GPU-1.calibration.json: classes.dense.window must be a sd"):
        load_calibration(p)
    p.write_text("{}")
    with pytest.raises(ValueError, match="not an fp4bench calibration"):
        load_calibration(p)


def test_calibrate_refuses_a_device_without_a_unit(tmp_path, capsys):
    from fp4bench.cli.calibrate import calibrate_main

    with inproc.workers(inproc.Behaviour()):
        rc = calibrate_main(["--device", "cpu", "--plugin", inproc.PLUGIN, "--backends", inproc.BACKEND,
                             "--kinds", "dense", "--batches", "1", "--tp", "8", "--window-samples", "3",
                             "--processes", "2", "--windows", "3", "--baselines", str(tmp_path)])
    assert rc == 2 and "no GPU UUID: a calibration belongs to one GPU unit" in capsys.readouterr().err
    assert not list(tmp_path.rglob("*.calibration.json"))


def test_calibrate_writes_the_units_file_and_prints_the_smallest_slowdowns(tmp_path, capsys, monkeypatch):
    """On a device that names its unit (the fingerprint of a fake H200 unit): the file goes beside
    the unit's baseline, the report names each benchmark's smallest slowdown the gate can FAIL,
    and a second run without --force is refused before anything is measured."""
    import dataclasses

    import fp4bench.run.factory as factory
    from fp4bench.cli.calibrate import calibrate_main

    real = factory.collect_fingerprint
    monkeypatch.setattr(factory, "collect_fingerprint", lambda device=None: dataclasses.replace(
        real(device), gpu_name="NVIDIA H200", gpu_slug="nvidia-h200", gpu_uuid="GPU-00ab"))
    argv = ["--device", "cpu", "--plugin", inproc.PLUGIN, "--backends", inproc.BACKEND, "--kinds", "dense",
            "--batches", "1", "--tp", "8", "--window-samples", "3", "--processes", "2", "--windows", "3",
            "--per-class", "1", "--baselines", str(tmp_path)]
    with inproc.workers(inproc.Behaviour(call_sd=0.001, process_sd=0.01)) as world:
        assert calibrate_main(argv) == 0
        started = len(world.processes)
        out = capsys.readouterr().out
        path = tmp_path / "nvidia-h200" / "units" / "GPU-00ab.calibration.json"
        assert load_calibration(path).unit == "GPU-00ab" and f"calibration written to {path}" in out
        assert "smallest slowdown the stored gate can FAIL" in out and "  dense " in out and "%  " in out
        assert calibrate_main(argv) == 2
        assert "--force" in capsys.readouterr().err and len(world.processes) == started + 1
