"""One pytest run of fp4bench: the state it accumulates, and the jobs it does on that state.

The pytest plugin (``plugin/hooks.py``) declares options and forwards hooks to this object.
``Fp4Session`` holds what a run decides and accumulates (device, runner, baselines, measured
samples, windows, availability, table rows); each job is a module of its own, called through a
method here:

* ``settings``: the device, runner, gate ``Policy`` and sweep, from the ``--fp4-*`` options;
* ``baselines``: the baseline files chosen and checked before any test runs, and the candidate file;
* ``cases``: one case in its test: measured, recorded in pytest-benchmark, gated;
* ``finish``: the end-of-run comparison and the JSON section.

Set up lazily: those modules import torch, numpy and scipy, so each method imports its module
when it is called, and a pytest run that collects no fp4bench case loads none of them and never
touches torch.cuda or a baseline.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest


@dataclass
class Fp4Session:
    """Per-run state: device, runner, the active baseline and what was seen."""

    config: pytest.Config
    device: Any = None
    runner: Any = None
    #: the lead baseline file (sweep, availability, what is expected) and its path
    baseline: Any = None
    baseline_path: Path | None = None
    #: every baseline file of the run and which one judges each benchmark (``gate.choice``)
    baselines: Any = None
    fingerprint: Any = None
    fingerprint_changes: list = field(default_factory=list)
    policy: Any = None
    sweep: Any = None
    availability: dict[str, str] = field(default_factory=dict)
    measured: dict[str, tuple[list[float], dict]] = field(default_factory=dict)
    #: every window measured per benchmark (the first is ``measured``'s samples), and how many of
    #: them the in-test verdict judged: the final table judges the very same windows
    windows: dict[str, list[list[float]]] = field(default_factory=dict)
    judged: dict[str, int] = field(default_factory=dict)
    #: the measured cases, to take further windows of (``windows.extra_passes``)
    cases: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: seconds spent on windows a suspect asked for (``--fp4-window-budget``)
    window_seconds: float = 0.0
    #: windows of the extra passes that could not be measured: (benchmark, why)
    window_errors: list[tuple[str, str]] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    deselected: set[str] = field(default_factory=set)
    #: cases skipped with no baseline timing to miss: ``{fullname: reason}``, and their backends
    skipped: dict[str, str] = field(default_factory=dict)
    skipped_backend: dict[str, str] = field(default_factory=dict)
    #: each checked case's row of the checks table (``report.tables.check_row``), by fullname
    checks: dict[str, dict] = field(default_factory=dict)
    failed_tests: int = 0
    #: a record the run was asked to write is not whole (no candidate, a line log that stopped, a
    #: verdict JSON not written): said in the summary, and the run exits 3 (incomplete)
    save_error: str | None = None
    #: pytest-benchmark could not write the candidate (its temporary and name are removed)
    candidate_failed: bool = False
    usage_error: str | None = None  # a bad --fp4-* value found while parametrizing
    health: str | None = None  # CUDA context check after the run: "" healthy, else what broke
    interrupted: bool = False  # a cut-short run is never a clean baseline candidate
    ready: bool = False
    #: --fp4-save-baseline: where the candidate ends up (None: not saved, or nothing measured)
    json_path: Path | None = None
    #: the candidate's path when the user's own --benchmark-json is kept and the candidate is a copy
    copy_to: Path | None = None
    _result: Any = None  # the end-of-run comparison, made once
    #: whether the saved run is clean enough to become a baseline (``json_section``; None: not saved)
    clean: bool | None = None
    #: the xdist controller of a run over several GPUs: it measures nothing and creates no CUDA
    #: context; the workers' cases are merged into it (``fp4bench.plugin.merge``)
    merged: bool = False
    #: the merged run: its GPUs (UUIDs, in worker order) and how the workers measured
    gpus: list[str] = field(default_factory=list)
    measured_how: dict[str, Any] = field(default_factory=dict)
    #: benchmark JSON entries made by the workers (pytest-benchmark's format), by fullname
    entries: dict[str, dict] = field(default_factory=dict)
    #: the test-only backends the workers' sweep selects (the controller loads no backend plugin)
    test_only_found: dict[str, str] = field(default_factory=dict)
    #: the fingerprint of each GPU that measured cases, by UUID (one in a single-process run)
    unit_fingerprints: dict[str | None, Any] = field(default_factory=dict)
    #: each measured case's results-table row, by fullname
    row_of: dict[str, dict] = field(default_factory=dict)

    def setup(self) -> None:
        """The device, runner and ``Policy`` (``settings.set_up``), once. Lazy: only a session
        that collects fp4 cases touches torch.cuda; the controller of a merged run never sets up:
        it measures nothing."""
        if self.ready or self.merged:
            return
        from fp4bench.plugin import settings  # torch: only a run with fp4bench cases

        settings.set_up(self)
        self.ready = True  # only once all of it is set up: a failed setup fails again on the next call

    def gate_policy(self):
        """The gate's ``Policy`` from the ``--fp4-*`` gate options (before any unit adjustment)."""
        from fp4bench.plugin import settings  # numpy, scipy: only a run with fp4bench cases

        return settings.gate_policy(self.config)

    def measurement(self) -> dict[str, Any]:
        """How this run takes its times, recorded in the saved ``sweep`` and checked against the
        baseline's: effective L2 state (a CPU run is always cache-hot), timer and copy rule."""
        return dict(self.measured_how) if self.merged else self.runner.measurement()

    def test_only(self) -> dict[str, str]:
        """The test-only backends this run's sweep selects (``{}`` for a real run)."""
        from fp4bench.plugin import settings  # torch: only a run with fp4bench cases

        return settings.test_only(self)

    def sweep_options(self):
        """The sweep to run: options, else the active baseline's sweep, else the defaults."""
        from fp4bench.plugin import settings  # torch: only a run with fp4bench cases

        return settings.sweep_options(self)

    # -- before the run: baseline and candidate file ----------------------------------------
    def activate_baseline(self, explicit: str | None) -> None:
        """Resolve and validate the baseline files before any test runs (wrong GPU = usage
        error; ``baselines.activate``)."""
        from fp4bench.plugin import baselines  # numpy, scipy: only a run that gates

        baselines.activate(self, explicit)

    def route_json(self, save: str) -> None:
        """--fp4-save-baseline: pytest-benchmark writes its JSON (raw samples) where we say."""
        from fp4bench.plugin import baselines  # numpy, scipy: only a run that saves

        baselines.route_json(self, save)

    # -- one case ---------------------------------------------------------------------------
    def run_case(self, request: pytest.FixtureRequest, benchmark, spec) -> Any:
        """Measure ``spec``; skip / fail it as pytest sees it; record and gate its samples."""
        from fp4bench.plugin import cases  # torch: only a run with fp4bench cases

        return cases.run_case(self, request, benchmark, spec)

    # -- after the run --------------------------------------------------------------------
    def final_compare(self):
        """The whole run against the baseline, each benchmark on the windows its test judged (made
        once; needs a baseline)."""
        if self._result is None:
            from fp4bench.plugin import finish  # numpy, scipy: only a run that gates

            self._result = finish.final_compare(self)
        return self._result

    def ran_on(self) -> dict[str, Any]:
        """Each measured benchmark's GPU, as the fingerprint its test was judged with."""
        from fp4bench.plugin import finish  # numpy, scipy: only a run that gates

        return finish.ran_on(self)

    def check_health(self) -> None:
        """Once per session, on CUDA: ``health`` = '' (healthy) or what broke."""
        if self.health is None and self.ready and not self.merged and self.device is not None \
                and self.device.type == "cuda":
            from fp4bench.measure.health import context_health  # torch.cuda: only a run on a GPU

            self.health = context_health(self.device)

    def json_section(self) -> dict[str, Any]:
        """The ``"fp4bench"`` section of the run's JSON: fingerprint, availability, sweep, and
        whether the run is clean enough to become a baseline."""
        from fp4bench.plugin import finish  # numpy, scipy: only a run with fp4bench cases

        return finish.json_section(self)


SESSION = pytest.StashKey[Fp4Session]()


def session_of(config: pytest.Config) -> Fp4Session:
    """The run's ``Fp4Session`` (made in ``pytest_configure``)."""
    return config.stash[SESSION]
