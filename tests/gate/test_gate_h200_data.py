"""The gate on real H200 samples (tests/data/README.md says where they come from).

Each file holds ONE window per benchmark (recorded before windows were kept). The rule judges
window medians and a FAIL needs two independent new windows (or a change of at least twice the
floor), so one-window files cannot confirm a +5 % change: ``fp4bench compare`` reports it
AMBIGUOUS with its interval, and a live run would take another window (``wants_more``). The
acceptance rates for +5 % (>= 95 % FAIL) are those of the window simulation,
tests/gate/test_rule_simulation.py.

* A/A: two back-to-back runs of the default sweep on an unchanged stack -> 0 FAIL, every one PASS.
* A 5 % slowdown run on the device (a ``torch.cuda._sleep`` after each call) -> no PASS: FAIL where
  the realized change is >= 10 %, else undecided and asking for another window.
* Detection power on the A/A pair with B's samples scaled: 0 FAIL unscaled, no PASS at +5 %,
  >= 95 % FAIL at +12 %.
"""

from __future__ import annotations

import math

import pytest

from fp4bench.gate.baseline import load_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.judge import judge
from fp4bench.gate.policy import Policy
from fp4bench.gate.power import detection_power
from fp4bench.gate.verdict import Status
from fp4bench.report.tables import verdict_message
from fakes.paths import DATA

ACCEPT = 0.95  # the share of a slowdown the gate must catch


def _gate(base_file: str, new_file: str, *, same_unit: bool = False):
    """``same_unit``: the pair is known to come from one GPU (one machine lease, minutes apart) although
    the files predate the fingerprint's ``gpu_uuid``; judge it as one unit (no unit offset in the error
    term), as a live run against a baseline of its own unit is. Otherwise the fingerprints decide, and
    files without a UUID count as another unit."""
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
    # neither file names its GPU unit: each benchmark carries another unit's offset, and one not
    # shown below the band says the smallest change such a comparison can show
    assert all(v.status is Status.PASS or "smallest change this can show" in v.reason for v in timed), \
        [verdict_message(v) for v in timed]
    # the pair is not trivially identical: its medians moved by up to ~2.3 %
    assert max(abs(v.ratio - 1) for v in timed) > 0.02


def test_injected_5pct_slowdown_is_never_a_pass():
    base, res, timed = _gate("h200-inj-base.json", "h200-inj05.json", same_unit=True)
    assert res.exit_code == 1
    assert not [v for v in timed if v.status is Status.PASS]
    huge = math.log1p(2 * Policy().floor)
    for v in timed:
        # one window a side: a FAIL is a change of at least twice the floor, the rest are suspects
        assert (v.status is Status.FAIL) == (math.log(v.ratio) >= huge), verdict_message(v)
        live = judge(v.name, base.benchmarks[v.name], load_baseline(DATA / "h200-inj05.json").benchmarks[v.name].windows,
                     {}, budget_left=True)
        assert live.status is Status.FAIL or live.wants_more, verdict_message(live)
    # some realized slowdowns were under the 5 % floor (+4.1 %): they too are suspects, not passes
    assert min(v.ratio for v in timed) - 1 < 0.05


def test_detection_power_on_aa_pair():
    a, b = load_baseline(DATA / "h200-aa-a.json"), load_baseline(DATA / "h200-aa-b.json")
    # one lease, minutes apart (tests/data/README.md): judged as one unit
    zero, five, twelve = detection_power(a, b, [0.0, 0.05, 0.12], same_unit=True)
    assert (zero.timed, zero.fail, zero.passed) == (39, 0, 39)
    assert five.passed == 0 and five.fail == 0  # one window a side: undecided, never passed
    assert twelve.fail_rate >= ACCEPT


@pytest.mark.parametrize("name", ["h200-aa-a.json", "h200-aa-b.json", "h200-inj-base.json", "h200-inj05.json"])
def test_recorded_files_keep_what_the_gate_reads(name):
    rec = load_baseline(DATA / name)
    assert rec.availability and rec.sweep
    for r in rec.benchmarks.values():
        assert "kernels" in r.extra_info and "sm_clock_mhz" in r.extra_info


@pytest.mark.parametrize("uuid", [None, "GPU-0123abcd"])
def test_every_sample_8pct_slower_is_never_no_regression(tmp_path, capsys, uuid):
    """``fp4bench compare`` of a recorded run against the same file with every sample x1.08: one
    window a side cannot FAIL (a FAIL needs 2 independent new windows), but the run is not
    "no regression" with exit 0 either: each benchmark says what evidence it needs and the
    command exits 3 (re-measure). Without a recorded unit (the files' own state) the sentence is
    the smallest change a comparison across units can show; with one unit on both sides, every
    interval lies above the guard band and the verdict asks for more windows."""
    import json

    from fp4bench.cli.compare import compare_main

    doc = json.loads((DATA / "h200-aa-a.json").read_text())
    doc["fp4bench"]["fingerprint"]["gpu_uuid"] = uuid
    base = tmp_path / "a.json"
    base.write_text(json.dumps(doc))
    for b in doc["benchmarks"]:
        b["stats"]["data"] = [x * 1.08 for x in b["stats"]["data"]]
    new = tmp_path / "a108.json"
    new.write_text(json.dumps(doc))
    assert compare_main([str(base), str(new)]) == 3
    out = capsys.readouterr().out
    assert "no regression" not in out and "re-measure" in out.splitlines()[-1]
    need = "smallest change this can show" if uuid is None else "a FAIL needs 2 independent new windows"
    assert out.count(need) >= 1
    res = compare(load_baseline(base), load_baseline(new).as_current(), current_fingerprint=load_baseline(new).fingerprint)
    timed = [v for v in res.verdicts if v.name in load_baseline(base).benchmarks]
    assert len(timed) == 39 and all(v.remeasure for v in timed)
    if uuid is not None:
        assert all(v.interval[0] > 2.5 for v in timed)
