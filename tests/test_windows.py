"""A window of a case is measured in fresh memory (``windows.take_window``): operands made
again from the seed into new allocations, not the previous window's buffers re-prepared."""

from __future__ import annotations

import torch

from fp4bench.backends.registry import all_backends, get_backend
from fp4bench.case import CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.sweep import SweepOptions, cases_for
from fp4bench.windows import take_window
from fp4bench.worker.child import operand_digest


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
