"""The replays' second operand set (``run.checks``): which prepared tensors carry the inputs."""

from __future__ import annotations

import torch

from fp4bench.backends.base import Prepared
from fp4bench.run.checks import second_set, tensors_of
from fp4bench.workload.operands import make_operands, other_activations
from fp4bench.workload.problems import GemmProblem

P = GemmProblem(4, 32, 64)


def _prepare(ops) -> Prepared:
    """A backend's layouts: activation bytes (copied), weights (shared), an uninitialized
    workspace that differs between any two prepares, and a constant."""
    ws = torch.randint(0, 255, (16,), dtype=torch.uint8)  # stands for torch.empty garbage
    return Prepared(P, torch.empty(4, 32), {"a": ops.qa.data.clone(), "sf": [ops.qa.scales.clone()],
                                            "w": ops.qw.data, "ws": ws, "one": torch.ones(2), "n": 7})


def test_the_slots_are_the_activation_tensors_and_never_a_workspace():
    ops = make_operands(P, "nvfp4", "nvfp4")
    other = other_activations(ops)
    assert other.seed != ops.seed and other.qw is ops.qw and not torch.equal(other.a, ops.a)
    prep = _prepare(ops)
    s = second_set(prep, ops, other, _prepare, lambda o, p: None)
    assert [t.data_ptr() for t in s.slots] == [prep.args["a"].data_ptr(), prep.args["sf"][0].data_ptr()]
    s.load_other()
    assert torch.equal(prep.args["a"], other.qa.data)
    s.load_own()
    assert torch.equal(prep.args["a"], ops.qa.data) and s.ops is other and s.note == ""


def test_a_prepared_layout_that_changes_shape_gives_one_operand_set():
    ops = make_operands(P, "nvfp4", "nvfp4")
    shapes = iter([4, 5])

    def prepare(o):
        return Prepared(P, torch.empty(1), {"a": torch.zeros(next(shapes, 5))})

    s = second_set(Prepared(P, torch.empty(1), {"a": torch.zeros(4)}), ops, other_activations(ops), prepare,
                   lambda o, p: None)
    assert s.ops is None and not s.slots and "layout differs" in s.note


def test_tensors_of_walks_nested_containers_and_dataclasses_in_order():
    ops = make_operands(P, "nvfp4", "nvfp4")
    inner = Prepared(P, torch.zeros(1), {"x": torch.ones(1)})
    got = tensors_of({"p": inner, "l": (torch.zeros(2), [torch.zeros(3)]), "ops": ops, "k": 1})
    assert got[0] is inner.out and got[1] is inner.args["x"] and got[3].numel() == 3
    assert any(t is ops.qa.data for t in got)


def test_same_compares_bits_so_poisoned_padding_equals_itself():
    from fp4bench.run.checks import _same

    x = torch.tensor([1.0, float("nan"), 2.0], dtype=torch.bfloat16)
    assert _same(x, x.clone()) and not _same(x, torch.tensor([1.0, float("nan"), 3.0], dtype=torch.bfloat16))
    w = torch.randn(8, 4)
    assert _same(w.T, w.clone().T) and _same(w.T, w.T) and not _same(w.T, (w + 1).T)
    e4m3 = torch.full((4,), 0xFF, dtype=torch.uint8).view(torch.float8_e4m3fn)  # NaN bytes
    assert _same(e4m3, e4m3.view(torch.uint8).clone().view(torch.float8_e4m3fn))
