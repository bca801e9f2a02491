"""pytest plugin: options and hooks over ``session`` (one run's state; runs and gates each
case), ``sweep`` (what to run), ``gate`` (baseline + verdict) and ``report`` (tables).

* Tests that take the ``fp4_case`` fixture are parametrized over backend × tactic × problem.
* ``fp4_bench`` runs one case, hands its GPU-time samples to pytest-benchmark (so its stats,
  JSON and ``--benchmark-compare-fail`` are GPU seconds per call) and, when a baseline is
  active, fails the test with a one-glance message on a confirmed regression.
* Bare ``--benchmark-compare`` means "the approved baseline for this GPU model"
  (``baselines/<gpu>/approved.json``), never "the newest file".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from fp4bench.options.adapters import add_pytest_options
from fp4bench.plugin.session import SESSION, Fp4Session
from fp4bench.plugin.session import session_of as _state
from fp4bench.plugin import benchmark as plugin_benchmark


def pytest_addoption(parser: pytest.Parser) -> None:
    add_pytest_options(parser.getgroup("fp4bench", "fp4bench: FP4 GEMM regression suite"))


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Before any CUDA allocation: a sweep allocates and frees 10+ GB operand sets per problem;
    # with fixed segments an H200 run reported 113 GiB "reserved but unallocated" and went OOM.
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    from fp4bench.plugin import ab as plugin_ab
    from fp4bench.plugin import compat as plugin_compat
    from fp4bench.plugin import console as plugin_console
    from fp4bench.plugin import runlog as plugin_runlog
    from fp4bench.plugin import xdist as plugin_xdist

    config.stash[SESSION] = st = Fp4Session(config)
    _CONFIGS.append(config)
    from fp4bench.plugin import signals

    signals.install(config)  # SIGTERM ends the run as Ctrl-C does: interrupted, its records kept
    # -n over the GPUs: pin a worker before its CUDA starts, or make this process the controller
    # that merges the workers' cases (before xdist starts any worker: pytest_sessionstart)
    plugin_xdist.configure(config)

    config.pluginmanager.register(plugin_runlog, "fp4bench.plugin.runlog")
    config.pluginmanager.register(plugin_console.ConsolePlugin(config), "fp4bench.plugin.console")
    config.pluginmanager.register(plugin_compat.CompatPlugin(config, getattr(config, "_parser", None)),
                                  "fp4bench.plugin.compat")
    config.pluginmanager.register(plugin_ab.AbPlugin(config), "fp4bench.plugin.ab")
    config.addinivalue_line("markers", "fp4(kind): an fp4bench benchmark of problems of this kind")
    plugin_benchmark.keep_raw_samples(config)  # --benchmark-autosave files carry raw samples: gateable
    if config.getoption("fp4_python") and not config.getoption("fp4_isolate"):
        raise pytest.UsageError("fp4bench: --fp4-python is the interpreter of --fp4-isolate's workers: "
                                "it needs --fp4-isolate")
    compare = config.getoption("benchmark_compare", default=None)
    explicit = config.getoption("fp4_baseline_file")
    for flag, value in (("--fp4-baseline-file", explicit), ("--benchmark-compare", compare)):
        if isinstance(value, str) and not value.strip():  # "" would run ungated and pass
            raise pytest.UsageError(f"fp4bench: {flag} {value!r}: empty baseline path (give a file, or leave "
                                    "the option out to run ungated)")
    # pytest-xdist workers neither write the results file nor gate the run; the controller does
    save = None if hasattr(config, "workerinput") else _save_option(config)
    try:
        if compare and compare is not True and not explicit:
            explicit = str(_compare_target(config, str(compare)))  # --benchmark-compare=<id|path> gates too
        if compare or explicit:
            try:
                st.activate_baseline(explicit)
            except pytest.UsageError as exc:  # a worker's: reported by its controller (plugin_xdist)
                if not plugin_xdist.defer(config, str(exc)):
                    raise
        if save:
            st.route_json(save)
        if not hasattr(config, "workerinput"):  # every output path, before any case runs
            from fp4bench.plugin.outputs import check_outputs
            from fp4bench.plugin.runlog import log_path, open_log

            check_outputs(config, st, log_path(config))
            open_log(config)
    except (ValueError, RuntimeError) as exc:  # a bad --fp4-* value met while setting up
        from fp4bench.outputs import remove_quietly

        if st.json_path is not None and st.json_path.is_file() and st.json_path.stat().st_size == 0:
            remove_quietly(st.json_path)  # the reserved candidate name: the run never starts
        raise pytest.UsageError(f"fp4bench: {exc}") from None
    plugin_xdist.quiet_worker(config)


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
                                "(--fp4-save-baseline=PATH.json, or the bare option: the default place)")
    if config.args_source is pytest.Config.ArgsSource.ARGS:
        config.args.append(save)
    else:
        config.args, config.args_source = [save], pytest.Config.ArgsSource.ARGS
    return "auto"


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


def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession: Any, machine_info: dict,
                                          compared_benchmark: dict) -> None:
    """Called just before pytest-benchmark logs the file it compares against: that line names
    the user's file, not fp4bench's temporary copy (``plugin_benchmark.user_paths``)."""
    plugin_benchmark.user_paths(config, benchmarksession)


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` over benchmark cases: one worker per visible GPU (``plugin_xdist``)."""
    from fp4bench.plugin.xdist import auto_workers

    return auto_workers(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "fp4_case" not in metafunc.fixturenames:
        return
    from fp4bench.plugin import xdist as plugin_xdist

    st = _state(metafunc.config)
    if st.usage_error:  # an xdist worker's, met while configuring
        plugin_xdist.fail_worker_collection(metafunc.config)
    marker = metafunc.definition.get_closest_marker("fp4")
    kind = marker.kwargs.get("kind") if marker else None
    from fp4bench.backends.registry import all_backends
    from fp4bench.run.sweep import cases_for

    try:
        st.setup()  # loads --fp4-plugin modules
        plugin_xdist.check_worker_gpu(metafunc.config)
        st.sweep = opts = st.sweep_options()
    except (ValueError, pytest.UsageError) as exc:
        # raised here, pytest would report a collection error with a traceback (exit 2); a bad
        # option value is a usage error (one line, exit 4): raised once collection is done
        st.usage_error = f"fp4bench: {exc}"
        plugin_xdist.fail_worker_collection(metafunc.config)
        metafunc.parametrize("fp4_case", [], ids=[])
        return
    if kind and kind not in opts.kinds:
        specs = []
    else:
        try:
            specs = [c for c in cases_for(opts, all_backends(), st.device) if kind is None or c.problem.kind == kind]
        except ValueError as exc:
            st.usage_error = f"fp4bench: {exc}"
            plugin_xdist.fail_worker_collection(metafunc.config)
            metafunc.parametrize("fp4_case", [], ids=[])
            return
    if not specs:  # one skip that says why, instead of pytest's "got empty parameter set"
        from fp4bench.plugin.console import empty_reason, parametrize_empty

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
def pytest_runtestloop(session: pytest.Session):
    """After the tests (window 1 of every case): passes 2..N of ``--fp4-windows`` over the sweep."""
    yield
    st = _state(session.config)
    if not st.ready or not st.cases:  # an xdist worker takes the windows of its own cases
        return
    from fp4bench.run.windows import extra_passes, window_count

    n = window_count(session.config)
    if n > 1:
        from fp4bench import clock

        console = session.config.pluginmanager.get_plugin("fp4bench.plugin.console")
        started = clock.now()
        extra_passes(st, n, lambda: st.interrupted or bool(session.shouldstop or session.shouldfail),
                     lambda done, total: console.windows_progress(done, total, started) if console else None)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    if outcome.get_result().failed:
        _state(item.config).failed_tests += 1


def pytest_sessionstart(session: pytest.Session) -> None:
    plugin_benchmark.user_paths(session.config)  # "Wrote benchmark data in: <the user's file>"
    st = _state(session.config)
    if st.json_path is not None:  # pytest-benchmark writes the candidate itself: a failed write is ours to clean
        plugin_benchmark.guard_save(session.config, lambda exc: _save_failed(st, exc))


def _save_failed(st: Fp4Session, exc: OSError) -> None:
    """pytest-benchmark could not write the candidate: remove what it left and the reserved name."""
    from fp4bench.gate.store import partial_path
    from fp4bench.outputs import remove_quietly

    remove_quietly(partial_path(st.json_path), st.json_path)
    st.candidate_failed = True
    st.save_error = (f"fp4bench: --fp4-save-baseline: cannot write {st.json_path}: {exc.strerror or exc}; no "
                     "candidate written (the line log keeps the measured cases)")


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
        return fp4_session.run_case(request, benchmark, spec)

    return run


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict) -> None:
    st = _state(config)
    if not st.ready:
        return
    output_json["fp4bench"] = st.json_section()
    from fp4bench.plugin.finish import annotate_entries

    annotate_entries(st, output_json.get("benchmarks", []))
    plugin_benchmark.plain_entries(output_json)  # JSON data, not pytest-benchmark's "UNSERIALIZABLE[...]"
    if st.copy_to is not None:
        from fp4bench.gate.baseline import write_baseline

        write_baseline(output_json, st.copy_to)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    st = _state(session.config)
    st.check_health()
    if st.health:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if st.json_path is not None:
        from fp4bench.gate.store import publish

        if st.candidate_failed:  # pytest-benchmark's write failed (_save_failed): incomplete
            st.json_path = None
            if session.exitstatus == 0:
                session.exitstatus = 3
        elif not publish(st.json_path):
            if session.testscollected:  # cases ran, yet pytest-benchmark wrote nothing (it was disabled)
                st.save_error = (f"fp4bench: --fp4-save-baseline: {session.testscollected} cases were collected but "
                                 "pytest-benchmark wrote no results file (--benchmark-disable, or pytest-benchmark "
                                 "disabled itself, e.g. inside a pytest-xdist worker): no candidate written")
                if session.exitstatus == 0:
                    session.exitstatus = 3  # incomplete: what was asked for was not written
            st.json_path = None  # nothing measured: nothing written
    if st.baseline is None or not st.ready or st.usage_error or hasattr(session.config, "workerinput"):
        return  # a run that never started judges nothing; an xdist worker's controller judges the run
    result = st.final_compare()
    from fp4bench.gate.coverage import EXIT_INCOMPLETE, EXIT_REGRESSION

    # the gate's decision where pytest saw nothing wrong (or, with -k, nothing to run): a
    # regression exits 1, a comparison that judged nothing or less than expected 3
    if result.exit_code == EXIT_REGRESSION and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif result.exit_code == EXIT_INCOMPLETE and session.exitstatus in (0, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = EXIT_INCOMPLETE


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    st = _state(config)
    if hasattr(config, "workerinput"):  # an xdist worker: its controller reports the run
        return
    if st.save_error:
        _writer(terminalreporter)(st.save_error)
    if not st.ready or st.usage_error or (not st.rows and not st.checks and not st.skipped and st.baseline is None):
        return
    from fp4bench.plugin.console import checks_lines, results_lines, skipped_lines, stopped_lines
    from fp4bench.report.tables import verdict_table

    tr = terminalreporter
    if st.health is not None:
        tr.write_line("fp4bench: CUDA context healthy after all cases and skips (torch matmul checked)"
                      if not st.health else f"fp4bench: CUDA CONTEXT BROKEN after the run: {st.health}")
    if st.rows:
        tr.section("fp4bench results (GPU time per call)" if st.device.type == "cuda" else "fp4bench results (CPU)")
        from fp4bench.plugin.finish import headline_rows

        tr.write_line("\n".join(results_lines(headline_rows(st))))
    elif st.checks:  # nothing timed (--benchmark-disable): what was checked
        tr.section("fp4bench checks (GPU)" if st.device.type == "cuda" else "fp4bench checks (CPU)")
        tr.write_line("\n".join(checks_lines(list(st.checks.values()))))
    skipped = skipped_lines(st.skipped, st.skipped_backend, list(st.checks.values()))
    if skipped:
        tr.section("fp4bench skipped backends (-rs: every case)")
        tr.write_line("\n".join(skipped))
    if st.baseline is not None:
        tr.section(f"fp4bench verdict vs {st.baseline_path}")
        tr.write_line(verdict_table(st.final_compare()))
    for line in stopped_lines(config, list(st.baseline.benchmarks) if st.baseline is not None else [],
                              gating=st.baseline is not None):
        tr.write_line(line)
    say = _writer(tr)
    for name, why in st.window_errors:
        say(f"fp4bench: a further window of {name} could not be measured ({why}); the run is not clean")
    from fp4bench.plugin.outputs import write_outputs

    write_outputs(st, st.final_compare() if st.baseline is not None else None, tr.write_line)
    path = st.json_path
    if path is not None:
        if st.test_only():
            say(f"fp4bench: this run measured test-only backends ({', '.join(st.test_only())}): "
                f"it is recorded in {path} and can never be approved")
        elif st.clean is False:
            say(f"candidate baseline written to {path}; its run was not clean (failures, a regression, "
                "an incomplete or interrupted run): approve refuses it without --force")
        else:
            say(f"candidate baseline written to {path}; approve it with: fp4bench baseline approve {path}")


def _writer(tr: Any):
    """Write one message through the terminal reporter as lines of at most 160 characters
    (``report.textfit.WIDTH``; continuations indented)."""
    from fp4bench.report.textfit import wrap_line

    def say(text: str) -> None:
        for line in wrap_line(text):
            tr.write_line(line)

    return say
