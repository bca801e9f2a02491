"""What each problem class says about itself: the shape text, rows, operands, GEMM dims, extra_info."""

from __future__ import annotations

from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem, Origin

DENSE = GemmProblem(m=4, n=512, k=256, origin=Origin(role="shared_down"))
GROUPED = GroupedProblem(tokens_per_expert=(3, 0, 5), n=64, k=128, origin=Origin(role="gate_up"))
MOE = MoEProblem(hidden=128, inter=64, num_experts=4, top_k=2, topk_ids=((0, 1), (1, 3), (1, 2)))


def test_dense():
    assert DENSE.size == "M4 N512 K256"
    assert (DENSE.rows, DENSE.expert_rows) == (4, None)
    assert DENSE.operand_elements == 4 * 256 + 512 * 256
    assert DENSE.gemm_dims() == [("shared_down", 512, 256)]
    assert DENSE.shape_info() == {"m": 4, "n": 512, "k": 256}


def test_grouped():
    assert GROUPED.size == "8 rows/2 experts N64 K128"
    assert (GROUPED.rows, GROUPED.expert_rows) == (8, (3, 0, 5))
    assert GROUPED.operand_elements == 8 * 128 + 3 * 64 * 128  # every expert's weights are drawn
    assert GROUPED.gemm_dims() == [("gate_up", 64, 128)]
    assert GROUPED.shape_info() == {"n": 64, "k": 128, "tokens_per_expert": [3, 0, 5], "active_experts": 2}


def test_moe():
    assert MOE.size == "3 tok x top2 H128 I64"
    assert (MOE.rows, MOE.expert_rows) == (6, (1, 3, 1, 1))
    assert MOE.operand_elements == 3 * 128 + 3 * 4 * 64 * 128
    assert MOE.gemm_dims() == [("gate_up", 128, 128), ("down", 128, 64)]
    assert MOE.shape_info() == {"hidden": 128, "inter": 64, "num_tokens": 3, "top_k": 2, "active_experts": 4}
