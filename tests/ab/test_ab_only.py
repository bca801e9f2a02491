"""``fp4bench ab --only``: the runner is asked for exactly those benchmarks; an id the sweep does
not list is a usage error naming the ids it has (no worker is needed to test the CLI's part)."""

from __future__ import annotations

import sys

from fp4bench.ab import judge as ab_judge
from fp4bench.ab import report as ab_report
from fp4bench.ab import run as ab_run
from fp4bench.ab.records import AbRun
from fp4bench.cli.ab import ab_main


def _stub(monkeypatch, listed):
    asked = []

    class Runner:
        def __init__(self, *a, **k):
            self.listed = None

        def run(self, sweep_for, only=None):
            asked.append(only)
            self.listed = list(listed)
            return AbRun({}, {}, [], {}, {}, not_reached=[n for n in listed if only is None or n in only])

    monkeypatch.setattr(ab_run, "AbRunner", Runner)
    monkeypatch.setattr(ab_judge, "judge", lambda run, policy: "result")
    monkeypatch.setattr(ab_report, "report", lambda run, result: "")
    monkeypatch.setattr(ab_judge, "outcome", lambda run, result: (0, ""))
    return asked


def test_only_asks_the_runner_for_those_benchmarks(monkeypatch):
    asked = _stub(monkeypatch, ["x-1", "x-2", "y-1"])
    assert ab_main(["--a", sys.executable, "--b", sys.executable, "--only", "x-2, y-1"]) == 0
    assert asked == [{"x-2", "y-1"}]


def test_an_id_the_sweep_does_not_list_is_a_usage_error_naming_the_listed(monkeypatch, capsys):
    _stub(monkeypatch, ["x-1", "x-2"])
    assert ab_main(["--a", sys.executable, "--b", sys.executable, "--only", "x-1,x-9"]) == 2
    err = capsys.readouterr().err
    assert "--only: the sweep has no benchmark x-9" in err and "it has x-1, x-2" in err
