"""One pytest run of fp4bench: its settings, the active baseline, and what each case does.

The pytest plugin (``plugin/hooks.py``) only declares options and forwards hooks; this object holds
what a run accumulates (measured samples, availability, table rows) and runs one case: measure
it (``case.CaseRunner``), hand its samples to pytest-benchmark, and gate it against the
baseline as it finishes. Set up lazily: a session that collects no fp4bench case never touches
torch.cuda or a baseline.
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
    #: cases skipped with no baseline timing to miss: ``{fullname: reason}``
    skipped: dict[str, str] = field(default_factory=dict)
    failed_tests: int = 0
    #: --fp4-save-baseline was asked for and no results file came of it (said in the summary)
    save_error: str | None = None
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
        """Lazy: only a session that collects fp4 cases touches torch.cuda and the baseline. The
        controller of a merged run never sets up: it measures nothing."""
        if self.ready or self.merged:
            return
        import torch

        from fp4bench.backends import registry
        from fp4bench.run.case import CaseRunner
        from fp4bench.env import collect_fingerprint, parse_device
        from fp4bench.measure import peaks
        from fp4bench.measure.timing import TimingConfig

        opt = self.config.getoption
        for mod in opt("fp4_plugin"):
            registry.load_plugin(mod)
        dev = opt("fp4_device") or ("cuda:0" if torch.cuda.is_available() else "cpu")
        self.device = parse_device(dev, "--fp4-device")
        if self.device.type == "cuda":
            torch.cuda.set_device(self.device)
        self.fingerprint = collect_fingerprint(self.device)
        self.unit_fingerprints[self.fingerprint.gpu_uuid] = self.fingerprint
        budget = opt("fp4_time_budget")
        if budget is None:
            budget = 1.0 if self.device.type == "cuda" else 0.3
        timing = TimingConfig(mode="graph" if self.device.type == "cuda" else "cpu",
                              time_budget_s=budget, target_rel_ci=opt("fp4_target_ci"),
                              min_samples=opt("fp4_min_samples"), max_samples=max(300, opt("fp4_min_samples")),
                              energy_window_s=opt("fp4_energy_window"))
        gpu_peaks = peaks.peak_for(self.fingerprint.gpu_name) if self.device.type == "cuda" else None
        self.runner = CaseRunner(self.device, timing, cold_l2=opt("fp4_l2") == "cold", seed=opt("fp4_seed"),
                                 min_copies=opt("fp4_min_copies"), peaks=gpu_peaks)
        if opt("fp4_isolate"):
            self.runner = _isolated_runner(self.config, self.runner, str(self.device))
        self.policy = self.gate_policy()
        self.ready = True  # only once all of it is set up: a failed setup fails again on the next call

    def gate_policy(self):
        """The gate's ``Policy`` from the ``--fp4-*`` gate options (before any unit adjustment)."""
        from fp4bench.gate.policy import Policy
        from fp4bench.options.registry import policy_kwargs

        return Policy(**policy_kwargs(lambda name: self.config.getoption("fp4_" + name.replace("-", "_"))))

    def measurement(self) -> dict[str, Any]:
        """How this run takes its times, recorded in the saved ``sweep`` and checked against the
        baseline's: effective L2 state (a CPU run is always cache-hot), timer and copy rule."""
        return dict(self.measured_how) if self.merged else self.runner.measurement()

    def test_only(self) -> dict[str, str]:
        """The test-only backends this run's sweep selects (``{}`` for a real run)."""
        from fp4bench.backends.registry import test_only

        if self.merged:
            return dict(self.test_only_found)
        if self.sweep is None:
            return {}
        return test_only(self.sweep.backends)

    def sweep_options(self):
        """The sweep to run: options, else the active baseline's sweep, else the defaults."""
        from fp4bench.backends.registry import get_backend
        from fp4bench.run.sweep import sweep_options

        base = dict(self.baseline.sweep) if self.baseline is not None and self.baseline.sweep else {}
        source = f"baseline {self.baseline.source}" if base else "the baseline"
        opts = sweep_options(lambda name: self.config.getoption("fp4_" + name), base,
                             on_gpu=self.device.type == "cuda", flag="--fp4-", source=source)
        given = self.config.getoption("fp4_backends") is not None
        for b in opts.backends or ():
            try:
                get_backend(b)  # raises ValueError naming the unknown backend
            except ValueError as exc:
                raise ValueError(str(exc) if given else f"{source}: recorded sweep field 'backends': {exc}") from None
        return opts

    # -- before the run: baseline and candidate file ----------------------------------------
    def activate_baseline(self, explicit: str | None) -> None:
        """Resolve and validate the baseline files before any test runs (wrong GPU = usage error):
        ``--fp4-baseline FILE`` alone; with ``--fp4-same-unit`` the one file ``select_baseline``
        picks; else the GPU model's ``approved.json`` and the unit file of each GPU of the run
        (``gate.store.select_baselines``; which file judges which benchmark: ``gate.choice``).
        The controller of a merged run has no fingerprint of its own yet: each worker checks the
        GPU model and how it measures against the files before its first case."""
        from fp4bench.gate.baseline import BaselineError, load_baseline
        from fp4bench.gate.compatibility import check_compatible, check_same_measurement
        from fp4bench.gate.choice import BaselineFile, Baselines
        from fp4bench.gate.store import select_baseline, select_baselines

        self.setup()
        opt = self.config.getoption
        if self.policy is None:
            self.policy = self.gate_policy()
        try:
            if explicit:
                files = Baselines(BaselineFile(Path(explicit), load_baseline(explicit)))
            elif opt("fp4_same_unit"):
                path = select_baseline(opt("fp4_baselines"), self.fingerprint)
                files = Baselines(BaselineFile(path, load_baseline(path)))
            else:
                files = select_baselines(opt("fp4_baselines"), self.fingerprint, self.gpus)
            self.baselines, self.baseline, self.baseline_path = files, files.lead.baseline, files.lead.path
            if not self.merged:
                self.fingerprint_changes = check_compatible(self.baseline.fingerprint, self.fingerprint)
                for f in files.files:
                    check_compatible(f.baseline.fingerprint, self.fingerprint)
                    check_same_measurement(f.baseline.sweep, self.measurement())
                if opt("fp4_same_unit"):
                    from fp4bench.gate.unit import require_same_unit

                    require_same_unit(self.baseline.fingerprint, self.fingerprint)
        except BaselineError as exc:
            raise pytest.UsageError(f"fp4bench baseline: {exc}") from None
        compare = self.config.getoption("benchmark_compare", default=None)
        path = self.baseline_path
        if compare and not self.merged and not hasattr(self.config, "workerinput"):  # off under xdist
            # pytest-benchmark's own compare (its table, --benchmark-compare-fail) reads the same
            # baseline; it reads only its own format, so a slim file is handed over as such a file
            if self.baseline.slim:
                self.config.option.benchmark_compare = str(self._pytest_benchmark_copy())
            elif compare is True:
                self.config.option.benchmark_compare = str(path)

    def _pytest_benchmark_copy(self) -> Path:
        """The active baseline as a temporary pytest-benchmark JSON file (removed at exit)."""
        import json
        import tempfile

        import pytest_benchmark
        from pytest_benchmark.stats import Stats

        benches = []
        for name, rec in sorted(self.baseline.benchmarks.items()):
            stats = Stats()
            for x in rec.samples:
                stats.update(x)
            benches.append({"group": None, "name": rec.name, "fullname": name, "params": None, "param": None,
                            "extra_info": rec.extra_info, "options": {},
                            "stats": {**stats.as_dict(), "iterations": 1, "data": list(rec.samples)}})
        # this machine's machine_info: pytest-benchmark warns (a 2,000-character line) when the
        # compared file's differs, and a slim file keeps none; the fp4bench fingerprint, checked
        # and reported in the verdict, is what says which machine the baseline is from
        hook = self.config.hook
        machine = hook.pytest_benchmark_generate_machine_info(config=self.config)
        hook.pytest_benchmark_update_machine_info(config=self.config, machine_info=machine)
        # the baseline's own path under a temporary folder: pytest-benchmark prints "Comparing
        # against benchmarks from: <this path>", which then ends in the real file's path
        folder = Path(tempfile.mkdtemp(prefix="fp4bench-slim-copy-"))
        real = Path(self.baseline.source).resolve()
        tmp = folder.joinpath(*real.parts[1:])
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"machine_info": machine, "commit_info": {}, "benchmarks": benches, "datetime": "",
                                   "version": pytest_benchmark.__version__}))
        import shutil

        self.config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))
        return tmp

    def route_json(self, save: str) -> None:
        """--fp4-save-baseline: pytest-benchmark writes its JSON (raw samples) where we say."""
        from fp4bench.gate.store import candidate_path, partial_path, reserve_path

        self.setup()
        # the final name is reserved now (unique, never an existing file); pytest-benchmark writes
        # beside it and publish() moves the finished file onto it in one os.replace
        path = Path(candidate_path(self.config.getoption("fp4_baselines"), self.fingerprint.gpu_slug)) \
            if save == "auto" else reserve_path(save)
        import pytest_benchmark

        part = partial_path(path)
        major_minor = tuple(int(x) for x in pytest_benchmark.__version__.split(".")[:2])
        if self.config.getoption("benchmark_json", default=None) is None:
            self.config.option.benchmark_json = part if major_minor >= (5, 3) else open(part, "wb")
        else:  # the user's --benchmark-json stays; the candidate is written beside it (json_section)
            self.copy_to = path
        self.json_path = path

    # -- one case ---------------------------------------------------------------------------
    def run_case(self, request: pytest.FixtureRequest, benchmark, spec) -> Any:
        """Measure ``spec``; skip / fail it as pytest sees it; record and gate its samples."""
        from fp4bench.backends.registry import get_backend
        from fp4bench.run.case import FAILED, MEASURED, SKIPPED, UNSUPPORTED
        from fp4bench.gate.baseline import availability_key, availability_value, is_ok
        from fp4bench.gate.record import check_samples
        from fp4bench.measure.timing import record_in_benchmark
        from fp4bench.plugin.console import fail, skip
        from fp4bench.report.tables import result_row

        fullname = benchmark.fullname if hasattr(benchmark, "fullname") else request.node.nodeid
        # fp4bench owns this fixture whatever the outcome (skip, failed check, --benchmark-disable):
        # without this pytest-benchmark warns "Benchmark fixture was not used at all" on those tests
        benchmark._mode = "fp4bench"
        judging = self.baselines.judging(fullname, self.fingerprint, self.policy) if self.baselines else None
        base = judging.record if judging is not None else None
        backend = get_backend(spec.backend)
        key = availability_key(spec.backend, spec.problem.id, spec.tactic.label)
        jit = self._jit_reason(spec.backend)
        if spec.skip_reason or jit:
            res_status, reason = SKIPPED, spec.skip_reason or jit
            res = None
        else:
            try:  # the backend's own prepare()/run() raising fails this case in one line; the sweep goes on
                res = self.runner.run(backend, spec.problem, spec.tactic, measure=self._timed(benchmark))
            except Exception as exc:
                from fp4bench.backends._errors import one_line

                fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {one_line(exc)}",
                     f"{type(exc).__name__} in {spec.backend}")
            res_status, reason = res.status, res.reason

        if res_status == SKIPPED:
            if base is not None:
                fail(request.node, f"MISSING NOW: measured in the baseline ({self.baseline_path}), skipped now: {reason}",
                     "MISSING NOW")
            self.skipped[fullname] = reason
            skip(spec, reason, request.node)
        if res_status == UNSUPPORTED:
            self.availability[key] = availability_value(False, reason)
            was = judging.file.baseline.availability.get(key) if judging is not None else None
            if was is not None and is_ok(was):
                fail(request.node, f"LOST TACTIC {spec.tactic.label}: initialized in the baseline, now unsupported: "
                     f"{reason}", f"LOST TACTIC {spec.tactic.label}")
            self.skipped[fullname] = f"unsupported: {reason}"
            skip(spec, f"unsupported: {reason}", request.node)
        self.availability[key] = availability_value(True)
        if spec.note:
            res.extra_info["problem_note"] = spec.note
        res.extra_info["tactic_sweep"] = spec.tactic_sweep  # what --fp4-tactics default narrows by
        res.extra_info["gpu_uuid"] = self.fingerprint.gpu_uuid  # the unit that measured it (None: a CPU)
        benchmark.extra_info.update(res.extra_info)
        benchmark.group = f"{spec.problem.kind} {spec.problem.origin.model} {spec.problem.origin.role}"
        if res_status == FAILED:
            fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {reason}",
                 reason.split(": ", 1)[0])
        assert res_status == MEASURED
        if res.timing is None:  # --benchmark-disable: correctness only
            return res
        try:  # a zero / non-finite time is a broken timer, never a fast kernel
            check_samples(list(res.timing.samples_s), "the timer")
        except ValueError as exc:
            fail(request.node, f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {exc}", "broken timer")
        record_in_benchmark(benchmark, res.timing)
        self.rows.append(result_row(spec, res))
        self.row_of[fullname] = self.rows[-1]
        self.measured[fullname] = (list(res.timing.samples_s), dict(res.extra_info))
        self.windows[fullname] = [list(res.timing.samples_s)]
        self.cases[fullname] = (backend, spec)
        if judging is not None:
            self._gate(request.node, benchmark, spec, backend, base, fullname, res, judging.policy)
        return res

    def _timed(self, benchmark) -> bool:
        """Whether this run times its cases: not with ``--benchmark-disable``. pytest-benchmark
        also switches itself off in a pytest-xdist worker (pytest-benchmark, session.py,
        ``BenchmarkSession.__init__``: ``xdist_warning`` sets ``disabled``); fp4bench times its
        cases itself, so a worker times them anyway and the controller writes the results file
        (``fp4bench.plugin.merge``)."""
        if hasattr(self.config, "workerinput"):
            opt = self.config.getoption
            return not (opt("benchmark_disable", default=False) and not opt("benchmark_enable", default=False))
        return not getattr(benchmark, "disabled", False)

    def _jit_reason(self, backend: str) -> str:
        """Skip (naming ``fp4bench prepare``) rather than JIT-compile FlashInfer for minutes in a test."""
        if self.device is None or self.device.type != "cuda":
            return ""
        import torch

        from fp4bench.backends.jit_cache import unbuilt_reason

        return unbuilt_reason(backend, tuple(torch.cuda.get_device_capability(self.device)))

    def _gate(self, node, benchmark, spec, backend, base, fullname: str, res, policy) -> None:
        """Judge the case now on its windows; while the rule wants more (``Verdict.wants_more``)
        and the per-case and session budgets allow, take another independent window: fresh
        memory, operands, prepared layouts and graph capture (``windows.take_window``), as asv and Pinpoint re-run
        only the flagged benchmarks."""
        import time

        from fp4bench.gate.judge import judge
        from fp4bench.gate.policy import is_failure
        from fp4bench.plugin.console import fail
        from fp4bench.report.tables import verdict_headline, verdict_message
        from fp4bench.run.windows import take_window

        opt = self.config.getoption
        max_windows = 1 if opt("fp4_no_confirm") else opt("fp4_max_windows")
        ws = self.windows[fullname]
        while True:
            budget_left = len(ws) < max_windows and self.window_seconds < opt("fp4_window_budget")
            v = judge(fullname, base, ws, res.extra_info, policy, budget_left=budget_left)
            if not v.wants_more:
                break
            t0 = time.monotonic()
            window, why = take_window(self.runner, backend, spec)
            self.window_seconds += time.monotonic() - t0
            if window is None:  # the case broke on a re-measure: judge what was measured
                self.window_errors.append((fullname, why))
                max_windows = len(ws)
                continue
            ws.append(window)
        self.judged[fullname] = len(ws)
        benchmark.extra_info["verdict"] = str(v.status)
        if is_failure(v, policy):
            hint = " (--fp4-allow-ambiguous to accept)" if v.undecided else ""
            fail(node, verdict_message(v) + hint, verdict_headline(v))

    # -- after the run --------------------------------------------------------------------
    def final_compare(self):
        """The whole run against the baseline, each benchmark on the windows its test judged (made
        once; needs a baseline)."""
        from fp4bench.gate.compare import compare

        if self._result is None:
            from fp4bench.gate.coverage import Scope
            from fp4bench.plugin.console import not_run
            from fp4bench.backends.registry import all_backends
            from fp4bench.run.sweep import selection_of, unnamed_backends

            # what -k/-m deselected and what the given sweep options leave out (a backend that
            # runs on this device only when named included) is not expected; the cases a stopped
            # run (-x, --maxfail, Ctrl-C) never reached are not reached
            selected = None if self.sweep is None else selection_of(
                self.sweep, lambda name: self.config.getoption("fp4_" + name, default=None),
                unnamed_backends(self.sweep, all_backends(), getattr(self.device, "type", "cpu")))
            scope = Scope(excluded=frozenset(self.deselected), selected=selected,
                          not_reached=tuple(not_run(self.config)), skipped_now=dict(self.skipped))
            current = {name: (self.windows[name][:self.judged.get(name, len(self.windows[name]))], extra)
                       for name, (_, extra) in self.measured.items()}
            if self.baselines is None or (not self.baselines.units and not self.merged):
                self._result = compare(self.baseline, current, self.availability, self.policy, self.fingerprint,
                                       current_sweep=self.measurement(), scope=scope)
            else:  # each benchmark against the file of the GPU it ran on, as its test judged it
                base, policies, notes = self.baselines.merged(self.ran_on(), self.policy)
                self._result = compare(base, current, self.availability, self.policy, self.fingerprint,
                                       current_sweep=self.measurement(), scope=scope, policies=policies)
                self._result.notes[:0] = notes
        return self._result

    def ran_on(self) -> dict[str, Any]:
        """Each measured benchmark's GPU, as the fingerprint its test was judged with."""
        import dataclasses

        out = {}
        for name, (_, extra) in self.measured.items():
            uuid = extra.get("gpu_uuid", self.fingerprint.gpu_uuid)
            fp = self.unit_fingerprints.get(uuid)
            out[name] = fp if fp is not None else dataclasses.replace(self.fingerprint, gpu_uuid=uuid)
        return out

    def check_health(self) -> None:
        """Once per session, on CUDA: ``health`` = '' (healthy) or what broke."""
        if self.health is None and self.ready and not self.merged and self.device is not None \
                and self.device.type == "cuda":
            from fp4bench.measure.health import context_health

            self.health = context_health(self.device)

    def json_section(self) -> dict[str, Any]:
        """The ``"fp4bench"`` section of the run's JSON: fingerprint, availability, sweep, and
        whether the run is clean enough to become a baseline."""
        from fp4bench.gate.baseline import make_section

        verdicts = None
        # pytest-benchmark writes its JSON before any plain pytest_sessionfinish runs: the context
        # check must be done here, or a poisoned run would be saved clean
        self.check_health()
        test_only = self.test_only()
        from fp4bench.plugin.console import not_run

        clean = (self.failed_tests == 0 and not self.interrupted and not self.health and not test_only
                 and not not_run(self.config) and not self.window_errors)
        if self.baseline is not None:
            result = self.final_compare()
            verdicts = result.counts()
            clean = clean and result.exit_code == 0  # a run with MISSING or regressed entries is not clean
        sweep = {**(self.sweep.to_dict() if self.sweep else {}), **self.measurement()}
        if test_only:
            sweep["test_only"] = test_only
        self.clean = clean
        section = make_section(self.fingerprint, self.availability, sweep, clean=clean, verdicts=verdicts,
                               windows={k: w for k, w in self.windows.items() if len(w) > 1})
        if self.health:
            section["context_health"] = self.health
        return section


def _isolated_runner(config: pytest.Config, runner: Any, device: str) -> Any:
    """An ``IsolatedRunner`` that measures exactly as ``runner`` would, in a worker process."""
    import sys
    from dataclasses import asdict

    from fp4bench.run.worker.pool import IsolatedRunner, WorkerSpec, interpreter

    opt = config.getoption
    try:
        python = interpreter(opt("fp4_python") or sys.executable)
    except ValueError as exc:
        raise pytest.UsageError(f"--fp4-python: {exc}") from None
    init = {"device": device, "plugins": list(opt("fp4_plugin")), "timing": asdict(runner.timing),
            "cold_l2": runner.cold_l2, "seed": runner.seed, "min_copies": runner.min_copies}
    timeout = opt("fp4_case_timeout")
    if not timeout > 0:
        raise pytest.UsageError(f"--fp4-case-timeout must be > 0 seconds, got {timeout}")
    return IsolatedRunner(WorkerSpec(python=python, init=init, timeout_s=timeout,
                                     start_timeout_s=max(timeout, 300.0)))


SESSION = pytest.StashKey[Fp4Session]()


def session_of(config: pytest.Config) -> Fp4Session:
    """The run's ``Fp4Session`` (made in ``pytest_configure``)."""
    return config.stash[SESSION]
