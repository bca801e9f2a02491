"""The one clock: simulated time moves only when advanced, and no module but ``fp4bench.clock``
reads the machine's clock or sleeps on it."""

from __future__ import annotations

import ast
import threading
from pathlib import Path

import pytest

import fp4bench
from fp4bench import clock

SRC = Path(fp4bench.__file__).parent
FORBIDDEN = {"perf_counter", "monotonic", "sleep", "perf_counter_ns", "monotonic_ns"}


def test_sim_clock_moves_only_when_advanced():
    sim = clock.SimClock(start=5.0)
    with clock.using(sim):
        assert clock.now() == 5.0
        clock.advance(1e-3)
        clock.sleep(2.0)
        assert clock.now() == pytest.approx(7.001)
        ev = threading.Event()
        assert clock.wait(ev, 0.5) is False and clock.now() == pytest.approx(7.501)
        ev.set()
        assert clock.wait(ev, 10.0) is True and clock.now() == pytest.approx(7.501)
        with pytest.raises(ValueError, match="cannot go back"):
            clock.advance(-1)
        with pytest.raises(RuntimeError, match="never ends"):
            clock.wait(threading.Event(), None)
    assert isinstance(clock.current(), clock.RealClock)


def test_spin_moves_a_simulated_clock_and_busies_the_real_one():
    with clock.using(clock.SimClock()):
        clock.spin(0.25)
        clock.spin(-1.0)  # nothing to spend
        assert clock.now() == 0.25
    real = clock.RealClock()
    t = real.now()
    real.spin(2e-3)
    assert real.now() - t >= 2e-3  # at least as long as asked (a lower bound only: the machine may be busy)


def test_using_restores_the_clock_after_an_error():
    before = clock.current()
    with pytest.raises(KeyError):
        with clock.using(clock.SimClock()):
            raise KeyError("x")
    assert clock.current() is before


def _time_calls(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    names_from_time = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                       and n.module == "time" for a in n.names if a.name in FORBIDDEN}
    hits = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Attribute) and n.attr in FORBIDDEN and isinstance(n.value, ast.Name) \
                and n.value.id == "time":
            hits.append(f"{path.relative_to(SRC)}:{n.lineno} time.{n.attr}")
        elif isinstance(n, ast.Name) and n.id in names_from_time:
            hits.append(f"{path.relative_to(SRC)}:{n.lineno} {n.id} (from time)")
    return hits


def test_no_module_but_the_clock_reads_or_sleeps_on_the_machine_clock():
    hits = [h for p in sorted(SRC.rglob("*.py")) if p.name != "clock.py" or p.parent != SRC
            for h in _time_calls(p)]
    assert hits == []


def test_the_scan_finds_a_bypass(tmp_path):
    bad = SRC / "_clock_scan_probe.py"
    try:
        bad.write_text("import time\nfrom time import sleep as zz\nt = time.perf_counter()\nzz(1)\n")
        assert len(_time_calls(bad)) == 2
    finally:
        bad.unlink()
