"""A window of a case is measured in fresh memory (``windows.take_window``): operands made
again from the seed into new allocations, not the previous window's buffers re-prepared."""

from __future__ import annotations

import torch

from fp4bench.backends.registry import all_backends, get_backend
from fp4bench.run.case import CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.run.sweep import SweepOptions, cases_for
from fp4bench.run.windows import take_window
from fp4bench.run.worker.child import operand_digest


def test_each_window_times_the_same_bytes_in_new_operands():
    device = torch.device("cpu")
    runner = CaseRunner(device, TimingConfig(mode="cpu", min_samples=3, max_samples=3, target_rel_ci=None,
                                             time_budget_s=0.0))
    spec = next(c for c in cases_for(SweepOptions(models=("glm-5",), batches=(1,), kinds=("dense",),
                                                  backends=("torch-reference",)), all_backends(), device)
                if not c.skip_reason)
    backend = get_backend(spec.backend)
    samples, why = take_window(runner, backend, spec)
    assert samples and not why
    (first,) = runner._ops.values()
    digest = operand_digest(first)
    samples, why = take_window(runner, backend, spec)
    assert samples and not why
    (second,) = runner._ops.values()
    assert second is not first and operand_digest(second) == digest


def test_a_further_window_prepares_every_rotating_copy_afresh(monkeypatch):
    """Each window clones and prepares its own copies (none is kept from the previous window):
    its time averages over placements of its own."""
    device = torch.device("cpu")
    runner = CaseRunner(device, TimingConfig(mode="cpu", min_samples=3, max_samples=3, target_rel_ci=None,
                                             time_budget_s=0.0), replays=0)  # replays prepare 2 more a window
    monkeypatch.setattr(CaseRunner, "copies_for", lambda self, backend, problem, ops: 4)
    spec = next(c for c in cases_for(SweepOptions(models=("glm-5",), batches=(1,), kinds=("dense",),
                                                  backends=("torch-bf16",)), all_backends(), device)
                if not c.skip_reason)
    backend = get_backend(spec.backend)
    prepared: list = []
    prepare = type(backend).prepare

    def recording(self, problem, operands, dev):
        prepared.append(prepare(self, problem, operands, dev))
        return prepared[-1]

    monkeypatch.setattr(type(backend), "prepare", recording)
    for _ in range(2):
        samples, why = take_window(runner, backend, spec)
        assert samples and not why
    assert len(prepared) == 8  # 4 per window: the checked operands' layout and 3 clones, twice
