"""The gate's acceptance numbers on real H200 samples (tests/data/README.md says where they come from).

* A/A: two back-to-back runs of the default sweep on an unchanged stack -> 0 FAIL.
* A 5 % slowdown run on the device (a ``torch.cuda._sleep`` after each call) -> at least 95 % FAIL.
* Detection power on the A/A pair with B's samples scaled: 0 FAIL unscaled, >= 95 % FAIL at +5 %.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp4bench.gate.baseline import load_baseline
from fp4bench.gate.power import detection_power
from fp4bench.gate.verdict import Policy, Status, compare
from fp4bench.report import verdict_message

DATA = Path(__file__).parent / "data"
ACCEPT = 0.95  # the share of a >= 5 % slowdown the gate must catch


def _gate(base_file: str, new_file: str, *, same_unit: bool = False):
    """``same_unit``: the pair is known to come from one GPU (one machine lease, minutes apart) although
    the files predate the fingerprint's ``gpu_uuid``; judge it with the same-unit policy (run-to-run
    allowance applied), as a live run against a baseline of its own unit is. Otherwise the fingerprints
    decide, and files without a UUID count as another unit (floor only)."""
    base, new = load_baseline(DATA / base_file), load_baseline(DATA / new_file)
    assert base.fingerprint.gpu_name == new.fingerprint.gpu_name
    res = compare(base, new.as_current(), availability_now=new.availability,
                  current_fingerprint=None if same_unit else new.fingerprint)
    timed = [v for v in res.verdicts if v.name in base.benchmarks]
    return base, res, timed


def test_recorded_pairs_are_the_full_default_sweep_on_one_gpu_model():
    for a, b in (("h200-aa-a.json", "h200-aa-b.json"), ("h200-inj-base.json", "h200-inj05.json")):
        ra, rb = load_baseline(DATA / a), load_baseline(DATA / b)
        assert ra.fingerprint.gpu_name == rb.fingerprint.gpu_name == "NVIDIA H200"
        assert set(ra.benchmarks) == set(rb.benchmarks) and len(ra.benchmarks) == 39
        assert all(len(r.samples) >= 10 for r in (*ra.benchmarks.values(), *rb.benchmarks.values()))


def test_aa_pair_has_no_fail():
    _, res, timed = _gate("h200-aa-a.json", "h200-aa-b.json")
    assert len(timed) == 39
    assert [verdict_message(v) for v in timed if v.status is Status.FAIL] == []
    assert res.exit_code == 0
    # the pair is not trivially identical: its medians moved by up to ~2.3 %
    assert max(abs(v.ratio - 1) for v in timed) > 0.02


def test_injected_5pct_slowdown_fails_at_least_95pct():
    _, res, timed = _gate("h200-inj-base.json", "h200-inj05.json", same_unit=True)
    fails = [v for v in timed if v.status is Status.FAIL]
    assert len(fails) >= ACCEPT * len(timed), [verdict_message(v) for v in timed if v.status is not Status.FAIL]
    assert res.exit_code == 1
    # some realized slowdowns were under the 5 % floor: they fail through the run-to-run allowance
    assert min(v.ratio for v in fails) - 1 < 0.05


def test_detection_power_on_aa_pair():
    a, b = load_baseline(DATA / "h200-aa-a.json"), load_baseline(DATA / "h200-aa-b.json")
    # one lease, minutes apart (tests/data/README.md): judged as one unit
    zero, five = detection_power(a, b, [0.0, 0.05], same_unit=True)
    assert (zero.timed, zero.fail) == (39, 0)
    assert five.fail_rate >= ACCEPT
    # without the run-to-run allowance a slowdown exactly at the floor is a coin flip
    floor_only = detection_power(a, b, [0.05], Policy(drift=0.0), same_unit=True)[0]
    assert detection_power(a, b, [0.05])[0].fail_rate == floor_only.fail_rate  # no UUID: another unit
    assert floor_only.fail_rate < ACCEPT


@pytest.mark.parametrize("name", ["h200-aa-a.json", "h200-aa-b.json", "h200-inj-base.json", "h200-inj05.json"])
def test_recorded_files_keep_what_the_gate_reads(name):
    rec = load_baseline(DATA / name)
    assert rec.availability and rec.sweep
    for r in rec.benchmarks.values():
        assert "kernels" in r.extra_info and "sm_clock_mhz" in r.extra_info
