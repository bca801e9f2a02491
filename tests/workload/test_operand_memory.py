"""Operand generation, quantization and the reference never make a full-size temporary of a large
operand: every allocation larger than one chunk (``operands.chunks``: whole experts) is an operand
the case keeps. Checked on GLM-5's layer scaled down (16 experts of 256, hidden 192 and inter
64 of 6144 and 2048; its b64 / b1 routing over them), with the chunk scaled to one gate_up expert, by
recording the allocation of every torch op (a dispatch mode) while the operands are made: on the
real layer a full-size float32 temporary of gate_up is 24 GiB (an 80 GB H100 ran out of memory)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import fp4bench.workload.operands as operands
from fp4bench.models import get_model
from fp4bench.reference.bound import reference_and_bound
from fp4bench.workload.decode import decode_problems
from fp4bench.workload.operands import make_operands, other_activations
from fp4bench.workload.problems import GroupedProblem, MoEProblem

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors (conftest)

SCALE = 32
GLM5 = get_model("glm-5")
SMALL = dataclasses.replace(GLM5, name="glm-5-scaled", hidden=GLM5.hidden // SCALE,
                            moe_intermediate=GLM5.moe_intermediate // SCALE, num_experts=16,
                            shared_intermediate=GLM5.shared_intermediate // SCALE)


def _problem(batch: int, kind: type, role: str):
    return next(p for p in decode_problems(SMALL, batch) if isinstance(p, kind) and p.origin.role == role)


MOE_B64 = _problem(64, MoEProblem, "moe")
GATE_UP_B1 = _problem(1, GroupedProblem, "gate_up")
EXPERT = 2 * SMALL.moe_intermediate * SMALL.hidden  # elements of one gate_up expert
EXPERT_FP32 = 4 * EXPERT


class Allocations(TorchDispatchMode):
    """Every allocation a torch op returns while active: ``(op, bytes, address, weak reference)``."""

    def __init__(self):
        super().__init__()
        self.seen: list[tuple[str, int, int, StorageWeakRef]] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """torch's opt-out (``TorchDispatchMode._should_skip_dynamo``) of wrapping the handler in
        ``torch._dynamo.disable``: importing Dynamo for that costs seconds, and nothing here compiles."""
        return False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                s = t.untyped_storage()
                self.seen.append((str(func), s.nbytes(), s.data_ptr(), StorageWeakRef(s)))
        return out

    def temporaries_over(self, limit: int, kept: list[torch.Tensor]) -> list[tuple[str, int]]:
        """Allocations above ``limit`` bytes that are not an allocation of a ``kept`` tensor: gone
        by now (a temporary), or held by something else."""
        keep = {t.untyped_storage().data_ptr() for t in kept}
        return [(op, n) for op, n, ptr, ref in self.seen if n > limit and (ref.expired() or ptr not in keep)]


def _tensors(obj) -> list[torch.Tensor]:
    from fp4bench.measure.holdings import tensors_of

    return tensors_of(obj)


@pytest.fixture
def expert_chunks(monkeypatch):
    """The chunk scaled down with the layer: one gate_up expert (two down experts)."""
    monkeypatch.setattr(operands, "CHUNK_ELEMENTS", EXPERT)


def test_the_scaled_layer_is_glm5s_b64_moe_and_b1_gate_up():
    assert (MOE_B64.num_tokens, MOE_B64.top_k, MOE_B64.num_experts) == (64, 8, 16)
    assert MOE_B64.active_experts > 1 and GATE_UP_B1.total_rows == 8
    assert (GATE_UP_B1.n, GATE_UP_B1.k) == (2 * MOE_B64.inter, MOE_B64.hidden)


@pytest.mark.parametrize("act, weight", [("bf16", "mxfp4"), ("nvfp4", "nvfp4"), ("bf16", "bf16")])
def test_moe_b64_operands_make_no_temporary_larger_than_one_expert(expert_chunks, act, weight):
    with Allocations() as seen:
        ops = make_operands(MOE_B64, act, weight, seed=0)
        other = other_activations(ops)
    kept = _tensors(ops) + _tensors(other)
    assert max(n for _, n, _, _ in seen.seen) >= MOE_B64.num_experts * EXPERT * 2  # the bf16 gate_up: it was seen
    assert seen.temporaries_over(EXPERT_FP32, kept) == []


@pytest.mark.parametrize("weight", ["bf16", "fp8", "nvfp4"])
def test_grouped_b1_operands_make_no_temporary_larger_than_one_expert(expert_chunks, weight):
    with Allocations() as seen:
        ops = make_operands(GATE_UP_B1, "bf16" if weight == "bf16" else weight, weight, seed=0)
    assert seen.temporaries_over(EXPERT_FP32, _tensors(ops)) == []


def test_the_references_decode_one_expert_at_a_time(expert_chunks):
    ops = make_operands(MOE_B64, "bf16", "mxfp4", seed=0)
    grouped = make_operands(GATE_UP_B1, "nvfp4", "nvfp4", seed=0)
    with Allocations() as seen:
        refs = [reference_and_bound(ops), reference_and_bound(grouped)]
    assert seen.temporaries_over(EXPERT_FP32, _tensors(refs) + _tensors(ops) + _tensors(grouped)) == []


def test_chunked_draws_are_seeded_and_the_same_as_one_draw_below_a_chunk(expert_chunks):
    a = make_operands(MOE_B64, "bf16", "mxfp4", seed=7)
    b = make_operands(MOE_B64, "bf16", "mxfp4", seed=7)
    assert torch.equal(a.w, b.w) and torch.equal(a.w2, b.w2) and torch.equal(a.qw.data, b.qw.data)
    assert not torch.equal(a.w, make_operands(MOE_B64, "bf16", "mxfp4", seed=8).w)
    # a tensor of one chunk is one draw, as before chunking: scale * randn, rounded to bf16 once
    gen = torch.Generator().manual_seed(3)
    one = operands._randn((EXPERT // 64, 64), gen, torch.device("cpu"), 0.5)
    torch.testing.assert_close(one, (torch.randn((EXPERT // 64, 64), generator=torch.Generator().manual_seed(3))
                                     * 0.5).to(torch.bfloat16), rtol=0, atol=0)
    # chunks hold whole experts: the gate_up weight in one-expert chunks, down in two-expert ones
    assert operands.chunks(a.w.shape) == [(e, e + 1) for e in range(16)]
    assert operands.chunks(a.w2.shape) == [(e, e + 2) for e in range(0, 16, 2)]
