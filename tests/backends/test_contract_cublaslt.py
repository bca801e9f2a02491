"""Contract tests of ``cublaslt`` (torch._scaled_mm v1), ``cublaslt-v2`` and ``cublaslt-v2-mxfp4``
(F.scaled_mm) against a fake of the torch ops, plus torch's own meta-tensor checks.

CPU torch has no FP4 scaled-mm kernel, but its meta kernels run the real argument checks
(alignment, column-major b, scale element counts, recipe/swizzle combinations) and give the
output shape: the arguments ``prepare`` builds are fed to them unchanged.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from fakes.arch import pretend
from fakes.checks import assert_matches_reference, excess
from fakes.decode import FakeContractError, Misread
from fakes.torch_scaled_mm import FakeTorchScaledMM
from fp4bench.backends.builtin import cublaslt
from fp4bench.backends.base import TacticUnsupported
from fp4bench.backends.builtin.cublaslt import CublasLtV1, CublasLtV2, CublasLtV2MXFP4, TorchScaledMMAPI, load_torch_scaled_mm
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem

CPU = torch.device("cpu")
META = torch.device("meta")
# M, N not multiples of 128; K=96: 6 NVFP4 / 3 MXFP4 scale columns (padded to 8 / 4)
SHAPES = [GemmProblem(200, 48, 96), GemmProblem(1, 16, 32), GemmProblem(130, 144, 256)]
# name -> (class, format, bf16 roundings: v1 rounds the kernel output, then out * alpha)
VARIANTS = {"v1": (CublasLtV1, "nvfp4", 2), "v2": (CublasLtV2, "nvfp4", 1), "mxfp4": (CublasLtV2MXFP4, "mxfp4", 1)}


def _run(be, problem, ops, device=CPU):
    prep = be.prepare(problem, ops, device)
    if device != META:
        prep.out.fill_(float("nan"))
    out = be.run(prep, be.tactics(problem, device)[0])
    assert out is prep.out
    return out


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: p.id)
def test_output_matches_reference(monkeypatch, variant, problem):
    cls, fmt, roundings = VARIANTS[variant]
    pretend(monkeypatch, "B200")
    fake = FakeTorchScaledMM()
    ops = make_operands(problem, fmt, fmt, seed=problem.m + 1)
    out = _run(cls(api=fake.api()), problem, ops)
    assert_matches_reference(out, ops, roundings=roundings)
    assert fake.calls == 1


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_real_torch_meta_checks_accept_the_prepared_arguments(monkeypatch, variant):
    """torch's meta kernels validate layouts exactly as the CUDA path does before launching."""
    cls, fmt, _ = VARIANTS[variant]
    pretend(monkeypatch, "B200")

    def v1(a, b, sa, sb, out):
        return out.copy_(torch._scaled_mm(a, b, sa, sb, out_dtype=out.dtype))

    def f_scaled_mm(a, b, sa, ra, wa, sb, rb, wb, out):
        res = F.scaled_mm(a, b, sa, [F.ScalingType(r) for r in ra], sb, [F.ScalingType(r) for r in rb],
                          [F.SwizzleType(s) for s in wa], [F.SwizzleType(s) for s in wb], output_dtype=out.dtype)
        return out.copy_(res)

    # From torch 2.14 on ``_scaled_mm_v2`` is a structured op: its Meta kernel validates the scales
    # and the Python meta behind F.scaled_mm no longer does; torch 2.13 has no Meta kernel for the
    # op and validates in the Python meta. So v2 goes through the adapter's own binding
    # (``torch.ops.aten._scaled_mm_v2.out``) where that has a Meta kernel, else through F.scaled_mm.
    structured = torch._C._dispatch_has_kernel_for_dispatch_key("aten::_scaled_mm_v2.out", "Meta")
    v2 = load_torch_scaled_mm().scaled_mm_v2_out if structured else f_scaled_mm

    be = cls(api=TorchScaledMMAPI("meta", v1, v2))
    # torch 2.13's *meta* check for MXFP4 in _scaled_mm_v2 counts scale columns from the packed
    # K/2 (ceil(K/2/32)); its CUDA check (ScaledBlas.cpp, _scaled_mxfp4_mxfp4) and v1 use K/32.
    # The two agree only for K <= 128, so MXFP4 is checked on those shapes here.
    shapes = [p for p in SHAPES if fmt == "nvfp4" or p.k <= 128]
    for problem in shapes:
        out = _run(be, problem, make_operands(problem, fmt, fmt), META)
        assert out.shape == (problem.m, problem.n) and out.dtype == torch.bfloat16

    # and the meta checks are live: an unpadded (linear) scale is rejected by torch itself
    problem = SHAPES[0]
    prep = be.prepare(problem, make_operands(problem, fmt, fmt), META)
    key = "scale_a"
    good = prep.args[key]
    wrong = torch.empty(good[0].numel() - 1 if isinstance(good, list) else good.numel() - 1,
                        dtype=(good[0] if isinstance(good, list) else good).dtype, device=META)
    prep.args[key] = [wrong, *good[1:]] if isinstance(good, list) else wrong
    # torch <= 2.13 raises RuntimeError, the structured meta of torch >= 2.14 ValueError
    with pytest.raises((RuntimeError, ValueError), match="must have|should have"):
        be.run(prep, be.tactics(problem, META)[0])


def test_v1_prepared_layout(monkeypatch):
    pretend(monkeypatch, "B200")
    problem = GemmProblem(200, 48, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=1)
    a = CublasLtV1(api=FakeTorchScaledMM().api()).prepare(problem, ops, CPU).args
    assert a["a"].dtype == torch.float4_e2m1fn_x2 and a["a"].shape == (200, 48)
    assert a["b"].dtype == torch.float4_e2m1fn_x2 and a["b"].shape == (48, 48) and a["b"].t().is_contiguous()
    assert a["scale_a"].numel() == 256 * 8 and a["scale_b"].numel() == 128 * 8
    assert a["alpha"].dim() == 0 and torch.equal(a["alpha"], 1.0 / (ops.qa.global_scale * ops.qw.global_scale))


def test_v2_passes_global_decode_scales(monkeypatch):
    pretend(monkeypatch, "B200")
    problem = GemmProblem(200, 48, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=1)
    a = CublasLtV2(api=FakeTorchScaledMM().api()).prepare(problem, ops, CPU).args
    assert a["recipe"] == [int(F.ScalingType.BlockWise1x16.value), int(F.ScalingType.TensorWise.value)] == [2, 0]
    assert a["swizzle"] == [int(F.SwizzleType.SWIZZLE_32_4_4.value), int(F.SwizzleType.NO_SWIZZLE.value)] == [1, 0]
    assert torch.equal(a["scale_a"][1], 1.0 / ops.qa.global_scale) and a["scale_a"][1].numel() == 1
    assert torch.equal(a["scale_b"][1], 1.0 / ops.qw.global_scale)


@pytest.mark.parametrize("variant", ["v1", "v2"])
@pytest.mark.parametrize("misread", [Misread(scales_linear=True), Misread(high_nibble_first=True)],
                         ids=["linear-scales", "nibbles"])
def test_misdecoding_fails_the_comparison(monkeypatch, variant, misread):
    cls, fmt, roundings = VARIANTS[variant]
    pretend(monkeypatch, "B200")
    problem = GemmProblem(200, 48, 96)
    ops = make_operands(problem, fmt, fmt, seed=3)
    out = _run(cls(api=FakeTorchScaledMM(misread=misread).api()), problem, ops)
    assert excess(out, ops, roundings) > 10


def test_v2_without_global_scales_fails_the_comparison(monkeypatch):
    pretend(monkeypatch, "B200")
    problem = GemmProblem(200, 48, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=3)
    out = _run(CublasLtV2(api=FakeTorchScaledMM(misread=Misread(ignore_global=True)).api()), problem, ops)
    assert excess(out, ops) > 10


def test_mxfp4_misread_fails_the_comparison(monkeypatch):
    pretend(monkeypatch, "B200")
    problem = GemmProblem(200, 48, 96)
    ops = make_operands(problem, "mxfp4", "mxfp4", seed=3)
    out = _run(CublasLtV2MXFP4(api=FakeTorchScaledMM(misread=Misread(scales_linear=True)).api()), problem, ops)
    assert excess(out, ops) > 10


def test_fake_rejects_what_torch_rejects(monkeypatch):
    pretend(monkeypatch, "B200")
    fake = FakeTorchScaledMM()
    problem = GemmProblem(200, 48, 96)
    a = CublasLtV1(api=fake.api()).prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU).args
    out = torch.empty(200, 48, dtype=torch.bfloat16)
    bad = [dict(b=a["b"].t()),                                       # row-major b
           dict(scale_a=a["scale_a"][:-1]),                          # wrong element count
           dict(scale_b=a["scale_b"].view(torch.uint8)),             # wrong dtype
           dict(a=a["a"].view(torch.uint8))]                         # uint8 instead of fp4x2
    for change in bad:
        kw = {**a, **change}
        with pytest.raises(FakeContractError):
            fake.scaled_mm_out(kw["a"], kw["b"], kw["scale_a"], kw["scale_b"], out)
            pytest.fail(f"fake accepted {list(change)}")


def test_mxfp4_not_implemented_is_tactic_unsupported(monkeypatch):
    pretend(monkeypatch, "B200")
    problem = GemmProblem(8, 16, 32)
    be = CublasLtV2MXFP4(api=FakeTorchScaledMM(mxfp4_raises=True).api())
    prep = be.prepare(problem, make_operands(problem, "mxfp4", "mxfp4"), CPU)
    with pytest.raises(TacticUnsupported, match="cublaslt-v2-mxfp4: MXFP4 scaling support"):
        be.run(prep, be.tactics(problem, CPU)[0])


def test_unsupported_shapes_and_formats(monkeypatch):
    pretend(monkeypatch, "B200")
    for cls in (CublasLtV1, CublasLtV2, CublasLtV2MXFP4):
        be = cls(api=FakeTorchScaledMM().api())
        assert be.unsupported_reason(GemmProblem(8, 16, 32)) is None
        assert "K=48 is not a multiple of 32" in be.unsupported_reason(GemmProblem(8, 16, 48))
        assert "N=40" in be.unsupported_reason(GemmProblem(8, 40, 64))
        assert "does not run grouped" in be.unsupported_reason(GroupedProblem((1,), 16, 32))
    problem = GemmProblem(8, 16, 32)
    with pytest.raises(TypeError, match="cublaslt: needs NVFP4"):
        CublasLtV1(api=FakeTorchScaledMM().api()).prepare(problem, make_operands(problem, "mxfp4", "mxfp4"), CPU)
    with pytest.raises(TypeError, match="cublaslt-v2-mxfp4: needs MXFP4"):
        CublasLtV2MXFP4(api=FakeTorchScaledMM().api()).prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU)


def test_module_registers_the_backends():
    assert [b.name for b in cublaslt.BACKENDS] == ["cublaslt", "cublaslt-v2", "cublaslt-v2-mxfp4"]
    assert "mul_(alpha)" in CublasLtV1.api and "timed" in CublasLtV1.api
