"""The bisection over fake releases whose kernel is slower from one release on (simulated clock,
the gate's rule): the right culprit, a release that does not build, a cumulative range, resuming."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.bisect_releases import VERSIONS, call_s, sim_measure
from fp4bench.bisect.search import CULPRIT, CUMULATIVE, NOT_REPRODUCED, UNDECIDED, Bisect, ReleaseBroken
from fp4bench.bisect.state import State, StateError
from fp4bench.bisect.table import render

FLOOR = 3.0
KEY = {"package": "flashinfer-python", "benchmarks": ["b"]}


def _builder(broken=(), built=None):
    def build(v: str) -> Path:
        if built is not None:
            built.append(v)
        if v in broken:
            raise ReleaseBroken(f"{v}: pip install failed (exit 1): no matching distribution")
        return Path(f"/venvs/{v}")
    return build


def _bisect(tmp_path, times, broken=(), log=None, built=None, versions=VERSIONS):
    state = State.open(tmp_path / "state.json", KEY)
    return Bisect(list(versions), _builder(broken, built), sim_measure(times, FLOOR, log=log), state).run()


@pytest.mark.parametrize("culprit", VERSIONS[1:])
def test_each_release_that_slows_the_kernel_is_named(tmp_path, culprit):
    out = _bisect(tmp_path, call_s(culprit, 0.08))
    assert out.kind == CULPRIT and out.culprit == culprit
    assert out.previous == VERSIONS[VERSIONS.index(culprit) - 1]
    # the ends, at most ceil(log2(6)) = 3 midpoints, and the final pair: never every release
    assert len({(s.a, s.b) for s in out.tried}) <= 5


def test_the_table_names_the_culprit_with_delta_and_interval(tmp_path):
    out = _bisect(tmp_path, call_s("0.7.1", 0.08))
    text = render("flashinfer-python", out, FLOOR, page="https://pypi.org/project/flashinfer-python/0.7.1/")
    assert "culprit: flashinfer-python 0.7.1 (slower than 0.7.0.post1" in text
    assert "release page: https://pypi.org/project/flashinfer-python/0.7.1/" in text
    row = next(ln for ln in text.splitlines() if ln.startswith("| 0.7.1 | 0.7.0.post1 |"))
    delta = float(row.split("|")[3].strip().rstrip("%"))
    assert 7.0 < delta < 9.0 and "FAIL" in row  # the 8 % slowdown, measured on the simulated clock


def test_a_release_that_does_not_install_is_reported_and_skipped(tmp_path):
    built = []
    # 0.7.1 is the midpoint the bisect would try first: it cannot be installed
    out = _bisect(tmp_path, call_s("0.7.2.post1", 0.08), broken=("0.7.1",), built=built)
    assert out.kind == CULPRIT and out.culprit == "0.7.2.post1"
    assert "0.7.1" in out.broken and "pip install failed" in out.broken["0.7.1"]
    assert built.count("0.7.1") == 1  # tried once, never measured
    assert all("0.7.1" not in (s.a, s.b) for s in out.tried)
    assert "0.7.1: 0.7.1: pip install failed" in render("flashinfer-python", out, FLOOR)


def test_a_broken_release_next_to_the_culprit_leaves_the_interval_undecided(tmp_path):
    out = _bisect(tmp_path, call_s("0.7.1", 0.08), broken=("0.7.1",))
    assert out.kind == UNDECIDED and out.interval == ("0.7.0.post1", "0.7.2")
    assert out.reason == "0.7.2 or 0.7.1 made it slower (not built: 0.7.1)"


def test_small_steps_that_add_up_are_cumulative_with_the_per_step_table(tmp_path):
    # every release +1.5 %: 6 steps, +9.3 % end to end, no step beyond the 3 % floor
    out = _bisect(tmp_path, call_s(steps={v: 0.015 for v in VERSIONS[1:]}))
    assert out.kind == CUMULATIVE and out.culprit is None
    assert [(s.a, s.b) for s in out.per_step] == list(zip(VERSIONS, VERSIONS[1:]))
    assert all(not s.slower and 0.5 < s.delta_pct < 2.5 for s in out.per_step)
    text = render("flashinfer-python", out, FLOOR)
    assert "cumulative, no single culprit" in text and text.count("| 0.7.4 | 0.7.2.post1 |") == 1


def test_a_range_that_is_not_slower_is_not_bisected(tmp_path):
    log = []
    out = _bisect(tmp_path, call_s(), log=log)
    assert out.kind == NOT_REPRODUCED and log == [(VERSIONS[0], VERSIONS[-1])]


def test_an_interrupted_bisect_resumes_without_measuring_again(tmp_path):
    times = call_s("0.7.2", 0.08)
    measure = sim_measure(times, FLOOR)
    calls = []

    def interrupted(a, va, b, vb):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append((a, b))
        return measure(a, va, b, vb)

    state = State.open(tmp_path / "state.json", KEY)
    with pytest.raises(KeyboardInterrupt):
        Bisect(list(VERSIONS), _builder(), interrupted, state).run()
    saved = json.loads((tmp_path / "state.json").read_text())
    assert [(s["a"], s["b"]) for s in saved["steps"]] == calls
    log = []
    out = _bisect(tmp_path, times, log=log)
    assert out.kind == CULPRIT and out.culprit == "0.7.2"
    assert not set(log) & set(calls) and log  # the rerun measured only what was missing


def test_a_state_of_another_bisect_is_refused(tmp_path):
    State.open(tmp_path / "s.json", KEY).save()
    with pytest.raises(StateError, match="the state of another bisect"):
        State.open(tmp_path / "s.json", {**KEY, "benchmarks": ["c"]})
    (tmp_path / "t.json").write_text("[]")
    with pytest.raises(StateError, match="not a fp4bench-bisect state"):
        State.open(tmp_path / "t.json", KEY)


def test_an_incomplete_step_stops_the_bisect_and_is_measured_again_by_the_rerun(tmp_path):
    from fp4bench.bisect.step import Step

    times = call_s("0.7.2", 0.08)
    state = State.open(tmp_path / "state.json", KEY)
    cut = lambda a, va, b, vb: Step(a, b, "INCOMPLETE", {}, "interrupted")  # noqa: E731
    out = Bisect(list(VERSIONS), _builder(), cut, state).run()
    assert out.kind == UNDECIDED and "was incomplete" in out.reason
    assert not (tmp_path / "state.json").exists()  # nothing kept
    log = []
    assert _bisect(tmp_path, times, log=log).culprit == "0.7.2" and log[0] == (VERSIONS[0], VERSIONS[-1])

