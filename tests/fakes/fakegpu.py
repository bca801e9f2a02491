"""Test-only pytest plugin: a CPU process pinned to one fake GPU reports that GPU as its unit.

With ``FP4BENCH_FAKE_GPUS`` set (``fp4bench.gpus.devices``), an xdist worker of ``pytest bench -n N``
is pinned to one fake UUID through ``CUDA_VISIBLE_DEVICES`` like a worker on a GPU host, but it
measures on the CPU, whose fingerprint has no GPU. This plugin (``-p fakegpu`` with
``tests/fakes`` on the path) gives such a process the fingerprint of its one visible fake GPU:
name ``Fake GPU``, compute capability ``0.0``, its UUID; a process that sees several fake GPUs
(the controller) keeps the CPU's. ``FP4BENCH_FAKE_SEEN=<UUID>`` makes it report that GPU instead:
a worker whose CUDA started before its pin. ``FP4BENCH_FAKE_KILL=<text>`` kills (SIGKILL) the
process that is about to run the case whose test id contains the text: a worker that dies mid-run.
"""

from __future__ import annotations

import dataclasses
import os
import signal

import pytest

import fp4bench.env
from fp4bench.gpus.devices import FAKE_ENV, visible_gpus

_real = fp4bench.env.collect_fingerprint


def collect_fingerprint(device=None):
    fp = _real(device)
    gpus = visible_gpus() if os.environ.get(FAKE_ENV) else []
    if len(gpus) != 1:
        return fp
    return dataclasses.replace(fp, gpu_name=gpus[0].name, gpu_slug=fp4bench.env.gpu_slug(gpus[0].name),
                               compute_capability="0.0", gpu_uuid=os.environ.get("FP4BENCH_FAKE_SEEN") or gpus[0].uuid)


fp4bench.env.collect_fingerprint = collect_fingerprint


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    kill = os.environ.get("FP4BENCH_FAKE_KILL")
    if kill and kill in item.nodeid:
        os.kill(os.getpid(), signal.SIGKILL)
