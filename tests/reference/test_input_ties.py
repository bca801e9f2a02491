"""The near-tie term for a kernel that quantizes its own activations (``reference.input_ties`` and
``reference.moe.input_tie_term``): zero off ties, the derived size on a planted tie, and large enough
to cover a kernel that rounds the tie the other way."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fp4bench import formats
from fp4bench.reference.input_ties import input_deviation, off_ties, requant_moves
from fp4bench.reference.moe import input_tie_term, moe_error_bound, reference_moe
from fp4bench.workload.operands import dequantize, make_operands
from fp4bench.workload.problems import MoEProblem

pytestmark = pytest.mark.usefixtures("one_thread")


def _row(*head: float) -> torch.Tensor:
    """One 16-value block: ``head`` then zeros (bf16-exact values)."""
    x = torch.zeros(16)
    x[:len(head)] = torch.tensor(head)
    return x


def test_only_tied_elements_move_by_their_step_and_a_tied_scale_moves_its_block():
    # gs = 1: block 0 scale e4m3(12/6) = 2, 5/2 = 2.5 is the E2M1 tie of 2 and 3;
    # block 1 has 12.75/6 = 2.125, the E4M3 midpoint of 2 and 2.25; block 2: 4.5/2 = 2.25, no tie
    x = torch.cat([_row(12.0, 5.0), _row(12.75, 1.0), _row(12.0, 4.5)]).reshape(1, 48).to(torch.bfloat16)
    dev = input_deviation(x, 1.0).reshape(3, 16)
    assert torch.equal(dev[0], _row(0.0, 2.0))            # 2.5 -> 2 or 3: one step (1) times SF = 2
    assert torch.equal(dev[1], torch.full((16,), 4.5))   # either scale: 2 * max(2, 2.25) / gs
    assert torch.equal(dev[2], torch.zeros(16))


@pytest.mark.parametrize("seed", [0, 3])
def test_off_the_open_blocks_a_few_ulps_of_global_scale_change_no_byte(seed):
    """A kernel whose encode scale is a few fp32 ulps off ours (its reciprocal of the decode scale)
    quantizes every block outside the open ones to our bytes; the open blocks are few."""
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    gs = formats.nvfp4_global_scale(x.float().abs().amax())
    open_block = input_deviation(x, gs).reshape(16, 16, 16).amax(-1) > 0
    assert int(open_block.sum()) <= 0.05 * open_block.numel()
    ours = formats.nvfp4_quantize(x, gs)
    for ulps in (-8, -1, 1, 8):
        theirs = formats.nvfp4_quantize(x, gs * (1 + ulps * 2.0 ** -23))
        differs = (theirs.data != ours.data).reshape(16, 16, 8).any(-1) | (theirs.scales != ours.scales)
        assert not bool((differs & ~open_block).any()), ulps


def test_a_kernel_rounding_a_tie_the_other_way_stays_within_the_bound():
    """Plant an E2M1 tie in token 0, flip that code (what a kernel may do), and compare the layer on
    the flipped bytes to the reference on ours: inside the bound with the term, and the term is
    what carries it (it is nonzero only for token 0)."""
    p = MoEProblem(hidden=128, inter=64, num_experts=4, top_k=2, topk_ids=((0, 1), (2, 3), (1, 2)))
    ops = make_operands(p, "nvfp4", "nvfp4", seed=5)
    a = ops.a.clone()
    a[0, :16] = _row(12.0, 5.0).to(torch.bfloat16)
    a[1, 16:32] = _row(2688.0).to(torch.bfloat16)  # global amax 2688: gs = 1 exactly
    ops = dataclasses.replace(ops, a=a, qa=formats.nvfp4_quantize(a))
    assert float(ops.qa.global_scale) == 1.0 and float(dequantize(ops.qa)[0, 1]) == 4.0  # 2.5 -> 2 (even)
    flipped = ops.qa.data.clone()
    flipped[0, 0] = (flipped[0, 0] & 0x0F) | (0x5 << 4)  # element 1: code 4 (2.0) -> 5 (3.0): 6.0 decoded
    kernel_ops = dataclasses.replace(ops, qa=dataclasses.replace(ops.qa, data=flipped))
    opts = {"intermediate": "nvfp4-fused", "fc2_act_global_scale": torch.tensor(50.0)}
    ref = reference_moe(ops, **opts)
    got = reference_moe(kernel_ops, **opts)
    assert float((got - ref).abs()[0].max()) > 0
    term = input_tie_term(ops, dequantize(ops.qa), ops.a, opts["fc2_act_global_scale"])
    open_token = input_deviation(ops.a, ops.qa.global_scale).amax(dim=1) > 0
    assert bool(open_token[0]) and bool((term[0] > 0).any())
    assert bool((term[~open_token] == 0).all())  # a token without a tie adds nothing
    # the term alone accounts for the flip (beside both sides' bf16 stores of GEMM2's rows)
    assert bool(((got - ref).abs() <= term + 2.0 ** -7 * (got.abs() + ref.abs())).all())
    assert bool(((got - ref).abs() <= moe_error_bound(ops, ref, **opts, kernel_input=ops.a)).all())


def test_the_option_needs_nvfp4_activations():
    p = MoEProblem(hidden=128, inter=64, num_experts=2, top_k=1, topk_ids=((0,), (1,)))
    ops = make_operands(p, "bf16", "nvfp4", seed=0)
    with pytest.raises(ValueError, match="kernel_input needs NVFP4 activations"):
        moe_error_bound(ops, torch.zeros(2, 128), kernel_input=ops.a)


def test_a_kernel_input_that_does_not_quantize_to_qa_is_refused():
    p = MoEProblem(hidden=128, inter=64, num_experts=2, top_k=1, topk_ids=((0,), (1,)))
    ops = make_operands(p, "nvfp4", "nvfp4", seed=0)
    with pytest.raises(ValueError, match="not the quantization of kernel_input"):
        reference_moe(ops, kernel_input=ops.a * 2)


@pytest.mark.parametrize("seed", [0, 3])
def test_values_moved_off_ties_keep_our_bytes_and_open_no_block(seed):
    x = torch.randn(16, 256, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    x[0, :48] = torch.cat([_row(12.0, 5.0), _row(12.75, 1.0), _row(12.0, -5.0)]).to(torch.bfloat16)
    gs = torch.tensor(1.0)
    assert bool((input_deviation(x, gs) > 0).any())
    moved = off_ties(x, gs)
    ours, theirs = formats.nvfp4_quantize(x, gs), formats.nvfp4_quantize(moved, gs)
    assert torch.equal(theirs.data, ours.data) and torch.equal(theirs.scales.view(torch.uint8), ours.scales.view(torch.uint8))
    assert not bool((input_deviation(moved, gs) > 0).any())
    ulps = (moved.view(torch.int16).int() - x.view(torch.int16).int()).abs()
    assert int(ulps.max()) == 1 and int((ulps > 0).sum()) <= 0.05 * x.numel()
    assert float(moved[0, 1]) < 5.0 and float(moved[0, 33]) > -5.0  # 2.5 -> 2 (even): toward the code taken



def test_a_moved_value_moves_its_code_only_across_a_rounding_boundary():
    v = _row(12.0, 4.9, 3.2).reshape(1, 16)       # gs = 1, SF = 2: y = 6, 2.45, 1.6
    moved = requant_moves(v, torch.full((1, 16), 0.2), 1.0)[0]
    assert float(moved[1]) == 2.0                 # 2.45 +- 0.1 crosses 2.5: one step (1) * SF
    assert float(moved[2]) == 0.0                 # 1.6 +- 0.1 stays in (1.25, 1.75): same code
    assert float(requant_moves(v, torch.full((1, 16), 1.0), 1.0)[0, 2]) > 0  # 1.6 +- 0.5 crosses
