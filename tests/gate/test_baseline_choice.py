"""Which baseline file judges each benchmark (``fp4bench.gate.choice``, ``gate.store.select_baselines``):
the unit file of the GPU it ran on when that file holds it, else the model file with the
unit-to-unit offset; the in-test decision and the final table ask the same function."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from fakes.benchjson import H200, bench_entry, bench_json, write
from fp4bench.gate.baseline import load_baseline
from fp4bench.gate.choice import BaselineFile, Baselines
from fp4bench.gate.compare import compare
from fp4bench.gate.judge import judge
from fp4bench.gate.policy import Policy
from fp4bench.gate.store import select_baselines, unit_path
from fp4bench.gate.verdict import Status

A, B, C = "GPU-aaaaaaaa-0000", "GPU-bbbbbbbb-1111", "GPU-cccccccc-2222"
NAMES = [f"bench/test_fp4_gemm.py::test_dense[x{i}]" for i in range(3)]


def _file(path, fingerprint, names, med=20e-6, seed=0):
    rng = np.random.default_rng(seed)
    entries = [bench_entry(n, (med * np.exp(rng.normal(0, 0.002, 30))).tolist(), {"backend": "x"}) for n in names]
    return write(path, bench_json(entries, fingerprint=fingerprint))


@pytest.fixture
def root(tmp_path):
    """approved.json of all three benchmarks, recorded on unit C; unit A's own file holds x0 only."""
    r = tmp_path / "baselines"
    _file(r / "nvidia-h200" / "approved.json", replace(H200, gpu_uuid=C), NAMES)
    _file(unit_path(r, "nvidia-h200", A), replace(H200, gpu_uuid=A), NAMES[:1], med=21e-6, seed=1)
    return r


def test_a_benchmark_is_judged_by_its_own_units_file_when_it_holds_it_else_by_the_model_file(root):
    files = select_baselines(root, replace(H200, gpu_uuid=None), [A, B])
    assert files.lead.path.name == "approved.json" and set(files.units) == {A}
    on_a, on_b = replace(H200, gpu_uuid=A), replace(H200, gpu_uuid=B)
    own = files.judging(NAMES[0], on_a, Policy())
    assert own.file.unit == A and own.record.median == pytest.approx(21e-6, rel=0.01)
    assert not own.policy.less_sensitive  # that very unit: full sensitivity
    other = files.judging(NAMES[1], on_a, Policy())  # A's file does not hold it
    assert other.file.unit is None and other.policy.other_unit
    assert other.policy.rule_settings().unit_sigma == other.policy.noise.of("dense").unit_sigma > 0
    assert files.judging(NAMES[0], on_b, Policy()).file.unit is None  # B has no file of its own
    # the model file's own unit is judged at full sensitivity by it
    assert not files.judging(NAMES[1], replace(H200, gpu_uuid=C), Policy()).policy.less_sensitive


def test_every_process_of_a_run_picks_the_same_lead_file(tmp_path):
    """Without approved.json the first unit file of the run's GPUs leads, whichever GPU asks (a
    worker on B, the controller with none): the in-test verdict and the table use one file."""
    r = tmp_path / "b"
    for u in (A, B):
        _file(unit_path(r, "nvidia-h200", u), replace(H200, gpu_uuid=u), NAMES[:1])
    leads = {select_baselines(r, replace(H200, gpu_uuid=who), [A, B]).lead.unit for who in (None, A, B)}
    assert leads == {A}


def test_the_table_judges_each_benchmark_as_its_test_did_and_says_which_file(root):
    files = select_baselines(root, replace(H200, gpu_uuid=None), [A, B])
    on = {NAMES[0]: replace(H200, gpu_uuid=A), NAMES[1]: replace(H200, gpu_uuid=A),
          NAMES[2]: replace(H200, gpu_uuid=B)}
    rng = np.random.default_rng(5)
    # +3.2 %: decided against A's own file, not shown against another unit's (the offset widens it)
    now = {n: ([(21e-6 * 1.032 * np.exp(rng.normal(0, 0.002, 30))).tolist() for _ in range(3)], {"backend": "x"})
           for n in NAMES}
    base, policies, notes = files.merged(on, Policy(floor=0.05))
    result = compare(base, now, None, Policy(floor=0.05), replace(H200, gpu_uuid=None), policies=policies)
    for name, (windows, extra) in now.items():  # the in-test decision on the same windows
        j = files.judging(name, on[name], Policy(floor=0.05))
        assert judge(name, j.record, windows, extra, j.policy).status == \
            next(v.status for v in result.verdicts if v.name == name)
    assert notes == [f"baselines: 2 vs approved.json (another or unknown unit: less sensitive); "
                     f"1 vs units/{A}.json (that unit)"]
    assert {n: p.other_unit for n, p in result.policies.items()} == {NAMES[0]: False, NAMES[1]: True,
                                                                     NAMES[2]: True}
    assert not result.less_sensitive()  # one benchmark had its own unit's file
    widths = {v.name: v.interval[1] - v.interval[0] for v in result.verdicts if v.status is not Status.MISSING}
    assert widths[NAMES[0]] < widths[NAMES[1]]


def test_one_file_and_one_gpu_says_nothing_new(root):
    lead = BaselineFile(root / "nvidia-h200" / "approved.json",
                        load_baseline(root / "nvidia-h200" / "approved.json"))
    files = Baselines(lead)
    _, _, notes = files.merged({n: replace(H200, gpu_uuid=C) for n in NAMES}, Policy())
    assert notes == []


def test_a_units_file_judging_another_gpus_benchmarks_is_not_labelled_that_unit(tmp_path):
    """Without approved.json unit A's file leads; a benchmark that ran on B and is judged by it
    is judged by another unit's file, and the header says so (it said "(that unit)")."""
    r = tmp_path / "b"
    _file(unit_path(r, "nvidia-h200", A), replace(H200, gpu_uuid=A), NAMES)
    files = select_baselines(r, replace(H200, gpu_uuid=None), [A, B])
    _, _, header = files.merged({NAMES[0]: replace(H200, gpu_uuid=A), NAMES[1]: replace(H200, gpu_uuid=B)},
                                Policy())
    assert header == [f"baselines: 2 vs units/{A}.json (another or unknown unit: less sensitive)"]
    _, _, header = files.merged({NAMES[0]: replace(H200, gpu_uuid=A)}, Policy())
    assert header in ([], [f"baselines: 1 vs units/{A}.json (that unit)"])
