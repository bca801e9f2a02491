"""Contract tests of ``sgl-kernel`` / ``sgl-kernel-group`` against fake sgl_kernel ops (CPU only).

sgl_kernel itself cannot be imported here (torch 2.9.1 ABI, libcuda.so.1): the fakes in
tests/fakes/sgl_kernel.py implement the op semantics, including the grouped op's own
per-expert scale addressing.
"""

from __future__ import annotations

import pytest
import torch

from fakes.arch import pretend
from fakes.checks import assert_matches_reference, excess
from fakes.decode import FakeContractError, Misread
from fakes.sgl_kernel import FakeSglKernel
from fp4bench import formats
from fp4bench.backends.builtin import sgl_kernel
from fp4bench.backends.builtin.sgl_kernel import SglKernelDense, SglKernelGroup, dense_tile
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem

CPU = torch.device("cpu")
DENSE = [GemmProblem(200, 96, 96), GemmProblem(1, 64, 64), GemmProblem(300, 160, 256)]
# idle experts (0 tokens), skewed counts, an expert spanning two 128-row scale tiles, one expert
GROUPED = [GroupedProblem((0, 5, 130, 0, 1, 7), 128, 64), GroupedProblem((300, 0, 2), 256, 128),
           GroupedProblem((3,), 128, 64)]


def _fake(monkeypatch, gpu="B200", **kw):
    pretend(monkeypatch, gpu)
    return FakeSglKernel(sm=120 if gpu == "RTX PRO 6000" else 100, **kw)


@pytest.mark.parametrize("gpu", ["B200", "RTX PRO 6000"])
@pytest.mark.parametrize("problem", DENSE, ids=lambda p: p.id)
def test_dense_matches_reference(monkeypatch, gpu, problem):
    fake = _fake(monkeypatch, gpu)
    be = SglKernelDense(api=fake.api())
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=problem.m)
    prep = be.prepare(problem, ops, CPU)
    prep.out.fill_(float("nan"))
    (tactic,) = be.tactics(problem, CPU)
    assert be.run(prep, tactic) is prep.out
    assert_matches_reference(prep.out, ops)
    assert fake.calls == 1


@pytest.mark.parametrize("gpu", ["B200", "RTX PRO 6000"])
@pytest.mark.parametrize("problem", GROUPED, ids=lambda p: p.id)
def test_grouped_matches_reference(monkeypatch, gpu, problem):
    fake = _fake(monkeypatch, gpu)
    be = SglKernelGroup(api=fake.api())
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=len(problem.tokens_per_expert))
    prep = be.prepare(problem, ops, CPU)
    prep.out.fill_(float("nan"))
    be.run(prep, be.tactics(problem, CPU)[0])
    assert_matches_reference(prep.out, ops)


def test_grouped_params_have_the_documented_dtypes_and_offsets(monkeypatch):
    be = SglKernelGroup(api=_fake(monkeypatch).api())
    problem = GroupedProblem((0, 5, 130, 0, 1, 7), 128, 64)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=2)
    args = be.prepare(problem, ops, CPU).args
    p = args["params"]
    assert p["ab_strides"].dtype == torch.int64 and p["ab_strides"].tolist() == [64] * 6
    assert p["c_strides"].dtype == torch.int64 and p["c_strides"].tolist() == [128] * 6
    assert p["problem_sizes"].dtype == torch.int32
    assert p["problem_sizes"].tolist() == [[m, 128, 64] for m in (0, 5, 130, 0, 1, 7)]
    assert p["expert_offsets"].dtype == torch.int32 and p["expert_offsets"].tolist() == [0, 0, 5, 135, 135, 136, 143]
    # A-scale blocks start on 128-row boundaries: pad128 of (0, 5, 130, 0, 1, 7) = (0, 128, 256, 0, 128, 128)
    assert p["blockscale_offsets"].dtype == torch.int32
    assert p["blockscale_offsets"].tolist() == [0, 0, 128, 384, 384, 512, 640]
    assert args["a_blockscale"].shape == (640, 4) and args["a_blockscale"].dtype == torch.float8_e4m3fn
    assert args["b_blockscale"].shape == (6, 128, 4)
    assert args["expert_offsets_op"].tolist() == [0, 0, 5, 135, 135, 136]  # the op gets [:-1]
    gs_w = ops.qw.global_scale.reshape(-1)
    assert args["alphas"].shape == (6,) and torch.equal(args["alphas"], 1.0 / (ops.qa.global_scale * gs_w))


def test_dense_scales_are_exactly_padded(monkeypatch):
    be = SglKernelDense(api=_fake(monkeypatch).api())
    problem = GemmProblem(200, 96, 96)
    args = be.prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU).args
    assert args["scale_a"].shape == (formats.pad128(200), 8)
    assert args["scale_b"].shape == (128, 8)
    assert args["b"].shape == (96, 48) and args["b"].is_contiguous()  # TN: weights as stored


@pytest.mark.parametrize("misread", [Misread(scales_linear=True), Misread(high_nibble_first=True),
                                     Misread(ignore_global=True)], ids=["linear-scales", "nibbles", "no-alpha"])
def test_misdecoding_fails_the_comparison(monkeypatch, misread):
    fake = _fake(monkeypatch, misread=misread)
    dense, group = GemmProblem(200, 96, 96), GroupedProblem((0, 5, 130, 0, 1, 7), 128, 64)
    for be, problem in ((SglKernelDense(api=fake.api()), dense), (SglKernelGroup(api=fake.api()), group)):
        ops = make_operands(problem, "nvfp4", "nvfp4", seed=4)
        out = be.run(be.prepare(problem, ops, CPU), be.tactics(problem, CPU)[0])
        assert excess(out, ops) > 10, be.name


def test_group_gate_is_needed_for_unpadded_addressing(monkeypatch):
    """K % 64 != 0: the op's unpadded per-expert scale addressing reads the wrong bytes, so the
    adapter refuses the problem; bypassing the gate shows the library result is wrong."""
    fake = _fake(monkeypatch)
    problem = GroupedProblem((0, 5, 130, 0, 1, 7), 128, 96)
    gated = SglKernelGroup(api=fake.api())
    assert "K % 64" in gated.unsupported_reason(problem)
    with pytest.raises(ValueError, match="K % 64"):
        gated.prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU)

    class Ungated(SglKernelGroup):
        def unsupported_reason(self, problem):
            return None

    ops = make_operands(problem, "nvfp4", "nvfp4", seed=9)
    be = Ungated(api=fake.api())
    out = be.run(be.prepare(problem, ops, CPU), be.tactics(problem, CPU)[0])
    assert excess(out, ops) > 10


def test_fake_ops_reject_what_sgl_kernel_rejects(monkeypatch):
    fake = _fake(monkeypatch)
    be = SglKernelDense(api=fake.api())
    problem = GemmProblem(200, 96, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4")
    a = be.prepare(problem, ops, CPU).args
    out = torch.empty(200, 96, dtype=torch.bfloat16)
    bad = [
        dict(scale_a=ops.qa.scales),                                  # linear, unpadded
        dict(scale_a=a["scale_a"].reshape(-1)),                       # right bytes, not [pad128, pad4]
        dict(scale_b=a["scale_b"].view(torch.uint8)),                 # uint8 instead of e4m3
        dict(b=a["b"].T.contiguous().T),                              # non-contiguous weights
        dict(alpha=a["alpha"].double()),
    ]
    for change in bad:
        kw = {**a, **change}
        with pytest.raises(FakeContractError):
            fake.scaled_fp4_mm(out, kw["a"], kw["b"], kw["scale_a"], kw["scale_b"], kw["alpha"])
            pytest.fail(f"fake accepted {list(change)}")

    group = SglKernelGroup(api=fake.api())
    gp = GroupedProblem((0, 5, 130), 128, 64)
    g = group.prepare(gp, make_operands(gp, "nvfp4", "nvfp4"), CPU).args
    p = g["params"]
    gout = torch.empty(135, 128, dtype=torch.bfloat16)
    base = [gout, g["a"], g["b"], g["a_blockscale"], g["b_blockscale"], g["alphas"], p["ab_strides"],
            p["c_strides"], p["problem_sizes"], g["expert_offsets_op"], g["sf_offsets_op"]]
    bad_group = {
        9: p["expert_offsets"],                        # [E+1] instead of [:-1]
        6: p["ab_strides"].to(torch.int32),            # strides must be int64
        8: p["problem_sizes"].to(torch.int64),         # problem sizes must be int32
        3: g["a_blockscale"].reshape(1, 384, 4),       # A scales must be 2-D
        10: torch.tensor([0, 5, 135], dtype=torch.int32),  # unpadded scale offsets
    }
    for i, value in bad_group.items():
        args = list(base)
        args[i] = value
        with pytest.raises(FakeContractError):
            fake.fp4_group_mm(*args)
            pytest.fail(f"fake accepted argument {i}")
    fake.fp4_group_mm(*base)


def test_unsupported_shapes():
    dense, group = SglKernelDense(api=FakeSglKernel().api()), SglKernelGroup(api=FakeSglKernel().api())
    assert dense.unsupported_reason(GemmProblem(8, 64, 64)) is None
    assert "K=48 is not a multiple of 32" in dense.unsupported_reason(GemmProblem(8, 64, 48))
    assert "N=48" in dense.unsupported_reason(GemmProblem(8, 48, 64))
    assert "does not run grouped" in dense.unsupported_reason(GroupedProblem((1,), 64, 64))
    assert group.unsupported_reason(GroupedProblem((1, 0), 128, 64)) is None
    assert "N % 128" in group.unsupported_reason(GroupedProblem((1, 0), 96, 64))
    assert "at most 1024 experts" in group.unsupported_reason(GroupedProblem((1,) * 1025, 128, 64))
    assert "does not run dense" in group.unsupported_reason(GemmProblem(8, 64, 64))


@pytest.mark.parametrize(("m", "sm", "tile"), [
    (1, 100, "128x256x256-1sm-c1x4"), (128, 100, "128x256x256-1sm-c1x4"), (129, 100, "256x256x256-2sm-c2x4"),
    (256, 100, "256x256x256-2sm-c2x4"), (257, 100, "256x256x256-2sm-c4x4"),
    (1, 120, "128x128x128"), (256, 120, "128x128x128"), (257, 120, "256x128x128"),
])
def test_dense_tile_follows_m(m, sm, tile):
    assert dense_tile(m, sm) == tile


def test_tactic_labels_name_the_hard_coded_tiles(monkeypatch):
    pretend(monkeypatch, "B200")
    assert SglKernelDense().tactics(GemmProblem(64, 64, 64), CPU)[0].label == "auto:128x256x256-1sm-c1x4"
    assert SglKernelGroup().tactics(GroupedProblem((1,), 128, 64), CPU)[0].label == "auto:128x128x128-1sm-c1x1"
    pretend(monkeypatch, "RTX PRO 6000")
    assert SglKernelDense().tactics(GemmProblem(300, 64, 64), CPU)[0].label == "auto:256x128x128"
    assert SglKernelGroup().tactics(GroupedProblem((1,), 128, 64), CPU)[0].label == "auto:128x128x128-pingpong"


def test_module_registers_both_backends():
    assert [b.name for b in sgl_kernel.BACKENDS] == ["sgl-kernel", "sgl-kernel-group"]
