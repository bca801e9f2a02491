"""What a ``CaseRunner`` keeps between cases: operand sets and references (a few problems,
least recently used first out), one backend's prepared layouts, and how all of it is dropped or
handed back to the driver (``release``: another process on the GPU needs the memory next)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from fp4bench import formats
from fp4bench.backends.base import Backend, Prepared
from fp4bench.reference.bound import Reference, reference_and_bound
from fp4bench.run.checks import SecondSet
from fp4bench.workload.operands import Operands, make_operands
from fp4bench.workload.problems import Problem


def _options_key(options: dict[str, Any]) -> tuple:
    """Hashable form of reference options (tensors by value: a recalibrated scale is another key)."""
    out = []
    for k in sorted(options):
        v = options[k]
        if isinstance(v, torch.Tensor):
            v = tuple(v.detach().double().flatten().tolist())
        out.append((k, v))
    return tuple(out)



class CaseCaches:
    """The caches of one runner on ``device``: operand sets drawn from ``seed`` and references,
    ``cache_size`` of each."""

    def __init__(self, device: torch.device, seed: int = 0, cache_size: int = 2):
        self.device, self.seed = device, seed
        self._ops: OrderedDict[tuple, Operands] = OrderedDict()
        self._refs: OrderedDict[tuple, Reference] = OrderedDict()
        self._cache_size = cache_size
        # one backend's prepared operands, reused by all its tactics of a problem (the sweep is
        # problem-major and backend-contiguous): re-interleaving a 5 GB MoE layer per tactic
        # would dominate a tactic sweep's wall time
        self._prep_for: tuple[Backend, Operands] | None = None
        self._prep: Prepared | None = None
        #: the pad that moves the next operand sets to a fresh placement (``CaseRunner.new_placement``)
        self._pad: torch.Tensor | None = None
        self._padding = 0  # padding entries poisoned in ``_prep``'s scale buffers
        self._second: SecondSet | None = None  # the replays' second operand set for ``_prep``

    def _lru(self, cache: OrderedDict, key: tuple, make):
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
        while len(cache) >= self._cache_size:
            cache.popitem(last=False)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        cache[key] = value = make()
        return value

    def operands(self, problem: Problem, act: str, weight: str) -> Operands:
        return self._lru(self._ops, (problem.id, act, weight),
                         lambda: make_operands(problem, act, weight, self.device, self.seed))

    def reference(self, ops: Operands, options: dict[str, Any] | None = None, roundings: int = 1) -> Reference:
        """The reference for ``ops`` under a backend's ``reference_options`` and output roundings
        (cached per problem, formats and options: backends that round alike share it)."""
        options = dict(options or {})

        key = (ops.problem.id, ops.act_format, ops.weight_format, ops.seed, _options_key(options), roundings)
        return self._lru(self._refs, key, lambda: reference_and_bound(ops, options, roundings))

    def prepared(self, backend: Backend, problem: Problem, ops: Operands) -> Prepared:
        """``backend.prepare`` for these very operands, reused until another backend or operand set
        comes (identity, not ids: an evicted operand set's address may be reused)."""
        held = self._prep_for
        if self._prep is None or held is None or held[0] is not backend or held[1] is not ops:
            self.drop_prepared()  # free the old layouts before allocating the new
            self._prep, self._padding = self._prepare(backend, problem, ops)
            self._prep_for = (backend, ops)
        return self._prep

    def _prepare(self, backend: Backend, problem: Problem, ops: Operands) -> tuple[Prepared, int]:
        """``backend.prepare`` with ``formats.POISON_BYTE`` in the padding of every scale buffer
        it builds; the number of padding entries so filled."""
        with formats.scale_padding(formats.POISON_BYTE) as fill:
            prep = backend.prepare(problem, ops, self.device)
        return prep, fill.filled

    def drop_prepared(self) -> None:
        """Forget the cached prepared operands (the next case prepares afresh)."""
        self._prep_for, self._prep, self._padding, self._second = None, None, 0, None

    def release(self) -> None:
        """Forget every cached operand set, reference and prepared layout and hand the freed
        device memory back to the driver, so another process on this GPU can use it."""
        import gc

        self.drop_prepared()
        self._ops.clear()
        self._refs.clear()
        self._pad = None
        gc.collect()  # a reference cycle (a traceback, a closure) must not keep a released copy
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
