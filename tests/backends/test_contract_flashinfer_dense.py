"""Contract tests of ``flashinfer-cutlass`` against a fake CUTLASS FP4 runner (CPU, no FlashInfer).

The fake (tests/fakes/flashinfer.py) checks what FlashInfer checks and decodes the arguments the
way its kernels read them; the adapter's output must then equal ``fp4bench.reference.dense`` within the
tolerance derived in tests/fakes/checks.py.
"""

from __future__ import annotations

import pytest
import torch

from fakes.arch import pretend
from fakes.checks import assert_matches_reference, excess
from fakes.decode import FakeContractError, Misread
from fakes.flashinfer import FakeFlashInfer
from fp4bench.backends.builtin import flashinfer_dense
from fp4bench.backends.base import TacticUnsupported
from fp4bench.backends.builtin.flashinfer_dense import FlashInferDense
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, GroupedProblem

CPU = torch.device("cpu")
# M and N not multiples of 128; K=96 has 6 scale columns (padded to 8), K=64 exactly 4.
SHAPES = [GemmProblem(200, 96, 96), GemmProblem(1, 64, 64), GemmProblem(130, 160, 256)]


def _setup(monkeypatch, gpu="B200", **fake_kw):
    pretend(monkeypatch, gpu)
    fake = FakeFlashInfer(**fake_kw)
    return fake, FlashInferDense(api=fake.api())


@pytest.mark.parametrize("gpu", ["B200", "RTX PRO 6000"])
@pytest.mark.parametrize("problem", SHAPES, ids=lambda p: p.id)
def test_output_matches_reference(monkeypatch, gpu, problem):
    fake, be = _setup(monkeypatch, gpu)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=problem.m + problem.n)
    prep = be.prepare(problem, ops, CPU)
    tactic = be.tactics(problem, CPU)[6]  # t05 (the library's default comes first)
    prep.out.fill_(float("nan"))  # the call must write every element
    out = be.run(prep, tactic)
    assert out is prep.out
    assert_matches_reference(out, ops)
    assert fake.launches == [5]


def test_every_tactic_is_launched_explicitly(monkeypatch):
    fake, be = _setup(monkeypatch)
    problem = GemmProblem(3, 32, 32)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=7)
    prep = be.prepare(problem, ops, CPU)
    tactics = be.tactics(problem, CPU)
    assert [t.value for t in tactics] == [-1] + list(range(32))
    assert len({t.label for t in tactics}) == 33
    for t in tactics:
        prep.out.fill_(float("nan"))
        assert_matches_reference(be.run(prep, t), ops)
    assert fake.launches == [-1] + list(range(32))


def test_prepared_arguments_have_the_documented_layout(monkeypatch):
    _, be = _setup(monkeypatch)
    problem = GemmProblem(200, 96, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=3)
    a, b, a_sf, b_sf, alpha, out_dtype, out, block, nvfp4, ws = be.prepare(problem, ops, CPU).args["inputs"]
    assert a.dtype == torch.uint8 and a.shape == (200, 48) and a.is_contiguous()
    assert b.shape == (48, 96) and b.T.is_contiguous()                      # w_fp4.T view
    assert a_sf.shape == (256, 8) and a_sf.dtype == torch.float8_e4m3fn
    assert b_sf.shape == (8, 128) and b_sf.T.is_contiguous()                # w_sf.T of [pad128(N), pad4(K/16)]
    assert alpha.dtype == torch.float32 and alpha.numel() == 1
    expected = 1.0 / (ops.qa.global_scale.float() * ops.qw.global_scale.float())
    assert torch.equal(alpha.reshape(()), expected)
    assert (out_dtype, block, nvfp4) == (torch.bfloat16, 16, True)
    assert out.shape == (200, 96) and out.dtype == torch.bfloat16
    assert ws.dtype == torch.uint8


@pytest.mark.parametrize(("kind", "text"), [
    ("workspace", "Requested workspace size insufficient"), ("can_implement", "FP4 Gemm cutlass kernel will fail for params"),
    ("init", "Failed to initialize cutlass FP4 gemm"), ("run", "Failed to run cutlass FP4 gemm")])
def test_failing_tactic_surfaces_as_tactic_unsupported(monkeypatch, kind, text):
    """Every per-tactic error the runner throws is recorded as data, not a crash of the case."""
    _, be = _setup(monkeypatch, failing={3: kind})
    problem = GemmProblem(4, 64, 64)
    prep = be.prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU)
    tactics = {t.label: t for t in be.tactics(problem, CPU)}
    with pytest.raises(TacticUnsupported, match=f"t03: \\[FP4 gemm Runner\\] {text}"):
        be.run(prep, tactics["t03"])
    be.run(prep, tactics["t04"])  # the others still run


@pytest.mark.parametrize(("gpu", "config"), [("B200", "CtaShape128x128x256B_Cluster2x4x1"),
                                             ("RTX PRO 6000", "CtaShape128x128x128B_dp")])
def test_default_row_runs_what_the_library_runs_without_a_tactic(monkeypatch, gpu, config):
    """The quick run's one row is tactic -1 on every architecture, not tactic 0."""
    from fp4bench.run.sweep import quick_tactics

    fake, be = _setup(monkeypatch, gpu)
    problem = GemmProblem(4, 64, 64)
    ops = make_operands(problem, "nvfp4", "nvfp4")
    (row,) = quick_tactics(be.tactics(problem, CPU))
    assert (row.label, row.value, row.default) == ("default", -1, True)
    assert_matches_reference(be.run(be.prepare(problem, ops, CPU), row), ops)
    assert fake.launches == [-1] and fake.kernels[-1].endswith(config)


def test_other_runtime_errors_propagate(monkeypatch):
    """Only the runner's init failure means "tactic unsupported"; a contract violation is a bug."""
    _, be = _setup(monkeypatch)
    problem = GemmProblem(4, 64, 64)
    prep = be.prepare(problem, make_operands(problem, "nvfp4", "nvfp4"), CPU)
    prep.args["inputs"][1] = prep.args["inputs"][1].contiguous()  # b no longer a view of [N, K/2]
    with pytest.raises(FakeContractError, match="mat2 must be contiguous"):
        be.run(prep, be.tactics(problem, CPU)[1])


@pytest.mark.parametrize("misread", [Misread(scales_linear=True), Misread(high_nibble_first=True),
                                     Misread(ignore_global=True)], ids=["linear-scales", "nibbles", "no-alpha"])
def test_a_misdecoding_library_fails_the_comparison(monkeypatch, misread):
    """Negative control: the same comparison must fail when the decode is wrong."""
    _, be = _setup(monkeypatch, misread=misread)
    problem = GemmProblem(200, 96, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=11)
    out = be.run(be.prepare(problem, ops, CPU), be.tactics(problem, CPU)[0])
    assert excess(out, ops) > 10
    with pytest.raises(AssertionError, match="derived tolerance"):
        assert_matches_reference(out, ops)


def test_fake_rejects_what_flashinfer_rejects(monkeypatch):
    """The fake's checks are live: wrong layouts of each argument raise."""
    fake, be = _setup(monkeypatch)
    problem = GemmProblem(200, 96, 96)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=5)
    good = be.prepare(problem, ops, CPU).args["inputs"]
    runner = fake.api().fp4_runner(10, 0)
    linear_sf = ops.qw.scales.T  # unswizzled, unpadded
    bad = {
        "b not transposed view": (1, good[1].contiguous()),
        "b_descale linear": (3, linear_sf),
        "a_descale unpadded": (2, ops.qa.scales),
        "alpha 2 elements": (4, torch.ones(2)),
        "alpha fp64": (4, good[4].double()),
        "out non-contiguous": (6, torch.empty(96, 200, dtype=torch.bfloat16).T),
    }
    for what, (i, value) in bad.items():
        inputs = list(good)
        inputs[i] = value
        with pytest.raises(FakeContractError):
            runner(inputs=inputs, tactic=0)
            pytest.fail(f"fake accepted: {what}")
    runner(inputs=list(good), tactic=0)


def test_unsupported_shapes_name_the_alignment():
    be = FlashInferDense(api=FakeFlashInfer().api())
    assert be.unsupported_reason(GemmProblem(8, 64, 64)) is None
    assert "K=48 is not a multiple of 32" in be.unsupported_reason(GemmProblem(8, 64, 48))
    assert "N=80" in be.unsupported_reason(GemmProblem(8, 80, 64))
    assert "does not run grouped" in be.unsupported_reason(GroupedProblem((1, 2), 64, 64))
    with pytest.raises(ValueError, match="K=48 is not a multiple of 32"):
        be.prepare(GemmProblem(8, 64, 48), make_operands(GemmProblem(8, 64, 48), "nvfp4", "nvfp4"), CPU)


def test_mxfp4_operands_are_rejected_by_name(monkeypatch):
    _, be = _setup(monkeypatch)
    problem = GemmProblem(8, 64, 64)
    with pytest.raises(TypeError, match="flashinfer-cutlass: needs NVFP4"):
        be.prepare(problem, make_operands(problem, "mxfp4", "mxfp4"), CPU)


def test_real_flashinfer_accepts_the_prepared_arguments(monkeypatch):
    """Where flashinfer-python is installed, its own Python-level checks pass on our arguments,
    and its module choice matches FlashInfer's gemm_base.py (pure Python, nothing is built or launched)."""
    gemm_base = pytest.importorskip("flashinfer.gemm.gemm_base")
    _, be = _setup(monkeypatch)
    problem = GemmProblem(200, 96, 96)
    a, b, a_sf, b_sf, alpha, out_dtype, out, block, nvfp4, _ = be.prepare(
        problem, make_operands(problem, "nvfp4", "nvfp4"), CPU).args["inputs"]
    assert gemm_base._check_mm_fp4_problem_size(a, b, a_sf, b_sf, alpha, out_dtype, out, block, False,
                                                "cutlass", nvfp4) is True
    with pytest.raises(ValueError, match="Unsupported SM major version: 9"):
        gemm_base.get_cutlass_fp4_gemm_module(9, 0)
    import flashinfer

    assert flashinfer.mm_fp4.is_backend_supported("cutlass", 100)
    assert not flashinfer.mm_fp4.is_backend_supported("cutlass", 90)
    assert gemm_base.DEFAULT_WORKSPACE_SIZE == 40 * 1024 * 1024


def test_module_registers_the_backend():
    assert [b.name for b in flashinfer_dense.BACKENDS] == ["flashinfer-cutlass"]
