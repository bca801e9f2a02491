"""pytest plugin: a thin layer over ``sweep`` (what to run), ``case`` (check + time),
``gate`` (baseline + verdict) and ``report`` (tables).

* Tests that take the ``fp4_case`` fixture are parametrized over backend × tactic × problem.
* ``fp4_bench`` runs one case, hands its GPU-time samples to pytest-benchmark (so its stats,
  JSON and ``--benchmark-compare-fail`` are GPU seconds per call) and, when a baseline is
  active, fails the test with a one-glance message on a confirmed regression.
* Bare ``--benchmark-compare`` means "the approved baseline for this GPU model"
  (``baselines/<gpu>/approved.json``), never "the newest file".
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT_DEFAULT = "baselines"


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("fp4bench", "fp4bench: FP4 GEMM regression suite")
    g.addoption("--fp4-models", default=None, help="comma-separated models (default glm-5, or the baseline's)")
    g.addoption("--fp4-batches", default=None, help="decode batch sizes (default 1,64,512 on GPU, 1,16 on CPU)")
    g.addoption("--fp4-tp", default=None, help="tensor-parallel sizes (default 1)")
    g.addoption("--fp4-routing", default=None, help="routings: uniform, zipf:<s> (comma-separated; default uniform)")
    g.addoption("--fp4-kinds", default=None, help="problem kinds to run (default dense,grouped,moe)")
    g.addoption("--fp4-backends", default=None, help="comma-separated backend names (default: all)")
    g.addoption("--fp4-full", action="store_true", default=None, help="every tactic and the dense M sweep 1..16384")
    g.addoption("--fp4-tactics", choices=("default", "all"), default=None,
                help="default: one tactic per backend (quick); all: every tile config / tactic")
    g.addoption("--fp4-plugin", action="append", default=[], help="import a module defining BACKENDS")
    g.addoption("--fp4-device", default=None, help="torch device (default cuda:0 if present, else cpu)")
    g.addoption("--fp4-l2", choices=("cold", "hot"), default="cold", help="L2 state while timing (default cold)")
    g.addoption("--fp4-seed", type=int, default=0)
    g.addoption("--fp4-time-budget", type=float, default=None, help="seconds of sampling per case")
    g.addoption("--fp4-target-ci", type=float, default=0.005, help="stop at this relative 95%% CI of the median")
    g.addoption("--fp4-min-samples", type=int, default=10)
    g.addoption("--fp4-energy-window", type=float, default=0.0,
                help="seconds of extra replay per case to measure joules per GEMM via NVML (0: off)")
    g.addoption("--fp4-inject-slowdown", type=float, default=0.0,
                help="TEST-ONLY: add this fraction of GPU busy time per call inside the timed graph")
    g.addoption("--fp4-baselines", default=ROOT_DEFAULT, help="baseline root folder (default baselines/)")
    g.addoption("--fp4-baseline", default=None, help="explicit baseline file to gate against")
    g.addoption("--fp4-save-baseline", nargs="?", const="auto", default=None,
                help="write this run as a candidate baseline (default path baselines/<gpu>/candidates/<UTC>.json)")
    g.addoption("--fp4-floor", type=float, default=5.0, help="slowdown in %% that must fail (default 5)")
    g.addoption("--fp4-drift", type=float, default=2.0,
                help="run-to-run shift in %% of an unchanged stack; the guard band below the floor (default 2)")
    g.addoption("--fp4-alpha", type=float, default=0.05, help="family-wise significance level")
    g.addoption("--fp4-allow-missing", action="store_true", help="baseline benchmarks not run are not a failure")
    g.addoption("--fp4-allow-ambiguous", action="store_true",
                help="INVALID verdicts and too-few-samples cases do not fail the run (by default they do)")
    g.addoption("--fp4-fail-on-ambiguous", action="store_true", help="every AMBIGUOUS verdict fails the run too")
    g.addoption("--fp4-no-confirm", action="store_true", help="fail on the first measurement (no re-measure)")
    g.addoption("--fp4-isolate", action="store_true",
                help="run each case in a worker process: a crash, hang or poisoned CUDA context costs one case")
    g.addoption("--fp4-case-timeout", type=float, default=900.0,
                help="with --fp4-isolate: seconds a case may take (JIT build included) before it is a hang")
    g.addoption("--fp4-python", default=None, help="with --fp4-isolate: the worker's interpreter or venv")
    g.addoption("--fp4-log", default=None,
                help="append every finished case to this JSON-lines file as it finishes (default with "
                     "--fp4-save-baseline: next to the JSON, *.lines.jsonl)")
    g.addoption("--fp4-same-unit", action="store_true",
                help="refuse a baseline recorded on another physical GPU (driver-upgrade sequence)")
    g.addoption("--fp4-verdict-json", default=None, metavar="PATH", help="write the gate's verdict as JSON")
    g.addoption("--fp4-csv", default=None, metavar="PATH", help="write one CSV line per measured case")
    from fp4bench import plugin_ab, plugin_compat, plugin_console

    plugin_console.addoption(g)
    plugin_compat.addoption(g)
    plugin_ab.addoption(g)


@dataclass
class Fp4Session:
    """Per-run state: device, runner, the active baseline and what was seen."""

    config: pytest.Config
    device: Any = None
    runner: Any = None
    baseline: Any = None
    baseline_path: Path | None = None
    fingerprint: Any = None
    fingerprint_changes: list = field(default_factory=list)
    policy: Any = None
    sweep: Any = None
    availability: dict[str, str] = field(default_factory=dict)
    measured: dict[str, tuple[list[float], dict]] = field(default_factory=dict)
    rows: list[dict] = field(default_factory=list)
    deselected: set[str] = field(default_factory=set)
    failed_tests: int = 0
    usage_error: str | None = None  # a bad --fp4-* value found while parametrizing
    health: str | None = None  # CUDA context check after the run: "" healthy, else what broke
    interrupted: bool = False  # a cut-short run is never a clean baseline candidate
    ready: bool = False

    def setup(self) -> None:
        """Lazy: only a session that collects fp4 cases touches torch.cuda and the baseline."""
        if self.ready:
            return
        self.ready = True
        import torch

        from fp4bench.backends import registry
        from fp4bench.case import CaseRunner
        from fp4bench.env import collect_fingerprint, parse_device
        from fp4bench.gate.verdict import Policy
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
        budget = opt("fp4_time_budget")
        if budget is None:
            budget = 1.0 if self.device.type == "cuda" else 0.3
        timing = TimingConfig(mode="graph" if self.device.type == "cuda" else "cpu",
                              time_budget_s=budget, target_rel_ci=opt("fp4_target_ci"),
                              min_samples=opt("fp4_min_samples"), max_samples=max(300, opt("fp4_min_samples")),
                              inject_slowdown=opt("fp4_inject_slowdown"),
                              energy_window_s=opt("fp4_energy_window"))
        gpu_peaks = peaks.peak_for(self.fingerprint.gpu_name) if self.device.type == "cuda" else None
        self.runner = CaseRunner(self.device, timing, cold_l2=opt("fp4_l2") == "cold", seed=opt("fp4_seed"),
                                 peaks=gpu_peaks)
        if opt("fp4_isolate"):
            from fp4bench.plugin_runlog import isolated_runner

            self.runner = isolated_runner(self.config, self.runner, str(self.device))
        self.policy = Policy(floor=opt("fp4_floor") / 100.0, drift=opt("fp4_drift") / 100.0, alpha=opt("fp4_alpha"),
                             allow_missing=opt("fp4_allow_missing"), allow_ambiguous=opt("fp4_allow_ambiguous"),
                             fail_on_ambiguous=opt("fp4_fail_on_ambiguous"))

    def measurement(self) -> dict[str, Any]:
        """How this run takes its times, recorded in the saved ``sweep`` and checked against the
        baseline's: effective L2 state (a CPU run is always cache-hot), timer, injected slowdown."""
        cold = self.runner.cold_l2 and self.device.type == "cuda"
        return {"l2": "cold" if cold else "hot", "timer": self.runner.timing.mode,
                "inject_slowdown": self.runner.timing.inject_slowdown}

    def sweep_options(self):
        """CLI values win; then the active baseline's sweep (a compare run measures what the
        baseline measured, so nothing is MISSING by accident); then the defaults."""
        from fp4bench.sweep import SweepOptions
        from fp4bench.workloads import parse_ints, parse_models, parse_routings, parse_tps

        opt = self.config.getoption
        base = dict(self.baseline.sweep) if self.baseline is not None and self.baseline.sweep else {}

        def pick(option: str, key: str, default):
            v = opt(option)
            if v is not None:
                return v
            b = base.get(key)
            if isinstance(b, list):
                return ",".join(str(x) for x in b)
            return b if b is not None else default

        models = parse_models(pick("fp4_models", "models", "glm-5"))
        batches = pick("fp4_batches", "batches", "1,64,512" if self.device.type == "cuda" else "1,16")
        backends = opt("fp4_backends") or (",".join(base["backends"]) if base.get("backends") else None)
        kinds = tuple(k.strip() for k in pick("fp4_kinds", "kinds", "dense,grouped,moe").split(",") if k.strip())
        bad = [k for k in kinds if k not in ("dense", "grouped", "moe")]
        if bad:
            raise pytest.UsageError(f"--fp4-kinds: unknown kind(s) {bad}; use dense, grouped, moe")
        if backends:
            from fp4bench.backends.registry import get_backend

            for b in backends.split(","):
                get_backend(b.strip())  # raises ValueError naming the unknown backend
        full = bool(pick("fp4_full", "full", False))
        tactics = pick("fp4_tactics", "tactics", "all" if full else "default")
        routings = pick("fp4_routing", "routings", "uniform")
        parse_routings(routings)  # a bad spec is a usage error now, not a collection traceback
        return SweepOptions(models=tuple(m.name for m in models), batches=parse_ints(batches, "batch"),
                            tps=parse_tps(str(pick("fp4_tp", "tps", "1")), models),
                            routings=tuple(r.strip() for r in routings.split(",") if r.strip()),
                            kinds=kinds, backends=tuple(b.strip() for b in backends.split(",")) if backends else None,
                            full=full, tactics=tactics, seed=opt("fp4_seed"))


def _state(config: pytest.Config) -> Fp4Session:
    return config.stash[_KEY]


_KEY = pytest.StashKey[Fp4Session]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before any CUDA allocation: a sweep allocates and frees 10+ GB operand sets per problem;
    # with fixed segments an H200 run reported 113 GiB "reserved but unallocated" and went OOM.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    config.stash[_KEY] = st = Fp4Session(config)
    _CONFIGS.append(config)
    from fp4bench import plugin_ab, plugin_compat, plugin_console, plugin_runlog

    config.pluginmanager.register(plugin_runlog, "fp4bench.plugin_runlog")
    config.pluginmanager.register(plugin_console.ConsolePlugin(config), "fp4bench.plugin_console")
    config.pluginmanager.register(plugin_compat.CompatPlugin(config, getattr(config, "_parser", None)),
                                  "fp4bench.plugin_compat")
    config.pluginmanager.register(plugin_ab.AbPlugin(config), "fp4bench.plugin_ab")
    config.addinivalue_line("markers", "fp4(kind): an fp4bench benchmark of problems of this kind")
    if hasattr(config.option, "benchmark_save_data"):
        config.option.benchmark_save_data = True  # --benchmark-autosave files carry raw samples: gateable
    compare = config.getoption("benchmark_compare", default=None)
    explicit = config.getoption("fp4_baseline")
    # pytest-xdist workers neither write the JSON nor gate; the controller does
    save = None if hasattr(config, "workerinput") else _save_option(config)
    try:
        if compare and compare is not True and not explicit:
            explicit = str(_compare_target(config, str(compare)))  # --benchmark-compare=<id|path> gates too
        if compare or explicit:
            _activate_baseline(st, explicit)
        if save:
            _route_json(st, save)
    except (ValueError, RuntimeError) as exc:  # a bad --fp4-* value met while setting up
        raise pytest.UsageError(f"fp4bench: {exc}") from None


def _save_option(config: pytest.Config) -> str | None:
    """``--fp4-save-baseline`` takes an optional value, so in ``pytest --fp4-save-baseline bench``
    argparse hands it the test path. A value that does not end in ``.json`` but names an
    existing path is given back to pytest as a test path, and the candidate goes to its
    default place; any other non-``.json`` value is a usage error."""
    save = config.getoption("fp4_save_baseline")
    if not save or save == "auto" or save.endswith(".json"):
        return save
    if not Path(save).exists():
        raise pytest.UsageError(f"fp4bench: --fp4-save-baseline {save}: a result file name must end in .json "
                                "(write --fp4-save-baseline=PATH.json, or the bare option for the default place)")
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        config.args.append(save)
    else:
        config.args, config.args_source = [save], pytest.Config.ArgsSource.ARGS
    return "auto"


def _activate_baseline(st: Fp4Session, explicit: str | None) -> None:
    """Resolve and validate the baseline before any test runs (wrong GPU = usage error)."""
    from fp4bench.gate.baseline import (BaselineError, check_compatible, check_same_measurement, load_baseline,
                                        select_baseline)
    from fp4bench.gate.verdict import for_changes

    st.setup()
    try:
        path = Path(explicit) if explicit else select_baseline(st.config.getoption("fp4_baselines"), st.fingerprint)
        st.baseline = load_baseline(path)
        st.fingerprint_changes = check_compatible(st.baseline.fingerprint, st.fingerprint)
        check_same_measurement(st.baseline.sweep, st.measurement())
        if st.config.getoption("fp4_same_unit"):
            from fp4bench.gate.unit import require_same_unit

            require_same_unit(st.baseline.fingerprint, st.fingerprint)
        st.policy = for_changes(st.policy, st.fingerprint_changes, st.baseline.fingerprint, st.fingerprint)
    except BaselineError as exc:
        raise pytest.UsageError(f"fp4bench baseline: {exc}") from None
    st.baseline_path = path
    if st.config.getoption("benchmark_compare", default=None) is True:
        # pytest-benchmark's own compare (and --benchmark-compare-fail) then reads the same file
        st.config.option.benchmark_compare = str(path)


def _route_json(st: Fp4Session, save: str) -> None:
    """--fp4-save-baseline: pytest-benchmark writes its JSON (raw samples) where we say."""
    from fp4bench.gate.baseline import candidate_path, partial_path, reserve_path

    st.setup()
    # the final name is reserved now (unique, never an existing file); pytest-benchmark writes
    # beside it and pytest_sessionfinish moves the finished file onto it in one os.replace
    path = Path(candidate_path(st.config.getoption("fp4_baselines"), st.fingerprint.gpu_slug)) \
        if save == "auto" else reserve_path(save)
    import pytest_benchmark

    part = partial_path(path)
    major_minor = tuple(int(x) for x in pytest_benchmark.__version__.split(".")[:2])
    if st.config.getoption("benchmark_json", default=None) is None:
        st.config.option.benchmark_json = part if major_minor >= (5, 3) else open(part, "wb")
    else:  # the user's --benchmark-json stays; the candidate is written beside it (update_json hook)
        st.config.stash[_COPY_TO] = path
    st.config.stash[_JSON_PATH] = path


_COPY_TO = pytest.StashKey[Path]()


def _compare_target(config: pytest.Config, value: str) -> Path:
    """A file path, or a pytest-benchmark run id/number in --benchmark-storage (as its own compare)."""
    if Path(value).is_file():
        return Path(value)
    storage = str(config.getoption("benchmark_storage", default="file://./.benchmarks"))
    root = Path(storage[len("file://"):] if storage.startswith("file://") else storage)
    key = value.zfill(4) if value.isdigit() else value
    hits = sorted(p for p in root.glob("*/*.json") if p.name.startswith(key) or f"_{key}" in p.name)
    if len(hits) != 1:
        found = "none" if not hits else ", ".join(str(h) for h in hits[:5])
        raise pytest.UsageError(f"fp4bench: --benchmark-compare={value}: not a file, and run ids in {root} "
                                f"matching it: {found} (need exactly one)")
    return hits[0]


_JSON_PATH = pytest.StashKey[Path]()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fp4_case" not in metafunc.fixturenames:
        return
    st = _state(metafunc.config)
    marker = metafunc.definition.get_closest_marker("fp4")
    kind = marker.kwargs.get("kind") if marker else None
    from fp4bench.backends.registry import all_backends
    from fp4bench.sweep import cases_for

    try:
        st.setup()  # loads --fp4-plugin modules
        st.sweep = opts = st.sweep_options()
    except (ValueError, pytest.UsageError) as exc:
        # raised here, pytest would report a collection error with a traceback (exit 2); a bad
        # option value is a usage error (one line, exit 4): raised once collection is done
        st.usage_error = f"fp4bench: {exc}"
        metafunc.parametrize("fp4_case", [], ids=[])
        return
    if kind and kind not in opts.kinds:
        specs = []
    else:
        try:
            specs = [c for c in cases_for(opts, all_backends(), st.device) if kind is None or c.problem.kind == kind]
        except ValueError as exc:
            st.usage_error = f"fp4bench: {exc}"
            metafunc.parametrize("fp4_case", [], ids=[])
            return
    if not specs:  # one skip that says why, instead of pytest's "got empty parameter set"
        from fp4bench.plugin_console import empty_reason, parametrize_empty

        return parametrize_empty(metafunc, empty_reason(kind, opts, all_backends()))
    metafunc.parametrize("fp4_case", specs, ids=[c.id for c in specs])


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    st = _state(config)
    if st.usage_error:  # raised here, after collection, so it is a one-line usage error
        raise pytest.UsageError(st.usage_error)


def pytest_deselected(items: list) -> None:
    if items:
        _state(items[0].config).deselected.update(i.nodeid for i in items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    if outcome.get_result().failed:
        _state(item.config).failed_tests += 1


def pytest_keyboard_interrupt(excinfo) -> None:
    if _CONFIGS:
        _state(_CONFIGS[-1]).interrupted = True


_CONFIGS: list[pytest.Config] = []


@pytest.fixture
def fp4_session(request: pytest.FixtureRequest) -> Fp4Session:
    st = _state(request.config)
    st.setup()
    return st


@pytest.fixture
def fp4_bench(request: pytest.FixtureRequest, benchmark, fp4_session: Fp4Session):
    """Run the parametrized case: skip / fail / record, then gate against the baseline."""

    def run(spec) -> Any:
        return _run_case(request, benchmark, fp4_session, spec)

    return run


def _baseline_record(st: Fp4Session, fullname: str):
    return st.baseline.benchmarks.get(fullname) if st.baseline is not None else None


def _run_case(request: pytest.FixtureRequest, benchmark, st: Fp4Session, spec) -> Any:
    from fp4bench.backends.registry import get_backend
    from fp4bench.case import FAILED, MEASURED, SKIPPED, UNSUPPORTED
    from fp4bench.gate.baseline import availability_key, availability_value, check_samples, is_ok
    from fp4bench.measure.timing import record_in_benchmark

    fullname = benchmark.fullname if hasattr(benchmark, "fullname") else request.node.nodeid
    # fp4bench owns this fixture whatever the outcome (skip, failed check, --benchmark-disable):
    # without this pytest-benchmark warns "Benchmark fixture was not used at all" on those tests
    benchmark._mode = "fp4bench"
    base = _baseline_record(st, fullname)
    backend = get_backend(spec.backend)
    key = availability_key(spec.backend, spec.problem.id, spec.tactic.label)
    jit = _jit_reason(st, spec.backend)
    if spec.skip_reason or jit:
        res_status, reason = SKIPPED, spec.skip_reason or jit
        res = None
    else:
        res = st.runner.run(backend, spec.problem, spec.tactic, measure=not getattr(benchmark, "disabled", False))
        res_status, reason = res.status, res.reason
    from fp4bench.plugin_console import skip

    if res_status == SKIPPED:
        if base is not None:
            pytest.fail(f"MISSING NOW: measured in the baseline ({st.baseline_path}), skipped now: {reason}",
                        pytrace=False)
        skip(spec, reason)
    if res_status == UNSUPPORTED:
        st.availability[key] = availability_value(False, reason)
        was = st.baseline.availability.get(key) if st.baseline is not None else None
        if was is not None and is_ok(was):
            pytest.fail(f"LOST TACTIC {spec.tactic.label}: initialized in the baseline, now unsupported: {reason}",
                        pytrace=False)
        skip(spec, f"unsupported: {reason}")
    st.availability[key] = availability_value(True)
    if spec.note:
        res.extra_info["problem_note"] = spec.note
    benchmark.extra_info.update(res.extra_info)
    benchmark.group = f"{spec.problem.kind} {spec.problem.origin.model} {spec.problem.origin.role}"
    if res_status == FAILED:
        pytest.fail(f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {reason}", pytrace=False)
    assert res_status == MEASURED
    if res.timing is None:  # --benchmark-disable: correctness only
        return res
    try:  # a zero / non-finite time is a broken timer, never a fast kernel
        check_samples(list(res.timing.samples_s), "the timer")
    except ValueError as exc:
        pytest.fail(f"{spec.backend} [{spec.tactic.label}] on {spec.problem.id}: {exc}", pytrace=False)
    record_in_benchmark(benchmark, res.timing)
    st.rows.append(_row(spec, res))
    st.measured[fullname] = (list(res.timing.samples_s), dict(res.extra_info))
    if st.baseline is not None:
        _gate(request, benchmark, st, spec, backend, base, fullname, res)
    return res


def _jit_reason(st: Fp4Session, backend: str) -> str:
    """Skip (naming ``fp4bench prepare``) rather than JIT-compile FlashInfer for minutes in a test."""
    if st.device is None or st.device.type != "cuda":
        return ""
    import torch

    from fp4bench.jit_cache import unbuilt_reason

    return unbuilt_reason(backend, tuple(torch.cuda.get_device_capability(st.device)))


def _row(spec, res) -> dict:
    """One line of the end-of-run table: size -> time, TFLOP/s, % of peak, notes."""
    x = res.extra_info
    p = spec.problem
    size = f"M{p.m} N{p.n} K{p.k}" if p.kind == "dense" else (
        f"{p.total_rows} rows/{p.active_experts} experts N{p.n} K{p.k}" if p.kind == "grouped"
        else f"{p.num_tokens} tok x top{p.top_k} H{p.hidden} I{p.inter}")
    notes = [x.get("timer", ""), x.get("l2", "")]
    if x.get("throttled"):
        notes.append("THROTTLED " + ",".join(x.get("throttle_reasons") or []))
    if x.get("timing_note"):
        notes.append(x["timing_note"])
    return {"backend": spec.backend, "tactic": spec.tactic.label, "problem": f"{p.origin.model} b{p.origin.batch} {p.origin.role}",
            "size": size, "median_s": res.timing.median_s, "tflops": x.get("tflops"),
            "gbps": x["tbps"] * 1e3 if x.get("tbps") is not None else None, "pct_peak": x.get("pct_peak_compute"),
            "pct_peak_bw": x.get("pct_peak_bandwidth"), "noise": x.get("rel_ci95"),
            "sqnr_db": x.get("sqnr_db"), "notes": "; ".join(n for n in notes if n)}


def _gate(request, benchmark, st: Fp4Session, spec, backend, base, fullname: str, res) -> None:
    from fp4bench.gate.verdict import Status, is_failure, judge

    m = max(1, len(st.baseline.benchmarks))
    v = judge(fullname, base, res.timing.samples_s, res.extra_info, st.policy, m)
    if v.status is Status.FAIL and not st.config.getoption("fp4_no_confirm"):
        # confirm a suspect with fresh samples before failing (re-run only the flagged
        # benchmarks, as asv and Pinpoint do); fresh
        # buffers too, so an unlucky allocation is not measured twice
        st.runner.drop_prepared()
        again = st.runner.run(backend, spec.problem, spec.tactic)
        if again.timing is not None:
            v2 = judge(fullname, base, again.timing.samples_s, again.extra_info, st.policy, m)
            if v2.status is not Status.FAIL:
                v = v2
                st.measured[fullname] = (list(again.timing.samples_s), dict(again.extra_info))
                # the JSON (a candidate baseline) must hold the samples that were judged, not
                # the suspect first measurement
                from fp4bench.measure.timing import record_in_benchmark

                benchmark.extra_info.update(again.extra_info)
                record_in_benchmark(benchmark, again.timing)
                st.rows[-1] = _row(spec, again)
    benchmark.extra_info["verdict"] = str(v.status)
    if is_failure(v, st.policy):
        hint = " (--fp4-allow-ambiguous to accept)" if v.undecided else ""
        pytest.fail(v.message() + hint, pytrace=False)


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    st = _state(config)
    if not st.ready:
        return
    from fp4bench.gate.baseline import make_section

    verdicts = None
    # pytest-benchmark writes this JSON before any plain pytest_sessionfinish runs: the context
    # check must be done here, or a poisoned run would be saved clean
    _check_health(st)
    measurement = st.measurement()
    from fp4bench.plugin_console import not_run

    clean = (st.failed_tests == 0 and not st.interrupted and not st.health
             and not measurement["inject_slowdown"] and not not_run(config))
    if st.baseline is not None:
        result = _final_compare(st)
        verdicts = result.summary()
        clean = clean and result.exit_code == 0  # a run with MISSING or regressed entries is not clean
    sweep = {**(st.sweep.to_dict() if st.sweep else {}), **measurement}
    output_json["fp4bench"] = make_section(st.fingerprint, st.availability, sweep, clean=clean, verdicts=verdicts)
    if st.health:
        output_json["fp4bench"]["context_health"] = st.health
    copy_to = config.stash.get(_COPY_TO, None)
    if copy_to is not None:
        from fp4bench.gate.baseline import write_baseline

        write_baseline(output_json, copy_to)


def _final_compare(st: Fp4Session):
    from fp4bench.gate.verdict import compare

    if getattr(st, "_result", None) is None:
        current = dict(st.measured)
        base = st.baseline
        # baseline entries deselected with -k/-m are not "missing", nor are the cases a
        # stopped run (-x, --maxfail, Ctrl-C) never reached: those are listed as not run
        from fp4bench.plugin_console import not_run

        skipped = st.deselected | set(not_run(st.config))
        if skipped:
            base = _without(base, skipped)
        st._result = compare(base, current, st.availability, st.policy, st.fingerprint)
    return st._result


def _without(baseline, nodeids: set[str]):
    import dataclasses

    keep = {k: v for k, v in baseline.benchmarks.items() if k not in nodeids}
    return dataclasses.replace(baseline, benchmarks=keep)


def _check_health(st: Fp4Session) -> None:
    """Once per session, on CUDA: ``st.health`` = '' (healthy) or what broke."""
    if st.health is None and st.ready and st.device is not None and st.device.type == "cuda":
        from fp4bench.measure.health import context_health

        st.health = context_health(st.device)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    st = _state(session.config)
    _check_health(st)
    if st.health:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = session.config.stash.get(_JSON_PATH, None)
    if path is not None:
        from fp4bench.gate.baseline import publish

        if not publish(path):
            session.config.stash[_JSON_PATH] = None  # nothing measured: nothing written
    if st.baseline is None or not st.ready:
        return
    result = _final_compare(st)
    from fp4bench.plugin_console import not_run

    incomplete = bool(not_run(session.config)) and not st.policy.allow_missing
    if (result.exit_code != 0 or incomplete) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    st = _state(config)
    if not st.ready or (not st.rows and st.baseline is None):
        return
    from fp4bench.plugin_console import results_lines, stopped_lines
    from fp4bench.report import verdict_table

    tr = terminalreporter
    if st.health is not None:
        tr.write_line("fp4bench: CUDA context healthy after all cases and skips (torch matmul checked)"
                      if not st.health else f"fp4bench: CUDA CONTEXT BROKEN after the run: {st.health}")
    if st.rows:
        tr.section("fp4bench results (GPU time per call)" if st.device.type == "cuda" else "fp4bench results (CPU)")
        tr.write_line("\n".join(results_lines(st.rows)))
    if st.baseline is not None:
        tr.section(f"fp4bench verdict vs {st.baseline_path}")
        tr.write_line(verdict_table(_final_compare(st)))
    for line in stopped_lines(config, list(st.baseline.benchmarks) if st.baseline is not None else [],
                              gating=st.baseline is not None):
        tr.write_line(line)
    from fp4bench.plugin_outputs import write_outputs

    write_outputs(st, _final_compare(st) if st.baseline is not None else None, tr.write_line)
    path = config.stash.get(_JSON_PATH, None)
    if path is not None:
        if config.getoption("fp4_inject_slowdown"):
            tr.write_line("fp4bench: this run injected a test-only slowdown: it is recorded and can never be approved")
        tr.write_line(f"candidate baseline written to {path}; approve it with: fp4bench baseline approve {path}")
