"""Cumulative drift: approvals of +1.5 % each, committed to git, measured from approval #1 as the
anchor; ``approve`` refuses the one whose cumulative change crosses the 5 % floor (the 4th step,
+6.1 %) though its own step is +1.5 %; ``--accept-drift`` records the decision; ``history`` reads
the approvals back."""

from __future__ import annotations

import json
import re

import pytest

from fakes.approvals import FLOOR, NAMES, approve_and_commit, candidate, git, git_repo
from fp4bench.gate.approve import approve
from fp4bench.gate.baseline import BaselineError, load_baseline
from fp4bench.gate.drift import DriftSettings
from fp4bench.gate.history import approvals, medians, read_history, stack_changes
from fp4bench.gate.slim import write_slim


@pytest.fixture
def repo(tmp_path):
    return git_repo(tmp_path)


def test_the_step_that_crosses_the_floor_cumulatively_is_refused_with_both_numbers(repo):
    for k in range(4):  # approvals #1..#4: +0, +1.5, +3.0, +4.6 % against #1, each step +1.5 %
        approve_and_commit(repo, k, flashinfer="0.7.2.post1" if k < 2 else "0.7.4")  # a stack change at #3
    dest = repo / "baselines" / "nvidia-h200" / "approved.json"
    before = dest.read_bytes()
    with pytest.raises(BaselineError) as err:
        approve(candidate(repo, 4, "0.7.4"), repo / "baselines", drift=FLOOR)
    text = str(err.value)
    assert "2 benchmarks drifted beyond the 5% floor since the anchor" in text
    assert "(the first approval on this GPU model/unit)" in text
    # both numbers: 1.015^4 - 1 = +6.14 % since the anchor, +1.5 % the last step (0.1 % noise each side)
    m = re.search(r"is \+(\d\.\d)% since the anchor, \+(\d\.\d)% against the last approved", text)
    assert m and abs(float(m[1]) - 6.14) <= 0.1 and abs(float(m[2]) - 1.5) <= 0.1, text
    assert "that step alone is within the floor" in text
    assert dest.read_bytes() == before  # nothing written
    # without the drift check (the step alone), the same candidate is approved
    assert approve(candidate(repo, 4, "0.7.4"), repo / "tmp-root").approved.exists()


def test_accepting_the_drift_is_recorded_and_makes_that_approval_the_anchor(repo):
    for k in range(4):
        approve_and_commit(repo, k)
    approve_and_commit(repo, 4, drift=DriftSettings(floor=0.05, accept=True))
    rec = load_baseline(repo / "baselines" / "nvidia-h200" / "approved.json").approval["drift"]
    assert rec["accepted"] is True and rec["benchmarks"] == 2 and rec["cumulative_pct"] == pytest.approx(6.1, abs=0.2)
    assert rec["step_pct"] == pytest.approx(1.5, abs=0.2)
    approve_and_commit(repo, 5)  # +1.5 % from the accepted approval: within the floor again


def test_an_anchor_pinned_by_revision(repo):
    for k in range(3):
        approve_and_commit(repo, k)
    third = git(repo, "rev-parse", "HEAD").strip()
    approve_and_commit(repo, 3)
    approve_and_commit(repo, 4, drift=DriftSettings(floor=0.05, anchor=third))  # +3.0 % since #3: approved
    with pytest.raises(BaselineError, match="--anchor no-such-rev"):
        approve(candidate(repo, 5), repo / "baselines", drift=DriftSettings(anchor="no-such-rev"))


def test_history_keys_approvals_by_their_record_not_by_commit(repo):
    for k in range(3):
        approve_and_commit(repo, k, flashinfer="0.7.2.post1" if k < 2 else "0.7.4")
    dest = repo / "baselines" / "nvidia-h200" / "approved.json"
    good = dest.read_text()
    dest.write_text(json.dumps(json.loads(good), indent=4))  # a re-serialization: not an approval
    git(repo, "commit", "-qam", "reformat")
    dest.write_text("{not json")  # a version no reader accepts: named, not an approval
    git(repo, "commit", "-qam", "broken")
    dest.write_text(good)
    write_slim(load_baseline(dest), dest)  # a migration keeps the record: not an approval either
    (repo / "other.txt").write_text("x")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "migrated, and an unrelated file")
    hist, unreadable = read_history(dest)
    assert [a.baseline.approval["at"] for a in hist] == ["20260101T000000Z", "20260102T000000Z", "20260103T000000Z"]
    assert len(unreadable) == 1 and "approved.json@" in unreadable[0]
    assert approvals(dest) == hist
    med = medians(hist)
    assert [round(m / med[NAMES[0]][0] - 1, 3) for m in med[NAMES[0]]] == [0.0, 0.015, 0.030]
    assert stack_changes(hist)[2] == [("flashinfer", "0.7.2.post1", "0.7.4")] and stack_changes(hist)[1] == []
