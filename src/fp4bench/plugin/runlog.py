"""pytest hooks for process isolation and the on-disk line log (registered by ``plugin``).

``--fp4-isolate``: cases run in a worker process (``fp4bench.run.worker``); ``Fp4Session.runner``
becomes an ``IsolatedRunner`` with the same interface; its worker is closed here at the end.
``--fp4-log PATH`` (default next to a ``--fp4-save-baseline`` JSON): each finished case is
written to a line log the moment its report is made (``fp4bench.run.linelog``); the log holds this
run only (an existing file is refused before the run, or truncated with ``--fp4-force``).
In a run over several GPUs the controller writes the one log as the workers' reports arrive
(``plugin.xdist``); the workers write none.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fp4bench.run.linelog import SUFFIX, LineLog
from fp4bench.plugin.benchmark import extra_info_of
from fp4bench.plugin.session import session_of

_LOG = pytest.StashKey[LineLog]()
_HEADED = pytest.StashKey[bool]()
_PLANNED = pytest.StashKey[list]()


def log_path(config: pytest.Config) -> Path | None:
    explicit = config.getoption("fp4_log", default=None)
    if explicit:
        return Path(explicit)
    json_path = session_of(config).json_path
    return Path(str(json_path) + SUFFIX) if json_path is not None else None


def _spec(item: pytest.Item):
    """The item's ``CaseSpec``, or None (not an fp4bench case, or an empty parameter set)."""
    from fp4bench.run.sweep import CaseSpec

    spec = item.callspec.params.get("fp4_case") if hasattr(item, "callspec") else None
    return spec if isinstance(spec, CaseSpec) else None


def pytest_collection_finish(session: pytest.Session) -> None:
    set_planned(session.config, [i.nodeid for i in session.items if _spec(i) is not None])


def set_planned(config: pytest.Config, planned: list[str]) -> None:
    """The fp4bench cases the run will measure (the log's header lists them)."""
    config.stash[_PLANNED] = list(planned)


def open_log(config: pytest.Config) -> None:
    """Open the line log before the run (its path was checked): a log that cannot be created is a
    usage error now, not an error after the first case. Not in an xdist worker (the controller
    writes the one log)."""
    path = log_path(config)
    if path is not None and not hasattr(config, "workerinput") and _LOG not in config.stash:
        config.stash[_LOG] = LineLog(path, overwrite=bool(config.getoption("fp4_force")))
        config.add_cleanup(config.stash[_LOG].close)


def _log(config: pytest.Config) -> LineLog | None:
    """The open log, its header written once the session knows its fingerprint; None when the run
    keeps none or its log could not be written (``failed``)."""
    log = config.stash.get(_LOG, None)
    st = session_of(config)
    if log is None or not st.ready or log.failed:
        return None
    if config.stash.get(_HEADED, False):
        return log
    config.stash[_HEADED] = True
    fingerprint = st.fingerprint
    if len(st.gpus) > 1:  # a case line's extra_info names the GPU that measured it
        import dataclasses

        fingerprint = dataclasses.replace(fingerprint, gpu_uuid=None)
    _guarded(config, log, lambda: log.header(
        fingerprint, st.sweep.to_dict() if st.sweep else None, config.stash.get(_PLANNED, []),
        isolated=bool(config.getoption("fp4_isolate")), **({"gpus": list(st.gpus)} if st.gpus else {})))
    return None if log.failed else log


def _guarded(config: pytest.Config, log: LineLog, write) -> None:
    """``write()`` one line; a failed write (full disk, file-size limit) is said once, the log is
    not written again and the run is incomplete (exit 3): its record on disk is not whole."""
    from fp4bench.outputs import WriteError

    try:
        write()
    except WriteError as exc:
        log.failed = True
        session_of(config).save_error = f"fp4bench: --fp4-log: {exc}; the line log stops here (run incomplete)"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    rep = outcome.get_result()
    spec = _spec(item)
    if spec is None or not (rep.when == "call" or (rep.when == "setup" and not rep.passed)):
        return
    if _log(item.config) is None:
        return
    from fp4bench.gate.baseline import availability_key
    st = session_of(item.config)
    samples, extra = st.measured.get(item.nodeid, (None, None))
    if extra is None:
        extra = extra_info_of(item)
    key = availability_key(spec.backend, spec.problem.id, spec.tactic.label)
    avail = {key: st.availability[key]} if key in st.availability else {}
    from fp4bench.plugin.console import REASON

    reason = item.stash.get(REASON, None)  # a skip's or failure's message before it was fitted to the terminal
    write_case(item.config, item.nodeid, rep.outcome, samples, extra, avail,
               report_reason(rep) if reason is None else reason)


def report_reason(rep: pytest.TestReport) -> str:
    """A skip's reason, or the first line of a failure's own message ('' for a pass)."""
    return rep.longrepr[2] if rep.skipped and isinstance(rep.longrepr, tuple) else (
        _failure_reason(rep) if rep.failed else "")


def write_case(config: pytest.Config, nodeid: str, outcome: str, samples, extra, availability: dict,
               reason: str) -> None:
    """One finished case on the line log (nothing when the run keeps none)."""
    log = _log(config)
    if log is not None:
        _guarded(config, log, lambda: log.case(nodeid, outcome, samples, extra, availability, reason))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    st = session_of(session.config)
    close = getattr(st.runner, "close", None)
    if close is not None:
        close()
    log = _log(session.config)
    if log is not None:
        _guarded(session.config, log, lambda: log.end(exitstatus=int(exitstatus), interrupted=st.interrupted))
    if st.save_error and session.exitstatus == 0:
        session.exitstatus = 3  # incomplete: a record the run was asked to write is not whole


def _failure_reason(rep: pytest.TestReport) -> str:
    """The first line of the failure's own message (what failed and why), not the traceback's
    last line (for a CUDA error that is torch's hint about TORCH_USE_CUDA_DSA)."""
    crash = getattr(rep.longrepr, "reprcrash", None)
    text = getattr(crash, "message", "") or rep.longreprtext
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0][:500] if lines else ""

