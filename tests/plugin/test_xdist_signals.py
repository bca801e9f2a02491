"""``pytest -n``: a SIGTERM to the controller (``timeout``, a CI runner: only the controller gets
it) is passed on to every worker, so each stops its case at once instead of measuring on until
xdist's teardown gives up on it; a worker going down after that is interrupted, not lost. In this
process: the controller's hooks with stand-in nodes, the signal raised here, ``os.kill`` recorded
(no process is started or signalled)."""

from __future__ import annotations

import os
import signal
from types import SimpleNamespace

import pytest

from fp4bench.gpus.pinning import ENV
from fp4bench.plugin import signals
from fp4bench.plugin.session import SESSION
from fp4bench.plugin.xdist import ControllerPlugin, worker_pid


def _node(gw: str, uuid: str, pid: int | None) -> SimpleNamespace:
    io = SimpleNamespace(popen=SimpleNamespace(pid=pid)) if pid is not None else None  # a popen gateway's
    return SimpleNamespace(gateway=SimpleNamespace(id=gw, spec=SimpleNamespace(env={ENV: uuid}), _io=io),
                           workerinput={})


def test_sigterm_to_the_controller_reaches_every_worker_and_a_worker_down_then_is_not_lost(monkeypatch):
    cleanups: list = []
    config = SimpleNamespace(stash=pytest.Stash(), add_cleanup=cleanups.append)
    config.stash[SESSION] = SimpleNamespace(gpus=["GPU-a", "GPU-b", "GPU-c"])
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(os, "kill", lambda pid, signum: sent.append((pid, signum)))
    before = signal.getsignal(signal.SIGTERM)
    signals.install(config)
    try:
        plugin = ControllerPlugin(config)
        nodes = [_node("gw0", "GPU-a", 4242), _node("gw1", "GPU-b", 4343), _node("gw2", "GPU-c", None)]
        for node in nodes:
            plugin.pytest_configure_node(node)
        assert [worker_pid(n) for n in nodes] == [4242, 4343, None]
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            signal.raise_signal(signal.SIGTERM)
        assert sent == [(4242, signal.SIGTERM), (4343, signal.SIGTERM)]  # a gateway without a process: skipped
        plugin.pytest_testnodedown(nodes[0], "worker 'gw0' crashed while running 'x'")
        plugin.pytest_handlecrashitem("bench::case", SimpleNamespace(node=nodes[1]), None)
        assert plugin.lost == []  # interrupted: the session says so, not "crashed" or "went down"
    finally:
        for fn in cleanups:
            fn()
        signal.signal(signal.SIGTERM, before)
    assert signal.getsignal(signal.SIGTERM) is before
