"""``pytest -n N`` over fake GPUs in this process: real worker sessions recorded, then replayed
to a real controller session whose pytest-xdist ``DSession`` starts stand-in nodes instead of
processes.

Worker side (``run_worker``): a pytester in-process run of the folder, made a pinned xdist worker
the way pytest-xdist makes one (``config.workerinput`` / ``workeroutput`` set before
``pytest_configure``: pytest-xdist, remote.py, ``setup_config``), with ``CUDA_VISIBLE_DEVICES`` set
to its fake GPU (or a plain worker, for a run without fp4bench cases). Every report it would send is kept serialized as pytest-xdist's
``WorkerInteractor`` sends it (``pytest_report_to_serializable``), with its collection and its
``workeroutput`` (completed as remote.py's ``pytest_sessionfinish`` completes it).

Controller side (``replaying``): pytest-xdist's ``NodeManager`` is replaced by ``NodeManager``
below. Its nodes are set up as ``WorkerController.setup`` sets them up (``pytest_configure_node``
fills their ``workerinput``), then announce themselves, their failed collection reports and their
collection; sent indices by the scheduler, each answers with the recorded events of those items
(reports deserialized by the controller's ``pytest_report_from_serializable``, as
``WorkerController.process_from_remote`` does), and at ``shutdown`` with ``workerfinished`` (at
once where its session ended without reaching its test loop: a usage error).
``crash``: the first node on that GPU dies (``errordown``) when it reaches that item, as a killed
worker process does; ``DSession`` then starts a replacement on the same spec, which replays the
rest.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
from typing import Any, Callable, Sequence

import pytest

from fakes.pytest_run import QUIET
from fp4bench.gpus.pinning import GPU_KEY, GPUS_KEY

_XDIST = QUIET.index("no:xdist") - 1
#: ``fakes.pytest_run.QUIET`` (pytest's plugins these runs are not about): a controller session
#: keeps pytest-xdist (``KEEP_XDIST``); a worker session in this process leaves it out too (``NO_XDIST``)
KEEP_XDIST, NO_XDIST = QUIET[:_XDIST], QUIET[_XDIST:]


@dataclasses.dataclass
class Recorded:
    """What one worker session sent."""

    result: Any  #: pytester's RunResult of the worker session
    ids: list[str]  #: its collection (pytest reports it also when collecting failed)
    looped: bool  #: it reached its test loop (False: it ended at a usage error, without waiting for work)
    reports: dict[str, list[dict]]  #: nodeid -> its serialized test reports, in order
    failed_collection: list[dict]  #: serialized failed collect reports
    workeroutput: dict[str, Any]


class _Worker:
    """The in-process run's plugin that makes it a pinned worker and records what it sends."""

    def __init__(self, workerinput: dict[str, Any]) -> None:
        self.workerinput = workerinput
        self.config: pytest.Config | None = None
        self.ids: list[str] = []
        self.looped = False
        self.reports: dict[str, list[dict]] = {}
        self.failed_collection: list[dict] = []

    @pytest.hookimpl(tryfirst=True)
    def pytest_cmdline_main(self, config: pytest.Config) -> None:
        config.workerinput = dict(self.workerinput)  # type: ignore[attr-defined]
        config.workeroutput = {}  # type: ignore[attr-defined]
        self.config = config

    def _serial(self, report: Any) -> dict:
        return self.config.hook.pytest_report_to_serializable(config=self.config, report=report)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = [item.nodeid for item in session.items]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        self.looped = True

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.failed_collection.append(self._serial(report))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reports.setdefault(report.nodeid, []).append(self._serial(report))


def run_worker(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, workerid: str, *args: str,
               gpu: str | None = None, gpus: Sequence[str] = ()) -> Recorded:
    """One worker session, recorded: on ``gpu`` of the run's ``gpus`` (fake GPUs), or a plain
    worker (``gpu`` None: a run that has no fp4bench case)."""
    from fp4bench.gpus.devices import FAKE_ENV
    from fp4bench.gpus.pinning import ENV

    workerinput = {"workerid": workerid, "workercount": max(len(gpus), 1), "testrunuid": "fake"}
    with monkeypatch.context() as mp:
        if gpu is not None:
            workerinput.update({GPU_KEY: gpu, GPUS_KEY: list(gpus)})
            mp.setenv(FAKE_ENV, ",".join(gpus))
            mp.setenv(ENV, gpu)
        worker = _Worker(workerinput)
        res = pytester.runpytest_inprocess(*args, plugins=[worker])
    session_end = {"exitstatus": int(res.ret), "shouldfail": False, "shouldstop": False}
    out = {**worker.config.workeroutput, **session_end}  # type: ignore[union-attr]
    return Recorded(res, worker.ids, worker.looped, worker.reports, worker.failed_collection, out)


def fake_gpu_fingerprints(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that sees one fake GPU reports it as its unit (``fakes.fakegpu``), for this test:
    ``fp4bench.env.collect_fingerprint``, and the name the plugin's ``open_device`` calls (imported
    by name in ``run.factory``, whose module object the plugin's ``settings`` already holds)."""
    import fp4bench.env
    from fp4bench.plugin import settings

    monkeypatch.setattr(fp4bench.env, "collect_fingerprint", fp4bench.env.collect_fingerprint)  # restored after
    from fakes import fakegpu  # its first import replaces fp4bench.env.collect_fingerprint

    monkeypatch.setattr(fp4bench.env, "collect_fingerprint", fakegpu.collect_fingerprint)
    monkeypatch.setitem(settings.open_device.__globals__, "collect_fingerprint", fakegpu.collect_fingerprint)


class Node:
    """A stand-in for pytest-xdist's ``WorkerController`` replaying one recorded worker."""

    def __init__(self, manager: "NodeManager", spec: Any, putevent: Callable, record: Recorded,
                 crash: str | None) -> None:
        self.gateway = dataclasses.make_dataclass("Gateway", ["id", "spec"])(spec.id, spec)
        self.config, self.putevent, self.record, self.crash = manager.config, putevent, record, crash
        self.workerinput: dict[str, Any] = {"workerid": spec.id, "workercount": len(manager.specs),
                                            "testrunuid": "fake"}
        self.workeroutput: dict[str, Any] = {}
        self.shutting_down = self.dead = False

    def __repr__(self) -> str:
        return f"<fake WorkerController {self.gateway.id}>"

    def _put(self, name: str, **kwargs: Any) -> None:
        self.putevent((name, {"node": self, **kwargs}))

    def _report(self, data: dict) -> Any:
        return self.config.hook.pytest_report_from_serializable(config=self.config, data=data)

    def start(self) -> None:
        self.config.hook.pytest_configure_node(node=self)
        from xdist.remote import getinfodict  # what a worker process sends of itself

        self._put("workerready", workerinfo=getinfodict())
        for data in self.record.failed_collection:
            self._put("collectreport", rep=self._report(data))
        self._put("collectionfinish", ids=list(self.record.ids))
        if not self.record.looped:  # its session ended there: it says so without waiting for work
            self.shutdown()

    def send_runtest_some(self, indices: Sequence[int]) -> None:
        for i in indices:
            if self.dead:
                return
            nodeid = self.record.ids[i]
            if nodeid == self.crash:
                self.dead = True
                self._put("errordown", error="Not properly terminated")  # execnet's word for a killed process
                return
            reports = self.record.reports.get(nodeid, [])
            if reports:
                self._put("logstart", nodeid=nodeid, location=tuple(reports[0]["location"]))
            for data in reports:
                self._put("testreport", rep=self._report(data))
            if reports:
                self._put("logfinish", nodeid=nodeid, location=tuple(reports[0]["location"]))
            self._put("runtest_protocol_complete", item_index=i, duration=0.0)

    def send_runtest_all(self) -> None:
        self.send_runtest_some(range(len(self.record.ids)))

    def shutdown(self) -> None:
        if self.shutting_down or self.dead:
            return
        self.shutting_down = True
        self.workeroutput = dict(self.record.workeroutput)
        self._put("workerfinished")


class NodeManager:
    """pytest-xdist's ``NodeManager`` (workermanage.py) for ``DSession``: one ``Node`` per tx spec,
    replaying the record of its GPU (``None``: of a spec pinned to none)."""

    records: dict[str | None, Recorded] = {}
    crashes: dict[str, str] = {}  #: GPU UUID -> the item its first worker dies at

    def __init__(self, config: pytest.Config) -> None:
        import execnet
        from xdist.workermanage import parse_tx_spec_config

        self.config = config
        self.specs = [execnet.XSpec(x) for x in parse_tx_spec_config(config)]
        self.nodes: list[Node] = []
        self.group, self._next_id = self, 0  # ``group.allocate_id``: execnet's ``Group.allocate_id``
        for spec in self.specs:
            self.allocate_id(spec)

    def allocate_id(self, spec: Any) -> None:
        if spec.id is None:
            spec.id, self._next_id = f"gw{self._next_id}", self._next_id + 1

    def setup_nodes(self, putevent: Callable) -> list[Node]:
        self.config.hook.pytest_xdist_setupnodes(config=self.config, specs=self.specs)
        return [self.setup_node(spec, putevent) for spec in self.specs]

    def setup_node(self, spec: Any, putevent: Callable) -> Node:
        from fp4bench.gpus.pinning import gpu_of

        gpu = gpu_of(spec)
        node = Node(self, spec, putevent, self.records[gpu], self.crashes.pop(gpu, None))
        self.nodes.append(node)
        node.start()
        return node

    def teardown_nodes(self) -> None:
        pass


def run_controller(pytester: pytest.Pytester, *args: str, limit_s: int = 30) -> Any:
    """A controller session in this process (``replaying`` its nodes). One that still waits for an
    event after ``limit_s`` (none of its stand-in nodes will send one) is interrupted and fails
    the test, instead of hanging it."""
    fired = []

    def stop(signum: int, frame: Any) -> None:
        fired.append(signum)
        raise KeyboardInterrupt(f"the controller session still runs after {limit_s} s")

    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        return pytester.runpytest_inprocess(*args)
    before = signal.signal(signal.SIGALRM, stop)
    signal.alarm(limit_s)
    try:
        res = pytester.runpytest_inprocess(*args, no_reraise_ctrlc=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
    assert not fired, f"the controller session waited for an event no stand-in node sends:\n{res.stdout.str()[-2000:]}"
    return res


def replaying(monkeypatch: pytest.MonkeyPatch, records: dict[str | None, Recorded],
              crashes: dict[str, str] | None = None) -> None:
    """The controller sessions of this test start ``Node``s replaying ``records`` (GPU UUID ->
    that GPU's worker; None -> the worker of every spec pinned to no GPU) instead of worker
    processes."""
    import xdist.dsession

    manager = type("ReplayingNodeManager", (NodeManager,), {"records": dict(records), "crashes": dict(crashes or {})})
    monkeypatch.setattr(xdist.dsession, "NodeManager", manager)
