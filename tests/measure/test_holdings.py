"""What a case holds at once (``measure.holdings``) and the rotating-copy budget that counts it
(``measure.copies.copy_count``, ``CaseRunner.copies_for``): the operand set beside the copies, the
bf16 originals of quantized weights, the layouts a ``prepare`` builds; never a library's
workspace (its size may differ between the two sides of ``fp4bench ab``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fp4bench.backends.base import Prepared, Tactic
from fp4bench.backends.builtin.torch_bf16 import TorchBF16
from fp4bench.measure.copies import MEMORY_FRACTION, copy_count
from fp4bench.measure.holdings import case_bytes, layout_bytes, storages, tensors_of
from fp4bench.measure.timing import TimingConfig
from fp4bench.measure.verify import OK, CheckResult
from fp4bench.run.case import CaseRunner
from fp4bench.run.operand_copies import copied_fields
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GroupedProblem, MoEProblem


def copy_bytes(ops) -> int:
    """The bytes a rotating copy allocates: one clone of each tensor of its copied fields."""
    return sum(t.numel() * t.element_size() for t in tensors_of([getattr(ops, n) for n in copied_fields(ops)]))


pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (conftest)

GIB = 1 << 30
H100_TOTAL = int(79.18 * GIB)  # "GPU 0 has a total capacity of 79.18 GiB" (NVIDIA H100 80GB HBM3)
H200_TOTAL = int(139.8 * GIB)
L2 = 50 << 20
MOE = MoEProblem(hidden=192, inter=64, num_experts=16, top_k=4,
                 topk_ids=tuple(tuple((t + j * 3) % 16 for j in range(4)) for t in range(16)))
GROUPED = GroupedProblem((1, 0, 2, 1), n=64, k=96)


def _nbytes(*ts: torch.Tensor) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def _copied(ops) -> list:
    return [getattr(ops, n) for n in copied_fields(ops)]


class Interleaving(TorchBF16):
    """A W4A16 fused-MoE adapter's prepare, on CPU: every weight and scale tensor re-laid out into
    a buffer of its own (as ``interleave_weights`` does), plus a workspace and the output."""

    name = "interleave-probe"
    kinds = frozenset({"moe"})
    weight_format = "mxfp4"
    workspace = 4096

    def prepare(self, problem, ops, device):
        layouts = [t.flip(-1).contiguous() for t in (ops.qw.data, ops.qw.scales, ops.qw2.data, ops.qw2.scales)]
        args = {"input": ops.a, "weights": layouts, "workspace": torch.empty(self.workspace, dtype=torch.uint8)}
        return Prepared(problem, torch.empty((problem.num_tokens, problem.hidden), dtype=torch.bfloat16), args)

    def run(self, prepared, tactic):
        return prepared.out


def test_a_view_taking_prepare_builds_no_layout_and_a_copy_keeps_its_clone():
    ops = make_operands(GROUPED, "bf16", "bf16")
    prep = TorchBF16().prepare(GROUPED, ops, torch.device("cpu"))  # a, a transposed view of w, new int32 offsets
    assert layout_bytes(prep, ops) == 0
    held = case_bytes(ops, prep, _copied(ops))
    assert held.held == _nbytes(ops.a, ops.w, ops.offsets) == copy_bytes(ops)
    assert held.per_copy == copy_bytes(ops)  # read in place: a and w (the offsets' clone is dropped)
    assert held.transient == _nbytes(ops.offsets)
    assert held.with_copies(3) == 3 * copy_bytes(ops) + _nbytes(ops.offsets)
    assert held.with_copies(1) == held.held


def test_layouts_count_operand_sized_buffers_and_not_a_workspace():
    ops = make_operands(MOE, "bf16", "mxfp4")
    prep = Interleaving().prepare(MOE, ops, None)
    weights = (ops.qw.data, ops.qw.scales, ops.qw2.data, ops.qw2.scales)
    laid = _nbytes(*weights, prep.out)  # the output has the activations' size: counted, the same on both sides
    assert layout_bytes(prep, ops) == laid  # the workspace is not
    wide = Interleaving()
    wide.workspace = ops.qw.data.numel() + 32  # a library's workspace of another size: still not a layout
    assert layout_bytes(wide.prepare(MOE, ops, None), ops) == laid
    held = case_bytes(ops, prep, _copied(ops))
    # the operand set, with the bf16 originals w and w2 that a copy shares instead of cloning
    assert held.held == _nbytes(*tensors_of(ops)) + laid
    assert _nbytes(*tensors_of(ops)) == copy_bytes(ops) + _nbytes(ops.w, ops.w2)
    # a copy keeps its layouts and the activations it reads in place; the quantized weights it
    # cloned are freed once they are laid out
    assert held.per_copy == laid + _nbytes(ops.a)
    assert held.transient == copy_bytes(ops) - _nbytes(ops.a)


def test_a_layout_of_another_size_is_counted_at_its_clones_size():
    ops = make_operands(MOE, "bf16", "mxfp4")
    padded = Prepared(MOE, torch.empty(0), {"w": torch.zeros(ops.qw.data.numel() + 64, dtype=torch.uint8)})
    held = case_bytes(ops, padded, _copied(ops))
    assert layout_bytes(padded, ops) == 0 and held.per_copy == copy_bytes(ops)


def test_views_of_one_allocation_count_once():
    base = torch.zeros(10, 8)
    assert storages({"a": base, "b": [base[2:], base.t()]}) == {("cpu", base.data_ptr()): 320}
    assert storages(torch.empty(0)) == {}


def test_the_budget_holds_the_operand_set_and_every_copy_with_its_layouts():
    # a case that is only its copy: the count of the rule before it counted anything else
    assert copy_count(l2_bytes=L2, total_bytes=80 * GIB, footprint_bytes=4e8, copy_bytes=12 * GIB) == 2
    assert copy_count(l2_bytes=L2, total_bytes=80 * GIB, footprint_bytes=4e8, copy_bytes=12 * GIB,
                      held_bytes=12 * GIB + 1) == 2
    # the operand set beside it: one further copy less
    assert copy_count(l2_bytes=L2, total_bytes=80 * GIB, footprint_bytes=4e8, copy_bytes=12 * GIB,
                      held_bytes=24 * GIB) == 1
    assert copy_count(l2_bytes=L2, total_bytes=80 * GIB, footprint_bytes=4e8, copy_bytes=GIB,
                      held_bytes=60 * GIB) == 1  # never fewer than one


# GLM-5's layer (256 experts, hidden 6144, inter 2048), bytes as make_operands allocates them
E, H, INTER = 256, 6144, 2048
GATE_UP_BF16 = E * 2 * INTER * H * 2  # 12 GiB
DOWN_BF16 = E * H * INTER * 2  # 6 GiB
MX_GATE_UP = E * 2 * INTER * (H // 2 + H // 32)  # MXFP4 codes and E8M0 scales
MX_DOWN = E * H * (INTER // 2 + INTER // 32)
MOE_B64_SMALL = 64 * H * 2 + 2 * 64 * 8 * 4  # activations, topk ids and weights


@pytest.mark.parametrize("total, grouped, moe", [(H100_TOTAL, 2, 1), (H200_TOTAL, 4, 4)])
def test_glm5_grouped_b1_and_moe_b64_counts_and_bytes(total, grouped, moe):
    """The figures of docs/measurement.md, "Device memory of a case" (computed, not measured):
    torch-bf16 grouped gate_up b1 (prepare takes views) and the W4A16 MoE b64 (prepare lays out
    every weight and scale tensor anew, reads activations and routing in place)."""
    bf16_copy = GATE_UP_BF16 + 8 * H * 2 + 257 * 8
    n = copy_count(l2_bytes=L2, total_bytes=total, footprint_bytes=8 * 2 * INTER * H * 2, copy_bytes=bf16_copy,
                   held_bytes=bf16_copy)
    assert n == grouped
    assert bf16_copy * n <= MEMORY_FRACTION * total
    laid = MX_GATE_UP + MX_DOWN + 64 * H * 2  # the layouts and the output
    held = GATE_UP_BF16 + DOWN_BF16 + MX_GATE_UP + MX_DOWN + MOE_B64_SMALL + laid
    bytes_ = SimpleNamespace(held=held, per_copy=laid + MOE_B64_SMALL, transient=MX_GATE_UP + MX_DOWN)
    n = copy_count(l2_bytes=L2, total_bytes=total, footprint_bytes=4e9, copy_bytes=bytes_.per_copy,
                   held_bytes=held, transient_bytes=bytes_.transient)
    assert n == moe
    assert round(held / GIB, 2) == 27.56 and round(bytes_.per_copy / GIB, 2) == 4.78
    if n > 1:
        assert held + (n - 1) * bytes_.per_copy + bytes_.transient <= MEMORY_FRACTION * total


@pytest.fixture
def gpu_like(monkeypatch):
    """A runner on the CUDA path of ``_rotating_calls`` with CPU tensors, on a GPU of ``total``
    bytes (none of its free memory read)."""

    def make(total: int) -> CaseRunner:
        props = SimpleNamespace(L2_cache_size=L2, total_memory=total)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
        runner = CaseRunner(torch.device("cpu"), TimingConfig(mode="cpu"))
        runner.device = SimpleNamespace(type="cuda", index=0)
        runner._check_prepared = lambda *a: CheckResult(OK)
        return runner

    return make


def test_what_a_case_holds_with_its_copies_stays_inside_the_budget(gpu_like):
    """Every allocation the case holds once its copies are made (the operand set, each copy's
    prepared layouts, deduplicated), against the budget: with four copies (the count when only
    the clones were counted) this case would hold more than 40 % of the card."""
    backend = Interleaving()
    ops = make_operands(MOE, "bf16", "mxfp4")
    prep = backend.prepare(MOE, ops, None)
    held = case_bytes(ops, prep, _copied(ops))
    total = int((held.with_copies(2) + held.per_copy // 8) / MEMORY_FRACTION)
    runner = gpu_like(total)
    assert int(MEMORY_FRACTION * total // copy_bytes(ops)) >= 4  # the clones alone would fit four
    fns, bad = runner._rotating_calls(backend, MOE, ops, prep, Tactic(None, "default"))
    assert bad is None and len(fns) == 2
    live = storages([ops] + [fn.__defaults__[0] for fn in fns])  # each callable's prepared copy
    assert sum(live.values()) <= MEMORY_FRACTION * total
    four = sum(storages(ops).values()) + 4 * layout_bytes(prep, ops)
    assert four > MEMORY_FRACTION * total
