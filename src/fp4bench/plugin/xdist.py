"""pytest-xdist over the GPUs of one host: ``pytest bench -n auto`` / ``-n N``, one worker per GPU.

Thin hooks over ``fp4bench.gpus`` (which GPUs, pinning, placement, scheduling) and
``fp4bench.plugin.merge`` (what a worker sends, what the controller merges). A run that has no fp4bench
benchmark case (``pytest tests -n 2``) is left to pytest-xdist as it is.

Controller (the process the user started; it never creates a CUDA context):

* ``auto_workers``: ``-n auto`` is one worker per visible GPU (pytest-xdist's
  ``pytest_xdist_auto_num_workers``, called by ``plugin`` since it runs before any configure);
* ``configure``: the worker count checked against the visible GPUs, one execnet spec per GPU
  (``gpus.pinning``), the session turned into the merged one, its baseline files read for every
  GPU of the run;
* ``pytest_configure_node``: the worker's GPU and the run's GPUs in ``workerinput``;
* ``pytest_xdist_make_scheduler``: ``gpus.scheduling.GpuScheduling``;
* ``pytest_runtest_logreport``: each finished case merged as its report arrives, and written to the
  line log; ``pytest_testnodedown`` / ``pytest_handlecrashitem``: a worker's end data, and a worker
  that crashed named (the run is then incomplete: exit 3 unless something failed for real);
* ``pytest_sessionfinish``: the one results file (``--benchmark-json``, the candidate);
* ``stop_workers``: a SIGTERM to the controller is passed on to every worker, so each stops its
  case at once (a worker going down then is interrupted, not lost).

Worker: checks its pin before anything touches CUDA, runs only its GPU's share of the collection
(``gpus.plan.share``), attaches each finished case's data to its report and its end data to
``workeroutput``.
"""

from __future__ import annotations

import ast
import contextlib
import os
from pathlib import Path
from typing import Any

import pytest

from fp4bench.gpus.pinning import GPU_KEY, GPUS_KEY
from fp4bench.plugin import benchmark as plugin_benchmark
from fp4bench.plugin.session import session_of

#: pytest-benchmark options whose files a merged run cannot write (pytest-benchmark switches
#: itself off under xdist: pytest-benchmark, session.py, ``BenchmarkSession.__init__``)
UNSUPPORTED = {"benchmark_save": "--benchmark-save", "benchmark_autosave": "--benchmark-autosave",
               "benchmark_compare_fail": "--benchmark-compare-fail"}


#: options that are about one GPU, and why
ONE_GPU = {"fp4_same_unit": "judges one GPU unit against its own baseline",
           "fp4_ab_against": "compares two environments on one GPU"}


def benchmark_modules(args: list[str]) -> list[Path]:
    """The test modules under pytest's arguments that define a test taking ``fp4_case`` (read as
    source, nothing imported): whether the run has fp4bench benchmark cases."""
    found = []
    for arg in args:
        root = Path(arg.split("::", 1)[0])
        files = [root] if root.is_file() else sorted(root.rglob("test_*.py")) if root.is_dir() else []
        for f in files:
            try:
                tree = ast.parse(f.read_text(errors="replace"))
            except (OSError, SyntaxError, ValueError):
                continue  # pytest reports it as a collection error
            if any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
                   and any(a.arg == "fp4_case" for a in n.args.args) for n in ast.walk(tree)):
                found.append(f)
    return found


def _visible() -> list:
    from fp4bench.gpus.devices import GpuListError, visible_gpus

    try:
        return visible_gpus()
    except GpuListError as exc:
        raise pytest.UsageError(f"fp4bench: {exc}") from None


def auto_workers(config: pytest.Config) -> int | None:
    """``-n auto``: one worker per visible GPU when the run has benchmark cases (None: xdist's own
    count, one per CPU)."""
    if not benchmark_modules([str(a) for a in config.args]):
        return None
    from fp4bench.gpus.pinning import PinError, worker_gpus

    gpus = _visible()
    try:
        worker_gpus(len(gpus), gpus, asked="-n auto")
    except PinError as exc:
        raise pytest.UsageError(str(exc)) from None
    return len(gpus)


def configure(config: pytest.Config) -> None:
    """Called by ``plugin.pytest_configure`` right after the session is made, before anything
    touches CUDA or reads a baseline."""
    st = session_of(config)
    if hasattr(config, "workerinput"):
        if GPU_KEY in config.workerinput:
            _configure_worker(config, st)
        return
    n = config.getoption("numprocesses", default=None)
    if isinstance(n, int) and not isinstance(n, bool) and n < 0:  # pytest-xdist takes any integer
        raise pytest.UsageError(f"fp4bench: -n {n}: the number of workers is >= 0 (0: no workers) or auto (one "
                                "per visible GPU)")
    workers = len(config.getoption("tx", default=None) or ())
    if not workers or config.getoption("dist", default="no") == "no":
        return
    if not benchmark_modules([str(a) for a in config.args]):
        return  # no fp4bench case: pytest-xdist as usual
    if not config.getoption("numprocesses", default=None):
        raise pytest.UsageError("fp4bench: --tx: a benchmark run starts one worker per GPU itself: use -n N or -n auto")
    if config.getoption("dist") != "load":
        raise pytest.UsageError(f"fp4bench: --dist {config.getoption('dist')}: a benchmark run places whole "
                                "(backend, problem) families on GPUs itself: leave --dist out")
    for dest, flag in UNSUPPORTED.items():
        if config.getoption(dest, default=None):
            raise pytest.UsageError(f"fp4bench: {flag} does nothing with -n (pytest-benchmark switches itself off "
                                    "under xdist): use --benchmark-json PATH or --fp4-save-baseline")
    if config.getoption("fp4_device", default=None):
        raise pytest.UsageError("fp4bench: --fp4-device with -n: each worker measures on its own GPU (cuda:0 under "
                                "its CUDA_VISIBLE_DEVICES); leave --fp4-device out")
    for dest, why in ONE_GPU.items():
        if config.getoption(dest, default=None):
            raise pytest.UsageError(f"fp4bench: --{dest.replace('_', '-')} {why}: run it without -n "
                                    "(CUDA_VISIBLE_DEVICES=<that GPU> selects it)")
    from fp4bench.env import Fingerprint, gpu_slug
    from fp4bench.gpus.pinning import PinError, tx_spec, worker_gpus

    try:
        gpus = worker_gpus(workers, _visible())
        config.option.tx = [tx_spec(g) for g in gpus]
    except PinError as exc:
        raise pytest.UsageError(str(exc)) from None
    st.merged, st.gpus = True, [g.uuid for g in gpus]
    st.fingerprint = Fingerprint(gpu_name=gpus[0].name, gpu_slug=gpu_slug(gpus[0].name))  # from NVML: no CUDA
    config.pluginmanager.register(ControllerPlugin(config), "fp4bench.plugin.xdist.controller")


#: starts the message of a collection error that carries a worker's usage error to the controller
USAGE_MARK = "[fp4bench usage error] "


def _pinned_worker(config: pytest.Config) -> bool:
    return GPU_KEY in getattr(config, "workerinput", {})


def defer(config: pytest.Config, text: str) -> bool:
    """In a worker, a usage error met while configuring (the baseline against this worker's GPU
    and way of measuring) is kept for its collection (``fail_worker_collection``): raised from
    the configure hook it would only crash the worker, over and over. False elsewhere."""
    if not _pinned_worker(config):
        return False
    session_of(config).usage_error = text
    return True


def fail_worker_collection(config: pytest.Config) -> None:
    """In a worker with a usage error: fail this collection with it. pytest-xdist sends a failed
    collection report to the controller (pytest-xdist, remote.py, ``pytest_collectreport``), whose
    ``ControllerPlugin.pytest_collectreport`` turns it into the one-line usage error."""
    st = session_of(config)
    if _pinned_worker(config) and st.usage_error:
        pytest.fail(USAGE_MARK + st.usage_error.removeprefix("ERROR: "), pytrace=False)


def check_worker_gpu(config: pytest.Config) -> None:
    """In a worker, once its device is set up: the GPU it measures on is the one it was assigned
    (``pytest.UsageError`` otherwise: CUDA was initialized under another mask)."""
    if not _pinned_worker(config):
        return
    uuid = session_of(config).fingerprint.gpu_uuid
    if uuid is not None and uuid != config.workerinput[GPU_KEY]:
        raise pytest.UsageError(f"worker {config.workerinput.get('workerid')} was assigned GPU "
                                f"{config.workerinput[GPU_KEY]} but measures on {uuid}")


def _configure_worker(config: pytest.Config, st: Any) -> None:
    from fp4bench.gpus.pinning import PinError, check_pinned

    try:
        check_pinned(config.workerinput[GPU_KEY])
    except PinError as exc:
        raise pytest.UsageError(str(exc)) from None
    st.gpus = list(config.workerinput[GPUS_KEY])
    config.pluginmanager.register(WorkerPlugin(config), "fp4bench.plugin.xdist.worker")


def quiet_worker(config: pytest.Config) -> None:
    """In a worker, once fp4bench has read them (the end of ``plugin.pytest_configure``): the
    controller writes the results files and compares, so this worker's pytest-benchmark does
    neither (its own configure comes later: pytest-benchmark, plugin.py, ``pytest_configure`` is
    ``trylast``)."""
    if not hasattr(config, "workerinput") or GPU_KEY not in config.workerinput:
        return
    plugin_benchmark.write_nothing(config)


def worker_pid(node: Any) -> int | None:
    """The process id of an xdist worker started by a popen gateway (execnet, gateway_io.py,
    ``Popen2IOMaster.popen``: the gateway's subprocess), None for any other gateway."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    pid = getattr(popen, "pid", None)
    return pid if isinstance(pid, int) else None


class ControllerPlugin:
    """The controller's hooks of a run over several GPUs."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.st = session_of(config)
        #: "gw1 (GPU-…) crashed while running <nodeid>" for each worker that went down
        self.lost: list[str] = []
        self._crashed_items: set[str] = set()
        self._planned: list[str] | None = None
        self.nodes: list[Any] = []  # every worker started, for ``stop_workers``
        self.stopping = False  # SIGTERM arrived: a worker going down now is interrupted, not lost
        from fp4bench.plugin import signals

        signals.on_stop(config, self.stop_workers)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        from fp4bench.gpus.pinning import gpu_of

        node.workerinput[GPU_KEY] = gpu_of(node.gateway.spec)
        node.workerinput[GPUS_KEY] = list(self.st.gpus)
        self.nodes.append(node)

    def stop_workers(self, signum: int) -> None:
        """Pass the SIGTERM that stops the controller on to every worker: only the controller got
        it (``timeout``, a CI runner), and a worker stops its case at once only when signalled
        itself (its ``plugin.signals``), not when xdist's teardown asks it to exit."""
        self.stopping = True
        for node in self.nodes:
            pid = worker_pid(node)
            if pid is not None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signum)

    @pytest.hookimpl(optionalhook=True, tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        from fp4bench.gpus.scheduling import GpuScheduling

        return GpuScheduling(config, log)

    @pytest.hookimpl(tryfirst=True)  # before the terminal reporter lists it as a collection error
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        text = str(report.longrepr) if report.failed else ""
        if USAGE_MARK in text:
            raise pytest.UsageError(text[text.index(USAGE_MARK) + len(USAGE_MARK):].strip().splitlines()[0])

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        from fp4bench.plugin import merge

        data = None
        for i, (name, value) in enumerate(getattr(report, "user_properties", None) or ()):
            if name == merge.KEY:
                data = value
                report.user_properties = report.user_properties[:i] + report.user_properties[i + 1:]
                break
        if report.failed and report.nodeid not in self._crashed_items:
            self.st.failed_tests += 1
        if data is None:
            return
        if data.get("planned") is not None and self._planned is None:
            self._plan(data["planned"])
        try:
            merge.absorb(self.st, report.nodeid, data)
        except ValueError as exc:  # workers on two GPU models: nothing of this run can be gated
            self.st.usage_error = str(exc)
            return
        from fp4bench.plugin.runlog import write_case

        m = data.get("measured") or {}
        write_case(self.config, report.nodeid, report.outcome, m.get("samples"), data.get("extra_info"),
                   data.get("availability") or {}, data.get("reason") or "")

    def _plan(self, planned: list[str]) -> None:
        from fp4bench.plugin.console import plan
        from fp4bench.plugin.runlog import set_planned

        plan(self.config, planned)
        set_planned(self.config, planned)
        self._planned = list(planned)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: Any, sched: Any) -> None:
        node = getattr(report, "node", None)
        self._crashed_items.add(crashitem)
        if self.stopping:  # stopped by the SIGTERM passed on: the run is interrupted, nothing lost
            return
        # pytest-xdist reports the worker down first (dsession.py, ``worker_errordown``): that
        # line said "between cases", and this one names the case
        who = f"worker {self._who(node)} "
        self.lost = [line for line in self.lost if not line.startswith(who)]
        self.lost.append(f"{who}crashed while running {crashitem}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from fp4bench.plugin import merge

        out = getattr(node, "workeroutput", None) or {}
        if merge.KEY in out:
            merge.absorb_end(self.st, node.gateway.id, out[merge.KEY])
        if error and not self.stopping and not any(f"worker {self._who(node)} " in line for line in self.lost):
            self.lost.append(f"worker {self._who(node)} went down between cases ({str(error)[:200]})")

    @staticmethod
    def _who(node: Any) -> str:
        if node is None:
            return "?"
        return f"{node.gateway.id} ({getattr(node, 'workerinput', {}).get(GPU_KEY, '?')})"

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int):
        from fp4bench.plugin import merge

        if self.lost:
            self.st.interrupted = True  # never a clean candidate
        merge.in_order(self.st, self._planned or [])
        self._write_json()  # before plugin.pytest_sessionfinish publishes the candidate
        result = yield
        if self.lost and session.exitstatus in (0, pytest.ExitCode.TESTS_FAILED):
            from fp4bench.gate.coverage import EXIT_INCOMPLETE, EXIT_REGRESSION

            regression = self.st.baseline is not None and self.st.ready and not self.st.usage_error \
                and self.st.final_compare().exit_code == EXIT_REGRESSION
            if not regression and self.st.failed_tests == 0:
                session.exitstatus = EXIT_INCOMPLETE
        return result

    def _write_json(self) -> None:
        """The one results file of the run (``--benchmark-json``): the workers' entries in name order."""
        if self.st.entries and self.st.ready:
            plugin_benchmark.write_results(self.config, [self.st.entries[n] for n in sorted(self.st.entries)])

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        tr = terminalreporter
        tr.write_line(f"fp4bench: {len(self.st.gpus)} workers, one per GPU: {', '.join(self.st.gpus)}")
        for line in self.lost:
            tr.write_line(f"fp4bench: {line}: the run is INCOMPLETE (its cases left are not reached)")


class WorkerPlugin:
    """A worker's hooks: its share of the collection, and its cases' data to the controller."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.st = session_of(config)
        self.gpu = config.workerinput[GPU_KEY]
        self.mine: set[str] = set()
        self.planned: list[str] | None = None

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # this worker times fp4bench's cases and the controller writes them: no "Benchmarks are
        # automatically disabled" warning
        plugin_benchmark.no_xdist_warning(self.config)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from fp4bench.gpus.plan import share
        from fp4bench.plugin.console import case_of

        gpus = list(self.config.workerinput[GPUS_KEY])
        cases = [(i.nodeid, case_of(i)) for i in session.items]
        slots = share(cases, len(gpus))
        mine = gpus.index(self.gpu)
        self.mine = {nodeid for (nodeid, _), slot in zip(cases, slots) if slot == mine}
        self.planned = [nodeid for nodeid, spec in cases if spec is not None]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> bool | None:
        return None if item.nodeid in self.mine else True  # another GPU's case: not run here

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any):
        rep = yield
        from fp4bench.plugin import merge
        from fp4bench.plugin.console import REASON, case_of

        if case_of(item) is not None and (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
            reason = item.stash.get(REASON, None)
            if reason is None:
                from fp4bench.plugin.runlog import report_reason

                reason = report_reason(rep)
            data = merge.case_data(self.st, item, reason, self.planned)
            self.planned = None  # sent once per worker
            rep.user_properties = [*rep.user_properties, (merge.KEY, data)]  # this report's own list
        return rep

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        from fp4bench.plugin import merge

        self.st.check_health()
        self.config.workeroutput[merge.KEY] = merge.end_data(self.st)
