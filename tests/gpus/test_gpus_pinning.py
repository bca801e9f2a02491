"""One worker per GPU (``fp4bench.gpus.pinning``) and the controller's walk of every worker through
the collection (``fp4bench.gpus.scheduling``), without starting any process."""

from __future__ import annotations

from types import SimpleNamespace

import execnet
import pytest

from fp4bench.gpus.devices import Gpu
from fp4bench.gpus.pinning import GPU_KEY, PinError, check_pinned, gpu_of, tx_spec, worker_gpus
from fp4bench.gpus.scheduling import GpuScheduling

A, B = Gpu(0, "GPU-aaaaaaaa-0000", "NVIDIA H200"), Gpu(1, "GPU-bbbbbbbb-1111", "NVIDIA H200")


def test_the_count_of_workers_is_checked_against_the_visible_gpus(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert worker_gpus(1, [A, B]) == [A] and worker_gpus(2, [A, B]) == [A, B]
    with pytest.raises(PinError) as too_many:
        worker_gpus(3, [A, B])
    assert str(too_many.value) == ("fp4bench: -n 3: 2 GPUs are visible (CUDA_VISIBLE_DEVICES='0,1') and each "
                                   "benchmark worker needs a GPU of its own: use -n 2 or fewer, or -n auto (one "
                                   "worker per visible GPU)")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with pytest.raises(PinError, match=r"^fp4bench: -n 2: .* but 0 GPUs are visible \(CUDA_VISIBLE_DEVICES unset\)"):
        worker_gpus(2, [])
    with pytest.raises(PinError, match="GPUs are of 2 models"):
        worker_gpus(2, [A, Gpu(1, "GPU-cc", "NVIDIA B200")])
    for exc in (too_many.value,):
        assert "\n" not in str(exc)


def test_a_worker_is_pinned_by_its_execnet_spec():
    spec = execnet.XSpec(tx_spec(B))
    assert spec.popen and spec.env == {"CUDA_VISIBLE_DEVICES": B.uuid} and gpu_of(spec) == B.uuid
    assert gpu_of(execnet.XSpec("popen")) is None


def test_the_worker_checks_its_pin(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", A.uuid)
    check_pinned(A.uuid)
    with pytest.raises(PinError, match=f"assigned GPU {B.uuid} but runs with CUDA_VISIBLE_DEVICES="):
        check_pinned(B.uuid)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    check_pinned(B.uuid)  # unset: the worker pins itself
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == B.uuid


class Node:
    def __init__(self, gpu: Gpu, gid: str) -> None:
        self.gateway = SimpleNamespace(id=gid, spec=execnet.XSpec(tx_spec(gpu)))
        self.workerinput = {GPU_KEY: gpu.uuid}
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        self.sent += list(indices)

    def shutdown(self):
        self.shutting_down = True


def _sched(n: int = 2) -> GpuScheduling:
    config = SimpleNamespace(getvalue=lambda name: ["popen"] * n if name == "tx" else None,
                             hook=SimpleNamespace(pytest_collectreport=lambda report: None))
    return GpuScheduling(config)


def _run(sched: GpuScheduling, node: Node, upto: int | None = None) -> None:
    """The worker completes what it was sent, in order (all of it, or up to index ``upto``)."""
    done = 0
    while done < len(node.sent) and (upto is None or node.sent[done] < upto):
        sched.mark_test_complete(node, node.sent[done])
        done += 1


def _collected(items: int) -> tuple[GpuScheduling, Node, Node]:
    """A scheduler with two workers (GPUs A and B) that both collected ``items`` tests."""
    sched, a, b = _sched(), Node(A, "gw0"), Node(B, "gw1")
    for node in (a, b):
        sched.add_node(node)
        sched.add_node_collection(node, [f"t.py::test[{i}]" for i in range(items)])
    return sched, a, b


def test_every_worker_walks_the_whole_collection_two_items_ahead():
    sched, a, b = _collected(5)
    assert sched.collection_is_completed
    sched.schedule()
    assert a.sent == b.sent == [0, 1] and not sched.tests_finished
    _run(sched, a)
    _run(sched, b)
    assert a.sent == b.sent == [0, 1, 2, 3, 4] and a.shutting_down and b.shutting_down
    assert sched.tests_finished and not sched.has_pending
    assert sched.remove_node(a) is None  # finished: not a crash


def test_a_crashed_worker_is_replaced_on_its_gpu_after_the_item_it_was_running():
    sched, a, b = _collected(6)
    sched.schedule()
    _run(sched, a, upto=2)  # a runs 0 and 1, then dies running 2
    assert sched.remove_node(a) == "t.py::test[2]"
    assert not sched.tests_finished and sched.has_pending
    a2 = Node(A, "gw2")  # pytest-xdist's replacement: the same spec, so the same GPU
    sched.add_node(a2)
    sched.add_node_collection(a2, list(sched.collection))
    sched.schedule()
    assert a2.sent == [3, 4]
    _run(sched, a2)
    _run(sched, b)
    assert a2.sent == [3, 4, 5] and sched.tests_finished
    # a worker sent another collection is never scheduled
    c = Node(B, "gw3")
    sched.add_node(c)
    sched.add_node_collection(c, sched.collection[:-1])
    sched.schedule()
    assert c.sent == []


def test_a_stopping_worker_is_sent_nothing_more():
    sched, a = _sched(1), Node(A, "gw0")
    sched.add_node(a)
    sched.add_node_collection(a, [f"t[{i}]" for i in range(9)])
    sched.schedule()
    a.shutting_down = True  # -x / --maxfail: the controller shut the workers down
    _run(sched, a)
    assert a.sent == [0, 1]
