"""The slim baseline format: one benchmark per line, the keys the gate reads, read like the
pytest-benchmark JSON it is made from."""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
from pathlib import Path

import numpy as np
import pytest

from fakes.benchjson import bench_entry
from fp4bench.gate import assess, judge, record, tactics
from fp4bench.gate.baseline import SECTION, BaselineError, load_baseline, make_section, parse_baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import GATE_KEYS
from fp4bench.gate.slim import slim_text, write_slim
from fakes.paths import DATA, ROOT

APPROVED = ROOT / "baselines" / "nvidia-h200" / "approved.json"


def _gate_view(b):
    """Everything of a baseline the gate can see."""
    return ({k: (r.samples, {g: r.extra_info.get(g) for g in GATE_KEYS}) for k, r in b.benchmarks.items()},
            b.fingerprint, b.availability, b.sweep, b.clean, b.verdicts)


def _pytest_benchmark_json(b) -> dict:
    """``b`` as a pytest-benchmark --benchmark-json file with an fp4bench section."""
    benches = [bench_entry(name, rec.samples, rec.extra_info) for name, rec in b.benchmarks.items()]
    return {"benchmarks": benches, SECTION: make_section(b.fingerprint, b.availability, b.sweep, b.clean, b.verdicts)}


def _verdicts(base, current):
    res = compare(base, current, base.availability, Policy(), base.fingerprint)
    return sorted(res.verdicts, key=lambda v: (v.kind, v.name)), res.counts()


def _perturbed(b, seed: int = 1) -> dict:
    """A current run (one window): each benchmark's samples scaled by 0.95, 1, 1.03 or 1.15 (a
    one-window comparison can FAIL only a change of at least twice the floor)."""
    rng = np.random.default_rng(seed)
    return {k: (tuple(x * f for x in r.samples), r.extra_info)
            for k, r in b.benchmarks.items() for f in [rng.choice([0.95, 1.0, 1.03, 1.15])]}


# --- the committed H200 baseline -----------------------------------------------------------------


def test_committed_baseline_is_slim_one_benchmark_per_line():
    text = APPROVED.read_text()
    b = load_baseline(APPROVED)
    n = len(b.benchmarks)
    assert b.slim and n >= 400 and b.clean is True
    assert slim_text(b) == text  # canonical: re-writing it changes nothing
    lines = text.splitlines()
    bench_lines = [ln for ln in lines if ln.startswith('"bench/')]
    assert len(bench_lines) == n and [json.loads("{" + ln.rstrip(",") + "}") for ln in bench_lines]
    assert bench_lines == sorted(bench_lines)
    assert len(text) < 1_500_000 and len(lines) < 1000  # was 3.6 MB, 57k lines as pytest-benchmark JSON


def test_committed_baseline_gates_the_same_in_both_formats(tmp_path):
    slim = load_baseline(APPROVED)
    full = parse_baseline(_pytest_benchmark_json(slim), source="as pytest-benchmark JSON")
    assert not full.slim and _gate_view(full) == _gate_view(slim)
    current = _perturbed(slim)
    v_full, counts = _verdicts(full, current)
    assert _verdicts(slim, current) == (v_full, counts)
    assert counts["FAIL"] and counts["PASS"] and counts["AMBIGUOUS"]  # the comparison decided things


# --- round trip on recorded runs --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["h200-aa-a.json", "h200-inj-base.json"])
def test_round_trip_keeps_everything_the_gate_uses(tmp_path, name):
    original = load_baseline(DATA / name)
    slim = load_baseline(write_slim(original, tmp_path / "slim.json"))
    assert slim.slim and _gate_view(slim) == _gate_view(original)
    assert {k: r.name for k, r in slim.benchmarks.items()} == {k: r.name for k, r in original.benchmarks.items()}
    partner = load_baseline(DATA / name.replace("-a.json", "-b.json").replace("-base.json", "05.json"))
    assert _verdicts(slim, partner.as_current()) == _verdicts(original, partner.as_current())


def test_slim_keeps_only_what_a_reader_uses(tmp_path):
    rec = {"backend": "b", "problem": "p", "tactic": "t", "kernels": ["k"], "sm_clock_mhz": 1980.0, "flops": 10,
           "api": "x", "timing_note": "", "throttle_ns_sw_power_cap": 0, "check_detail": "long text"}
    data = _pytest_benchmark_json(load_baseline(DATA / "h200-aa-a.json"))
    data["benchmarks"] = [bench_entry("bench/t.py::test_x[a]", [1e-5, 1.1e-5, 0.9e-5], rec)]
    kept = load_baseline(write_slim(parse_baseline(data), tmp_path / "s.json")).benchmarks["bench/t.py::test_x[a]"]
    assert kept.extra_info == {k: rec[k] for k in ("backend", "problem", "tactic", "kernels", "sm_clock_mhz", "flops")}


# --- review: a changed benchmark is a changed line ----------------------------------------------


def test_one_changed_benchmark_is_a_one_line_diff():
    b = load_baseline(APPROVED)
    name = sorted(b.benchmarks)[200]
    rec = b.benchmarks[name]
    changed = dataclasses.replace(b, benchmarks={**b.benchmarks, name: dataclasses.replace(
        rec, samples=tuple(x * 1.02 for x in rec.samples))})
    diff = [ln for ln in difflib.unified_diff(slim_text(b).splitlines(), slim_text(changed).splitlines(), n=0,
                                              lineterm="") if not ln.startswith(("---", "+++", "@@"))]
    assert len(diff) == 2 and diff[0].startswith(f"-{json.dumps(name)}") and diff[1].startswith(f"+{json.dumps(name)}")


def test_a_new_tactic_is_one_added_line_each():
    b = load_baseline(APPROVED)
    key = next(k for k, v in b.availability.items() if v == "ok")
    name = sorted(b.benchmarks)[10]
    more = dataclasses.replace(b, availability={**b.availability, key + "-new": "ok"},
                               benchmarks={**b.benchmarks, name + "-new": b.benchmarks[name]})
    diff = [ln for ln in difflib.unified_diff(slim_text(b).splitlines(), slim_text(more).splitlines(), n=0,
                                              lineterm="") if not ln.startswith(("---", "+++", "@@"))]
    # the new lines, and the line before each that gains a separating comma where it was the last
    assert sum(ln.startswith("+") for ln in diff) <= 4 and sum(ln.startswith("-") for ln in diff) <= 2


# --- a damaged file is named, with what is wrong ---------------------------------------------------


def _damaged(tmp_path, edit) -> str:
    lines = APPROVED.read_text().splitlines(keepends=True)
    p = tmp_path / "approved.json"
    p.write_text("".join(edit(lines)))
    with pytest.raises(BaselineError) as ei:
        load_baseline(p)
    msg = str(ei.value)
    assert str(p) in msg
    return msg


def _bench_line(lines: list[str]) -> int:
    return next(i for i, ln in enumerate(lines) if ln.startswith('"bench/'))


def _edit_line(i: int, fn):
    def edit(lines):
        lines = list(lines)
        lines[i if i >= 0 else _bench_line(lines)] = fn(lines[i if i >= 0 else _bench_line(lines)])
        return lines
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (lambda lines: lines[: len(lines) // 2], "is not valid JSON (corrupt?)"),
    (lambda lines: lines[:_bench_line(lines) + 1] + lines[_bench_line(lines):], "appears twice in one object"),
    (_edit_line(-1, lambda ln: ln.replace('"samples":[', '"sample":[')), "unknown keys ['sample']"),
    (_edit_line(-1, lambda ln: re.sub(r'"samples":\[[^\]]*\]', '"samples":[]', ln)), "has no 'samples' list"),
    (_edit_line(-1, lambda ln: re.sub(r'"samples":\[[^,\]]*', '"samples":[-1.0', ln)), "invalid sample(s)"),
    (_edit_line(-1, lambda ln: re.sub(r'"extra_info":\{.*\},"samples"', '"extra_info":3,"samples"', ln)),
     "extra_info is not an object"),
    (_edit_line(0, lambda ln: ln.replace("fp4bench-baseline", "fp4bench-baseline-v9")),
     "'format' is 'fp4bench-baseline-v9', not 'fp4bench-baseline'"),
    (_edit_line(1, lambda ln: ln.replace('"schema": 1', '"schema": 7')), "schema 7 is newer than this fp4bench"),
])
def test_damaged_slim_file_is_a_clear_error(tmp_path, edit, message):
    assert message in _damaged(tmp_path, edit)


# --- the keys ------------------------------------------------------------------------------------


def test_gate_keys_cover_every_extra_info_key_the_verdict_reads():
    src = "".join(Path(m.__file__).read_text() for m in (record, assess, judge, tactics))
    read = set(re.findall(r'(?:extra|extra_info|base_extra|new_extra|x)\.get\("(\w+)"', src))
    flags = re.findall(r'INVALID_FLAGS = \(([^)]*)\)', src)[0] + "".join(re.findall(r'\(\("(\w+)",\)', src))
    read |= set(re.findall(r'"(\w+)"', flags)) | set(re.findall(r'\(\("(\w+)",\)', src))
    assert {"kernels", "noise_floor", "clock_anomaly", "invalid", "throttled"} <= read  # the patterns still match
    assert read <= set(GATE_KEYS), sorted(read - set(GATE_KEYS))


def test_windows_round_trip_in_both_formats_and_one_window_files_stay_schema_1(tmp_path):
    from fp4bench.gate.record import with_windows
    from fp4bench.gate.slim import slim_text, write_slim

    one = load_baseline(APPROVED)
    assert one.min_windows == 1 and json.loads(slim_text(one))["schema"] == 1
    name, rec = next(iter(one.benchmarks.items()))
    ws = [list(rec.samples), [x * 1.01 for x in rec.samples], [x * 0.99 for x in rec.samples]]
    three = dataclasses.replace(one, benchmarks={name: with_windows(name, rec.name, ws, rec.extra_info)})
    path = write_slim(three, tmp_path / "three.json")
    again = load_baseline(path)
    assert json.loads(path.read_text())["schema"] == 2
    assert again.benchmarks[name].windows == tuple(tuple(w) for w in ws)
    assert again.benchmarks[name].samples == tuple(x for w in ws for x in w)
    assert len(again.benchmarks[name].window_medians) == 3
    # the pytest-benchmark JSON keeps them in its fp4bench section
    data = {"benchmarks": [bench_entry(name, ws[0], rec.extra_info)],
            SECTION: {**make_section(one.fingerprint, windows={name: ws})}}
    assert parse_baseline(data).benchmarks[name].windows == tuple(tuple(w) for w in ws)


@pytest.mark.parametrize("windows, match", [
    ({"nope::t": [[1e-5]]}, "not a benchmark of the file"),
    ({"b::t": [[]]}, "window 1 has no raw samples"),
    ({"b::t": [1e-5, 2e-5]}, "windows must be a non-empty list of sample lists"),
    ({"b::t": [[1e-5], [-1.0]]}, "window 2 has 1 invalid sample"),
])
def test_bad_windows_are_named(windows, match):
    from fakes.benchjson import H200

    data = {"benchmarks": [bench_entry("b::t", [1e-5, 1.1e-5])], SECTION: make_section(H200, windows=None)}
    data[SECTION]["windows"] = windows
    with pytest.raises(BaselineError, match=match):
        parse_baseline(data)
