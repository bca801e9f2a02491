"""The noise terms the gate judges with (``gate.calibration``): another unit's offset per class
measured from the per-unit files of a GPU folder, the constants without them, and the verdict
header saying which were used."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, samples, write
from fp4bench.gate.calibration import FALLBACK, MIN_SHARED, UNIT_SIGMA, noise_for, unit_terms
from fp4bench.gate.policy import Policy


def _unit_file(path, uuid, factors, kind="dense", seed=0):
    rng = np.random.default_rng(seed)
    fp = replace(H200, gpu_uuid=uuid)
    return write(path, bench_json([bench_entry(f"b::t[{i}]", samples(rng, 20e-6 * f, 0.001), {"kind": kind})
                                   for i, f in enumerate(factors)], fingerprint=fp))


def test_unit_offsets_come_from_two_units_files(tmp_path):
    """Two units' files of one folder, the second with offsets of sd 1 % on 40 dense benchmarks:
    the dense term is about 1 % / sqrt(2) per unit (log-ratio of two offsets) and at least the
    rms; grouped and MoE, not held by both, keep the constants."""
    rng = np.random.default_rng(1)
    offsets = np.exp(rng.normal(0, 0.01, 40))
    gpu = tmp_path / "nvidia-h200"
    _unit_file(gpu / "units" / "GPU-aa.json", "GPU-aa", np.ones(40))
    _unit_file(gpu / "units" / "GPU-bb.json", "GPU-bb", offsets)
    terms = noise_for(gpu, "GPU-cc")
    d = np.log(offsets)
    want = max(math.sqrt(np.mean(d ** 2)), np.percentile(np.abs(d), 95) / 1.96) / math.sqrt(2)
    assert terms.of("dense").unit_sigma == pytest.approx(want, rel=0.05)
    assert terms.of("moe").unit_sigma == UNIT_SIGMA["moe"] and not terms.calibrated
    assert "measured between 2 units (dense)" in terms.header()
    # another unit's benchmark is judged with it; the same unit's is not
    assert Policy(noise=terms, other_unit=True).rule_settings("dense").unit_sigma == terms.of("dense").unit_sigma
    assert Policy(noise=terms).rule_settings("dense").unit_sigma == 0


def test_too_few_shared_benchmarks_keep_the_constants(tmp_path):
    medians = {"GPU-aa": {f"t{i}": ("grouped", 1.0) for i in range(MIN_SHARED - 1)},
               "GPU-bb": {f"t{i}": ("grouped", 1.1) for i in range(MIN_SHARED - 1)}}
    assert unit_terms(medians) == {}
    assert noise_for(tmp_path, "GPU-aa") == FALLBACK  # no units folder: the constants


def test_the_verdict_header_names_the_calibration_used(tmp_path, capsys):
    from fp4bench.cli.compare import compare_main

    unit = replace(H200, gpu_uuid="GPU-aa")
    rng = np.random.default_rng(2)
    gpu = tmp_path / "nvidia-h200"
    base = write(gpu / "approved.json", bench_json([bench_entry("b::t[0]", samples(rng, 20e-6, 0.001),
                                                                {"kind": "moe"})], fingerprint=unit))
    new = write(tmp_path / "new.json", bench_json([bench_entry("b::t[0]", samples(rng, 20e-6, 0.001),
                                                               {"kind": "moe"})], fingerprint=unit))
    compare_main([str(base), str(new)])
    assert "noise terms: built-in constants (no calibration of this unit: fp4bench calibrate)" in capsys.readouterr().out
    (gpu / "units").mkdir()
    (gpu / "units" / "GPU-aa.calibration.json").write_text(
        '{"format": "fp4bench-calibration", "schema": 1, "unit": "GPU-aa", "gpu_slug": "nvidia-h200", '
        '"at": "2026-12-06T00:00:00Z", "classes": {"moe": {"within": 0.0002, "window": 0.001, '
        '"placement": 0.0015, "process": 0.0005, "drift": 0.0}}}')
    compare_main([str(base), str(new)])
    out = capsys.readouterr().out
    assert "noise terms: units/GPU-aa.calibration.json (2026-12-06T00:00:00Z; classes moe)" in out
