"""A window of a case is measured in fresh memory (``windows.take_window``): operands made
again from the seed into new allocations, not the previous window's buffers re-prepared."""

from __future__ import annotations

import gc

import pytest
import torch

from fp4bench.backends.registry import all_backends, get_backend
from fp4bench.run.case import CaseRunner, placement_pad_bytes
from fp4bench.measure.timing import TimingConfig
from fp4bench.run.sweep import SweepOptions, cases_for
from fp4bench.run.windows import settle, take_window
from fp4bench.run.worker.child import operand_digest


@pytest.fixture(autouse=True)
def _frozen_heap():
    """``CaseRunner.release`` runs ``gc.collect()``: over this whole test process's heap (torch, the
    earlier tests) that is most of a window on a CPU. The objects alive before the test are set
    aside for it, so the collection scans what the test made, which is what it must free."""
    gc.freeze()
    yield
    gc.unfreeze()


def _cpu_case(backend: str, **runner):
    """A CPU runner of 3 samples a window (no warm-up calls) and the smallest runnable dense GLM-5
    b1 TP8 case of ``backend`` (m1 n6144 k256: the smallest dense GEMM of the model)."""
    device = torch.device("cpu")
    runner = CaseRunner(device, TimingConfig(mode="cpu", min_samples=3, max_samples=3, target_rel_ci=None,
                                             time_budget_s=0.0, warmup_calls=0), **runner)
    spec = min((c for c in cases_for(SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",),
                                                  backends=(backend,)), all_backends(), device)
                if not c.skip_reason), key=lambda c: c.problem.n * c.problem.k)
    return runner, spec


def test_each_window_times_the_same_bytes_in_new_operands():
    """torch-reference: the one CPU backend of NVFP4 operands, so the digest covers the quantized
    bytes and scales too (a call decodes them: no replays, which time more calls)."""
    runner, spec = _cpu_case("torch-reference", replays=0)
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
    runner, spec = _cpu_case("torch-bf16", replays=0)  # replays prepare 2 more a window
    monkeypatch.setattr(CaseRunner, "copies_for", lambda self, backend, problem, ops, prep: 4)
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


def test_a_further_window_takes_a_fresh_placement_set_after_the_release(monkeypatch):
    """``take_window(..., placement=k)``: the runner releases its memory, then draws placement set
    k (``CaseRunner.new_placement``), then measures: the window's operands are made beside the
    pad, at another place than the previous window's."""
    runner, spec = _cpu_case("torch-bf16")
    device = runner.device
    calls = []
    monkeypatch.setattr(runner, "release", lambda: calls.append("release"))
    monkeypatch.setattr(runner, "new_placement", lambda k: calls.append(("placement", k)))
    run = runner.run
    monkeypatch.setattr(runner, "run", lambda *a, **kw: (calls.append("run"), run(*a, **kw))[1])
    samples, why = take_window(runner, get_backend(spec.backend), spec, placement=2)
    assert samples and not why
    assert calls == ["release", ("placement", 2), "run"]
    assert CaseRunner(device, runner.timing).new_placement(2) == 0  # off CUDA placement does not apply


def test_pad_sizes_differ_between_windows_and_repeat_with_the_seed():
    sizes = [placement_pad_bytes(0, k) for k in range(1, 9)]
    assert len(set(sizes)) >= 6 and all(4 << 20 <= s <= 260 << 20 and s % (2 << 20) == 0 for s in sizes)
    assert sizes == [placement_pad_bytes(0, k) for k in range(1, 9)]
    assert sizes != [placement_pad_bytes(1, k) for k in range(1, 9)]


class _V:
    def __init__(self, more: bool):
        self.wants_more = more


def test_settle_takes_windows_while_the_verdict_wants_more_within_the_budgets():
    judged = []

    def judge_at(ws, budget_left):
        judged.append((len(ws), budget_left))
        return _V(budget_left)  # undecided until no window may be taken

    ws = [[1.0]]
    settle(judge_at, lambda k: ([1.0 + k], ""), ws, 3)
    assert ws == [[1.0], [2.0], [3.0]] and judged == [(1, True), (2, True), (3, False)]
    # the session budget ends it early; a window that cannot be measured ends it on what was measured
    ws, errors = [[1.0]], []
    settle(judge_at, lambda k: (None, "broke"), ws, 3, on_error=errors.append)
    assert ws == [[1.0]] and errors == ["broke"]
    ws = [[1.0]]
    settle(judge_at, lambda k: ([1.0], ""), ws, 6, budget_ok=lambda: len(ws) < 2)
    assert len(ws) == 2
