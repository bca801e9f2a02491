"""``fp4bench units``: every (fake) GPU measured at once by its own pinned worker, each unit judged
against its siblings with the project's rule. On CPU the GPUs are ``FP4BENCH_FAKE_GPUS``, the
benchmarks the ``ab-spin`` backend of tests/fakes/ab_env.py (a fixed time per call) in in-process
fake workers on the simulated clock (tests/fakes/inproc_worker.py), and a slow unit is made with the
test-only slowdown wrapper selected by the pinned UUID
(``FP4BENCH_SLOWDOWN_GPUS``)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from fp4bench.cli.command import EXIT_INCOMPLETE, EXIT_OK, EXIT_REGRESSION, EXIT_USAGE
from fp4bench.cli.units import units_main
from fp4bench.gate.rule import Decision, RuleSettings
from fp4bench.gpus.devices import Gpu
from fp4bench.units.estimate import against_siblings, sibling_base
from fp4bench.units.judge import judge, outcome, report, to_json
from fp4bench.units.run import Unit, UnitBench, UnitPart, UnitsRun
from fakes.paths import FAKES as FAKES_PATH

FAKES = str(FAKES_PATH)
#: the check's default rule (``fp4bench units --floor`` default)
SETTINGS = RuleSettings(floor=0.10)


# --- one unit against its siblings --------------------------------------------------------------


def _windows(offset: float, n: int = 4, noise: float = 0.002, seed: int = 0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [1e-5 * (1 + offset) * float(np.exp(rng.normal(0, noise))) for _ in range(n)]


def test_equal_units_pass_and_a_unit_slower_beyond_the_floor_fails():
    band = math.expm1(SETTINGS.threshold)  # the guard band the rule fails above
    units = {f"u{i}": _windows(0.0, seed=i) for i in range(4)}
    units["u3"] = _windows(2 * band, seed=3)  # twice the guard band slower
    for u in ("u0", "u1", "u2"):
        est, d = against_siblings(units[u], {s: w for s, w in units.items() if s != u}, SETTINGS, budget_left=False)
        assert d is Decision.PASS and abs(est.pct) < band * 100, (u, est)
    est, d = against_siblings(units["u3"], {s: w for s, w in units.items() if s != "u3"}, SETTINGS, budget_left=False)
    assert d is Decision.FAIL and est.interval_pct[0] > band * 100


def test_the_reference_is_the_host_median_and_the_error_term_the_spread_inside_units():
    """Three or more units: the median of every unit's mean (one bad unit does not move it, and a
    healthy unit is judged against the healthy ones); two units: the other unit. The base
    replicates keep each sibling's window-to-window spread, not the gaps between units."""
    a, b, c = [1.0e-5, 1.02e-5], [1.01e-5, 1.03e-5], [2e-5, 2.02e-5]
    base = sibling_base(a, {"b": b, "c": c})
    host = np.median([np.mean(np.log(x)) for x in (a, b, c)])
    assert np.mean(base) == pytest.approx(host)
    ss = sum(float(np.sum((np.log(x) - np.mean(np.log(x))) ** 2)) for x in (b, c))  # inside b and c only
    assert float(np.sum((np.array(base) - np.mean(base)) ** 2)) == pytest.approx(ss, rel=1e-9)
    for unit, siblings in ((a, {"b": b, "c": c}), (b, {"a": a, "c": c})):  # the healthy ones: PASS
        assert against_siblings(unit, siblings, SETTINGS, budget_left=False)[1] is Decision.PASS
    est, d = against_siblings(c, {"a": a, "b": b}, SETTINGS, budget_left=False)
    assert d is Decision.FAIL and est.pct == pytest.approx(98.0, abs=1.5)
    # two units: each against the other, the whole difference
    est, _ = against_siblings([1.2e-5, 1.2e-5], {"a": [1e-5, 1e-5]}, SETTINGS, budget_left=False)
    assert est.pct == pytest.approx(20.0)


def test_a_window_median_that_is_not_a_time_is_refused():
    with pytest.raises(ValueError, match="finite and > 0"):
        sibling_base([1e-5], {"a": [1e-5, float("nan")]})


# --- judging a check's result -------------------------------------------------------------------


def _run(parts: dict[str, dict[str, UnitPart]], fingerprints: dict[str, dict] | None = None) -> UnitsRun:
    uuids = sorted({u for p in parts.values() for u in p})
    units = [Unit(Gpu(i, u, "Fake GPU"), fingerprint={"gpu_name": "Fake GPU", **(fingerprints or {}).get(u, {})})
             for i, u in enumerate(uuids)]
    return UnitsRun(units, [UnitBench(name, dict(p)) for name, p in parts.items()], SETTINGS, passes=4,
                    window_samples=5)


def _part(offset: float, seed: int, **telemetry) -> UnitPart:
    return UnitPart("measured", windows=[[x] * 5 for x in _windows(offset, seed=seed)],
                    telemetry=[dict(telemetry)] * 4 if telemetry else [])


def test_a_slow_unit_is_flagged_with_its_power_limit_clock_and_throttling():
    """GPU 1 power-capped: every benchmark slower, its power limit differs, clocks low, throttled."""
    ok = dict(sm_clock_mhz=1980, power_w=600, temp_c=60, throttled=False, throttle_reasons=[])
    capped = dict(sm_clock_mhz=1410, power_w=450, temp_c=71, throttled=True, throttle_reasons=["SwPowerCap"])
    run = _run({f"b{k}": {"GPU-a": _part(0, k, **ok), "GPU-b": _part(0.3, 10 + k, **capped),
                          "GPU-c": _part(0, 20 + k, **ok)} for k in range(3)},
               {"GPU-a": {"power_limit_w": 700.0, "sm_clock_max_mhz": 1980},
                "GPU-b": {"power_limit_w": 450.0, "sm_clock_max_mhz": 1980},
                "GPU-c": {"power_limit_w": 700.0, "sm_clock_max_mhz": 1980}})
    result = judge(run)
    assert {(v.uuid, v.status) for v in result.verdicts} == {("GPU-a", "PASS"), ("GPU-b", "FAIL"), ("GPU-c", "PASS")}
    code, summary = outcome(run, result)
    assert code == EXIT_REGRESSION and "1 unit flagged: GPU 1 (GPU-b) (exit 1)" in summary
    text = report(run, result)
    row = next(line for line in text.splitlines() if line.split()[:2] == ["1", "GPU-b"])
    assert "450 W (differs)" in row and "1410 MHz (1980 MHz)" in row and "71 °C" in row
    assert "12/12" in row and "SwPowerCap" in row and "FLAGGED: 3 of 3 benchmarks FAIL" in row
    assert "FAIL (slow unit)" in text and "slower than the host median" in text
    js = to_json(run, result)
    units = {u["uuid"]: u for u in js["units"]}
    assert units["GPU-b"]["power_limit_differs"] and not units["GPU-a"]["power_limit_differs"]
    assert units["GPU-b"]["throttle_reasons"] == ["SwPowerCap"] and units["GPU-b"]["fails"] == 3
    assert js["exit_code"] == 1


def test_wrong_output_on_one_unit_fails_it_and_a_lost_unit_is_not_judged():
    wrong = UnitPart("failed", reason="mismatch: 12 of 4096 elements beyond tolerance")
    run = _run({"b0": {"GPU-a": _part(0, 1), "GPU-b": wrong, "GPU-c": _part(0, 2)}})
    (bad,) = [v for v in judge(run).verdicts if v.uuid == "GPU-b"]
    assert (bad.status, bad.kind) == ("FAIL", "wrong output") and "correct on 2 other units" in bad.reason
    assert outcome(run, judge(run))[0] == EXIT_REGRESSION
    lost = UnitPart("measured", windows=[[1e-5] * 5], lost_windows=2, reason="process died")
    run = _run({"b0": {"GPU-a": _part(0, 1), "GPU-b": lost, "GPU-c": _part(0, 2)}})
    result = judge(run)
    (v,) = [v for v in result.verdicts if v.uuid == "GPU-b"]
    assert not v.judged and v.reason == "not judged: 1 windows; 2 lost to a worker that died"
    assert outcome(run, result)[0] == EXIT_INCOMPLETE  # never a pass
    everywhere = UnitPart("failed", reason="out of memory")
    run = _run({"b0": {"GPU-a": everywhere, "GPU-b": everywhere}})
    assert outcome(run, judge(run))[0] == EXIT_INCOMPLETE


def test_a_unit_out_of_memory_is_a_resource_failure_never_a_wrong_output():
    """The worker answers ``out of memory`` (run.case.OUT_OF_MEMORY): not judged, the check
    incomplete, even where every other unit measured the case."""
    from fp4bench.run.case import OUT_OF_MEMORY

    short = UnitPart(OUT_OF_MEMORY, reason="raised OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 GiB")
    run = _run({"b0": {"GPU-a": _part(0, 1), "GPU-b": short, "GPU-c": _part(0, 2)}})
    result = judge(run)
    (v,) = [v for v in result.verdicts if v.uuid == "GPU-b"]
    assert (v.status, v.kind, v.judged) == ("AMBIGUOUS", OUT_OF_MEMORY, False)
    assert v.reason == "not judged: raised OutOfMemoryError: CUDA out of memory. Tried to allocate 24.00 GiB"
    assert outcome(run, result)[0] == EXIT_INCOMPLETE


# --- the command, on fake GPUs ------------------------------------------------------------------


def _cli(*extra: str) -> list[str]:
    return ["--plugin", "ab_env", "--backends", "ab-spin", "--kinds", "dense", "--batches", "1", "--tp", "8",
            "--device", "cpu", "--windows", "3", "--max-windows", "4", "--window-samples", "5", *extra]


@pytest.fixture
def host(monkeypatch, tmp_path, sim_workers):
    """Two fake GPUs; every worker an in-process fake on the simulated clock (tests/conftest.py),
    running ab_env with each fake process's own environment (its pin included)."""
    monkeypatch.setenv("FP4BENCH_FAKE_GPUS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_SPIN_S", "0.01")
    return tmp_path


def test_a_unit_made_slow_is_flagged_and_each_worker_is_pinned_to_its_gpu(host, capsys, sim_workers):
    out = host / "units.json"
    code = units_main(_cli("--plugin", "fp4bench.testing.slowdown", "--env", "FP4BENCH_SLOWDOWN=ab-spin=1",
                           "--env", "FP4BENCH_SLOWDOWN_GPUS=GPU-fake-1", "--verdict-json", str(out)))
    text = capsys.readouterr().out
    assert code == EXIT_REGRESSION, text
    js = json.loads(out.read_text())
    units = {u["uuid"]: u for u in js["units"]}
    assert units["GPU-fake-1"]["fails"] == 2 and units["GPU-fake-1"]["state"].startswith("FLAGGED")
    assert units["GPU-fake-0"]["fails"] == 0
    assert units["GPU-fake-1"]["test_only"] and not units["GPU-fake-0"]["test_only"]
    for b in js["benchmarks"]:
        got = {u["uuid"]: u for u in b["units"]}
        assert got["GPU-fake-1"]["status"] == "FAIL" and got["GPU-fake-1"]["interval_pct"][0] > 5
        assert got["GPU-fake-0"]["status"] == "PASS"
        assert all(len(u["windows"]) >= 3 and u["telemetry"] is None for u in got.values())  # CPU: no NVML
    pins = {p.pid: p.spec.env.get("CUDA_VISIBLE_DEVICES") for p in sim_workers.processes}
    for uuid, fp in js["fingerprints"].items():
        assert fp["gpu_name"] == "cpu"
    started = {uuid: [p for p, u in pins.items() if u == uuid] for uuid in ("GPU-fake-0", "GPU-fake-1")}
    assert all(len(v) == 1 for v in started.values()), pins  # one worker per GPU, pinned by UUID
    assert "GPU 1 ran TEST-ONLY backends: ab-spin" in text
    assert "1 unit flagged: GPU 1 (GPU-fake-1) (exit 1)" in text
    assert "telemetry: none (NVML is read during GPU windows only" in text


def test_a_worker_starts_from_a_fresh_registry_not_this_processs(host, capsys, monkeypatch, isolated_registry):
    """A worker is a new process: what this test process registered (here a slowed ``ab-spin``, as an
    earlier in-process test may leave) is not in a fake worker's registry, so its own
    ``--plugin ab_env`` registers ``ab-spin`` without a clash."""
    from fp4bench.backends import registry

    monkeypatch.setenv("FP4BENCH_SLOWDOWN", "ab-spin=1")
    registry.load_plugin("ab_env")
    registry.load_plugin("fp4bench.testing.slowdown")
    assert type(registry.get_backend("ab-spin")).__name__ == "Slowed"
    monkeypatch.delenv("FP4BENCH_SLOWDOWN")
    code = units_main(_cli())
    out, err = capsys.readouterr()
    assert code == EXIT_OK, out + err
    assert "registered twice" not in out + err and "TEST-ONLY" not in out


def test_a_gpu_whose_worker_cannot_start_leaves_the_check_incomplete(host, capsys, sim_workers):
    from fakes.inproc_worker import Behaviour

    dead = Behaviour(fault=lambda p, req: "error: simulated: GPU GPU-fake-1 is gone" if req["op"] == "init" else None)
    sim_workers.behaviour_of = lambda spec: dead if spec.env.get("CUDA_VISIBLE_DEVICES") == "GPU-fake-1" else Behaviour()
    out = host / "units.json"
    assert units_main(_cli("--windows", "2", "--max-windows", "2", "--verdict-json", str(out))) == EXIT_INCOMPLETE
    text = " ".join(capsys.readouterr().out.split())
    units = {u["uuid"]: u for u in json.loads(out.read_text())["units"]}
    assert units["GPU-fake-1"]["state"] == "incomplete: its worker could not start (CRASH above)"
    assert "GPU-fake-1 is gone" in units["GPU-fake-1"]["crashes"][0]
    assert "CRASH on GPU 1 (GPU-fake-1): start:" in text and "→ incomplete (exit 3)" in text


@pytest.mark.e2e
def test_real_worker_processes_pinned_to_their_gpus(monkeypatch, tmp_path, capsys):
    """The command with real worker processes: one per fake GPU, each started with its own pin
    (ab_env logs the ``CUDA_VISIBLE_DEVICES`` each process really started with). Only what does not
    depend on this machine's load is checked: the pins and that every unit was measured."""
    monkeypatch.setenv("FP4BENCH_FAKE_GPUS", "2")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PYTHONPATH", FAKES)
    monkeypatch.setenv("FAKE_SPIN_S", "0.002")
    monkeypatch.setenv("FAKE_PIN_LOG", str(tmp_path / "pins.log"))
    monkeypatch.syspath_prepend(FAKES)  # the --plugin module is importable here: its names are checked up front
    out = tmp_path / "units.json"
    code = units_main(_cli("--windows", "2", "--max-windows", "2", "--window-samples", "3", "--verdict-json", str(out)))
    text = capsys.readouterr().out
    assert code in (EXIT_OK, EXIT_REGRESSION), text
    js = json.loads(out.read_text())
    pins = [line.split() for line in (tmp_path / "pins.log").read_text().splitlines()]
    assert sorted(uuid for _, uuid in pins) == ["GPU-fake-0", "GPU-fake-1"] and len({pid for pid, _ in pins}) == 2
    assert all(len(u["windows"]) == 2 for b in js["benchmarks"] for u in b["units"])


def test_equal_units_pass(host, capsys, sim_workers):
    assert units_main(_cli()) == EXIT_OK
    text = capsys.readouterr().out
    assert "FAIL" not in text.split("summary:")[0].split("verdict")[-1] and "no unit flagged (exit 0)" in text
    # the workers exit at once: both stdins closed before the first wait
    assert [what for what, _ in sim_workers.exits] == ["hang up", "hang up", "wait", "wait"]


def test_one_gpu_has_nothing_to_compare(host, capsys, monkeypatch, tmp_path):
    from fp4bench.run.worker.pool import Worker

    monkeypatch.setattr(Worker, "start", lambda self: pytest.fail("a worker started"))
    out = tmp_path / "one.json"
    assert units_main(_cli("--gpus", "1", "--verdict-json", str(out))) == EXIT_INCOMPLETE
    assert "1 GPU: GPU 1 (GPU-fake-1); nothing to compare a unit with → incomplete (exit 3)" in capsys.readouterr().out
    assert json.loads(out.read_text())["exit_code"] == 3


@pytest.mark.parametrize("extra, message", [
    (["--gpus", "2"], "--gpus: GPU 2 is not visible (2 visible: 0 GPU-fake-0, 1 GPU-fake-1)"),
    (["--gpus", "0,1,0"], "asks for 3 GPUs, 2 are visible"),
    (["--device", "cuda:1"], "--device cuda:1: each worker sees only its own GPU"),
    (["--env", "CUDA_VISIBLE_DEVICES=0"], "--env CUDA_VISIBLE_DEVICES: each worker is pinned"),
    (["--max-windows", "2"], "--max-windows 2 is below --windows 3"),
    (["--batches", "0"], "--batches: values must be positive"),
])
def test_usage_errors_are_one_line_before_any_worker_starts(host, capsys, monkeypatch, extra, message):
    from fp4bench.run.worker.pool import Worker

    monkeypatch.setattr(Worker, "start", lambda self: pytest.fail("a worker started"))
    assert units_main(_cli(*extra)) == EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_ctrl_c_mid_window_kills_the_workers_and_reports_no_crash(host, capsys, sim_workers):
    """Ctrl-C (SIGINT to the main thread) while GPU 0's worker answers a window: every worker is
    killed, what was measured is judged, the rest is not reached, and the window the interrupt cut
    short is not reported as a crash or a lost window (nothing is recorded after the check ended)."""
    import threading

    from fakes.inproc_worker import Behaviour, ctrl_c_until_killed

    def ctrl_c(p, req):
        if req["op"] == "time" and p.requests.count("time") == 2:
            ctrl_c_until_killed(p)
        return None

    gpu0 = Behaviour(fault=ctrl_c)
    sim_workers.behaviour_of = lambda spec: gpu0 if spec.env.get("CUDA_VISIBLE_DEVICES") == "GPU-fake-0" else Behaviour()
    out = host / "units.json"
    code = units_main(_cli("--verdict-json", str(out)))
    for t in threading.enumerate():  # a window still answering after the check returned, if any
        if t.name.startswith("fp4bench-unit"):
            t.join(timeout=10)
    got = capsys.readouterr()
    text = got.out + got.err  # the report and the progress lines, those of late windows included
    assert code == EXIT_INCOMPLETE, text
    assert "INCOMPLETE: interrupted" in " ".join(text.split()), text
    assert "LOST" not in text and "CRASH" not in text, text
    js = json.loads(out.read_text())
    assert all(u["crashes"] == [] for u in js["units"])
    assert all(p.exit_status == -9 for p in sim_workers.processes)  # killed, none left running
