"""The pytest-xdist scheduler of a run over several GPUs (``pytest_xdist_make_scheduler``).

Which GPU measures a case is decided by the workers, not here: every worker collects the same
items and computes the same placement of whole families on GPUs (``gpus.plan.share``), then runs
only its own GPU's share. The controller's part is to walk every worker through the whole
collection, in collection order, a few indices at a time:

* at most ``AHEAD`` indices are outstanding per worker, so ``-x``, ``--maxfail`` and a shutdown
  take effect within two items. A worker runs an item only once it knows the next one
  (pytest-xdist, remote.py, ``WorkerInteractor.run_one_test``), which is why pytest-xdist's own
  ``LoadScheduling`` keeps two pending too (pytest-xdist, scheduler/load.py, ``check_schedule``).
  Items of other GPUs complete at once in a worker, so the walk costs nothing measurable.
* a worker that crashed is replaced by pytest-xdist from the same spec, so on the same GPU
  (``gpus.pinning``); the replacement continues after the item the crashed worker was running,
  which pytest-xdist reports as crashed (pytest-xdist, dsession.py, ``handle_crashitem``). This
  is how ``EachScheduling`` hands a dead node's pending items to a node of the same spec
  (pytest-xdist, scheduler/each.py), keyed here by the GPU instead of the spec.
"""

from __future__ import annotations

from typing import Any, Sequence

from fp4bench.gpus.pinning import GPU_KEY, gpu_of

AHEAD = 2


def _gpu(node: Any) -> str | None:
    return getattr(node, "workerinput", {}).get(GPU_KEY) or gpu_of(node.gateway.spec)


class GpuScheduling:
    """Implements pytest-xdist's ``Scheduling`` protocol (pytest-xdist, scheduler/protocol.py)."""

    def __init__(self, config: Any, log: Any = None) -> None:
        from xdist.remote import Producer
        from xdist.workermanage import parse_tx_spec_config

        self.config = config
        self.numnodes = len(parse_tx_spec_config(config))
        self.log = log.gpusched if log is not None else Producer("gpusched", enabled=False)
        self.node2collection: dict[Any, list[str]] = {}
        self.node2pending: dict[Any, list[int]] = {}
        self.node2next: dict[Any, int] = {}
        self.collection: list[str] | None = None
        #: GPU UUID -> the next index for the worker that replaces that GPU's crashed worker
        self.resume: dict[str, int] = {}

    # -- the protocol's properties --------------------------------------------------------
    @property
    def nodes(self) -> list[Any]:
        return list(self.node2pending)

    @property
    def collection_is_completed(self) -> bool:
        return len(self.node2collection) >= self.numnodes

    def _left(self, node: Any) -> int:
        n = len(self.collection or ())
        return n - self.node2next.get(node, n)

    @property
    def tests_finished(self) -> bool:
        if not self.collection_is_completed or self.collection is None or self.resume:
            return False
        return all(self._left(node) == 0 and len(pending) < 2 for node, pending in self.node2pending.items())

    @property
    def has_pending(self) -> bool:
        return bool(self.resume) or any(p or self._left(n) for n, p in self.node2pending.items())

    # -- nodes and their collections -------------------------------------------------------
    def add_node(self, node: Any) -> None:
        assert node not in self.node2pending
        self.node2pending[node] = []

    def add_node_collection(self, node: Any, collection: Sequence[str]) -> None:
        assert node in self.node2pending
        if self.collection is not None and list(collection) != self.collection:
            from xdist.report import report_collection_diff

            first = next(iter(self.node2collection))
            self.log(report_collection_diff(self.collection, list(collection), first.gateway.id, node.gateway.id))
            return  # never scheduled: it is shut down with the others
        self.node2collection[node] = list(collection)

    def _same_collections(self) -> bool:
        import pytest
        from xdist.report import report_collection_diff

        (first, col), *rest = self.node2collection.items()
        same = True
        for node, other in rest:
            msg = report_collection_diff(col, other, first.gateway.id, node.gateway.id)
            if msg:
                same = False
                self.config.hook.pytest_collectreport(
                    report=pytest.CollectReport(nodeid=node.gateway.id, outcome="failed", longrepr=msg, result=[]))
        return same

    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is None:
            if not self._same_collections():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = next(iter(self.node2collection.values()))
        for node in self.nodes:
            if node in self.node2collection and node not in self.node2next:
                self.node2next[node] = self.resume.pop(_gpu(node), 0)
                self._fill(node)

    def _fill(self, node: Any) -> None:
        if node.shutting_down or node not in self.node2next:
            return
        assert self.collection is not None
        pending, start = self.node2pending[node], self.node2next[node]
        stop = min(len(self.collection), start + max(0, AHEAD - len(pending)))
        if stop > start:
            pending.extend(range(start, stop))
            self.node2next[node] = stop
            node.send_runtest_some(list(range(start, stop)))
        if self.node2next[node] >= len(self.collection):
            node.shutdown()

    # -- progress -------------------------------------------------------------------------
    def mark_test_complete(self, node: Any, item_index: int, duration: float = 0) -> None:
        self.node2pending[node].remove(item_index)
        self._fill(node)

    def mark_test_pending(self, item: str) -> None:
        raise NotImplementedError()

    def remove_pending_tests_from_node(self, node: Any, indices: Sequence[int]) -> None:
        raise NotImplementedError()

    def remove_node(self, node: Any) -> str | None:
        """The item the node was running when it went down (None: it had finished), and where
        the worker that replaces it on its GPU resumes."""
        pending = self.node2pending.pop(node)
        nxt = self.node2next.pop(node, None)
        if nxt is None or self.collection is None or (not pending and nxt >= len(self.collection)):
            return None
        gpu = _gpu(node)
        if gpu is not None:
            self.resume[gpu] = pending[1] if len(pending) > 1 else nxt
        return self.collection[pending[0]] if pending else None
