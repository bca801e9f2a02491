"""Quantizer rows (problem kind ``quant``): the problem, the bit-exact check with its named
failures, the library adapters on the fake quantizers, and the end-to-end rows."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from fakes import flashinfer_releases as releases
from fakes.arch import pretend
from fakes.quantize import ISSUE_3398_M, FakeQuantizer, encode, swizzle
from fp4bench import formats
from fp4bench.backends.builtin._quant import QuantOutput
from fp4bench.backends.builtin.e2e import PAIRS, EndToEnd
from fp4bench.backends.builtin.flashinfer_dense import FlashInferDense
from fp4bench.backends.builtin.flashinfer_quant import (FlashInferFp4Quantize, FlashInferNvfp4Quantize,
                                                FlashInferQuantAPI)
from fp4bench.backends.builtin.sgl_kernel_quant import SglKernelFp4Quant, SglQuantAPI
from fp4bench.run.case import FAILED, MEASURED, CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.measure.verify_quant import (OK, WRONG_GLOBAL_SCALE, WRONG_PAYLOAD, WRONG_SCALES, ZERO_SCALES,
                                           compare_quantized)
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, MoEProblem, Origin, QuantProblem, quant_problems
from fp4bench.run.sweep import SweepOptions, problems_for
from fp4bench.run.worker.protocol import decode_problem, encode_problem

CPU = torch.device("cpu")
FAST = TimingConfig(mode="cpu", warmup_calls=0, min_samples=3, max_samples=3, time_budget_s=0.0,
                    target_rel_ci=None)


def library_bytes(x: torch.Tensor, gs: torch.Tensor | None = None) -> tuple[formats.NVFP4, QuantOutput]:
    """Ours (fp4bench.formats) and the independent fake encoder's bytes for the same input."""
    ours = formats.nvfp4_quantize(x, global_scale=gs)
    data, sf = encode(x, float(ours.global_scale))
    return ours, QuantOutput(data, swizzle(sf), ours.global_scale.reshape(1))


# -- the problem kind --------------------------------------------------------------------------

def test_quant_problem_describes_itself_and_survives_the_worker_protocol():
    p = QuantProblem(384, 2048, Origin("glm-5", 384, 1, "uniform", "shared_gate_up"))
    assert p.kind == "quant" and p.id.endswith("-quant-m384k2048") and p.gemm_dims() == []
    assert p.bytes_moved() == 384 * 2048 * (2 + 0.5 + 1 / 16)
    assert decode_problem(encode_problem(p)) == p
    with pytest.raises(ValueError, match="QuantProblem.k"):
        QuantProblem(4, 0)


def test_each_dense_gemm_and_moe_layer_implies_one_activation_quantization():
    dense = GemmProblem(64, 512, 256, Origin(role="shared_down"))
    moe = MoEProblem(hidden=256, inter=128, num_experts=4, top_k=2, topk_ids=((0, 1), (2, 3), (0, 3)))
    got = quant_problems([dense, moe])
    assert [(q.m, q.k, q.origin.role) for q in got] == [(64, 256, "shared_down"), (3, 256, "")]


def test_the_sweep_draws_quant_rows_only_when_the_kind_is_selected():
    base = SweepOptions(models=("glm-5",), batches=(64,))
    assert not [p for p in problems_for(base) if p.kind == "quant"]
    quant = [p for p in problems_for(dataclasses.replace(base, kinds=("quant",)))]
    assert quant and all(p.kind == "quant" for p in quant)
    assert {p.origin.role for p in quant} == {"shared_gate_up", "shared_down", "moe"}
    full = problems_for(dataclasses.replace(base, kinds=("quant",), full=True))
    assert {p.m for p in full if p.origin.routing == "dense-sweep"} >= ISSUE_3398_M


# -- the bit-exact check -----------------------------------------------------------------------

@pytest.mark.parametrize("m,k", [(1, 256), (7, 64), (200, 96), (384, 2048)])
def test_an_independent_encoder_matches_formats_bit_exact_on_random_data(m, k):
    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(m + k)) * 3).to(torch.bfloat16)
    ours, lib = library_bytes(x)
    assert compare_quantized(lib, ours, "128x4").kind == OK


def test_edge_blocks_zeros_max_magnitude_and_subnormal_scales_are_bit_exact():
    x = torch.randn(4, 80, generator=torch.Generator().manual_seed(1)).clamp(-1, 1)
    x[0, 0] = 1.0                          # amax 1: the global scale is 2688
    x[0, 16:32] = 0.0                      # a zeros-only block: scale 0, codes 0
    x[1, :] = 0.0                          # a zeros-only row
    x[2, 16:32] *= 2.0 ** -16              # 448 * 2^-16: an E4M3-subnormal block scale
    x[2, 32:48] *= 1e-7                    # below 2^-10 after scaling: the scale rounds to 0
    x[3, 48:64] = torch.tensor([6.0, -6.0, 0.25, -0.25, 0.75, 1.25, 1.75, 2.5,
                                3.5, 5.0, -5.0, -3.5, 0.0, -0.0, 3.0, -1e-3]) / 6  # RNE ties
    x = x.to(torch.bfloat16)
    ours, lib = library_bytes(x)
    sf = ours.scales.view(torch.uint8)
    assert sf[0, 1] == 0 and bool((sf[1] == 0).all()) and sf[2, 2] == 0
    assert 0 < int(sf[2, 1]) < 8, "a subnormal E4M3 scale (exponent field 0) was meant to be drawn"
    assert compare_quantized(lib, ours, "128x4").kind == OK
    big = torch.randn(3, 32, generator=torch.Generator().manual_seed(2))
    big[1, 5] = -3.0e38                    # near the bf16 maximum (the global scale is tiny)
    ours, lib = library_bytes(big.to(torch.bfloat16))
    assert compare_quantized(lib, ours, "128x4").kind == OK


def test_nan_input_is_refused_by_our_quantizer_and_a_nan_scale_byte_is_wrong_scales():
    x = torch.randn(2, 32).to(torch.bfloat16)
    bad = x.clone()
    bad[0, 3] = float("nan")
    with pytest.raises(ValueError):
        formats.nvfp4_quantize(bad)
    ours, lib = library_bytes(x)
    lib.scales.view(-1)[formats.sf_offset_128x4(1, 1, 2)] = 0x7F  # e4m3 NaN
    res = compare_quantized(lib, ours, "128x4")
    assert res.kind == WRONG_SCALES and "rows 1" in res.detail


def test_minus_zero_codes_are_accepted_only_in_zero_scale_blocks():
    x = torch.randn(2, 32, generator=torch.Generator().manual_seed(3))
    x[0, :16] = 0.0
    x = x.to(torch.bfloat16)
    ours, lib = library_bytes(x)
    lib.data[0, 0] = 0x88                   # -0, -0 in the zero-scale block: same decoded values
    assert compare_quantized(lib, ours, "128x4").kind == OK
    nz = (ours.data[1] & 0xF) != 0x8
    col = int(nz.nonzero()[0])
    lib.data[1, col] = (lib.data[1, col] & 0xF0) | 0x8   # -0 where ours is a non-zero code
    assert compare_quantized(lib, ours, "128x4").kind == WRONG_PAYLOAD


def _case(m=256, k=128, seed=5):
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
    return library_bytes(x)


def test_a_flipped_code_is_wrong_payload_and_names_its_row():
    ours, lib = _case()
    lib.data[130, 5] ^= 0x01
    res = compare_quantized(lib, ours, "128x4")
    assert res.kind == WRONG_PAYLOAD and "rows 130" in res.detail and "1 of them one code apart" in res.detail


def test_linear_scales_handed_to_a_128x4_gemm_are_wrong_scales():
    ours, lib = _case()
    lib.scales = ours.scales.view(torch.uint8).clone()   # [M, K/16] linear: another byte count
    assert compare_quantized(lib, ours, "128x4").kind == WRONG_SCALES
    ours, lib = _case(m=128, k=64)                         # same byte count, other order
    lib.scales = ours.scales.view(torch.uint8).clone()
    assert compare_quantized(lib, ours, "128x4").kind == WRONG_SCALES


def test_a_band_of_zero_scale_rows_is_all_zero_scales_with_the_band_named():
    ours, lib = _case()
    sf = lib.scales.reshape(-1)
    rows = torch.arange(128, 256)[:, None]
    cols = torch.arange(8)[None, :]
    sf[formats.sf_offset_128x4(rows, cols, 8).reshape(-1)] = 0
    res = compare_quantized(lib, ours, "128x4")
    assert res.kind == ZERO_SCALES and "rows 128-255" in res.detail and "128/256" in res.detail


@pytest.mark.parametrize("gs", ["bf16", "inverse", "two"])
def test_a_global_scale_other_than_ours_is_wrong_global_scale(gs):
    ours, lib = _case()
    lib.global_scale = {"bf16": ours.global_scale.to(torch.bfloat16).reshape(1),
                        "inverse": (1 / ours.global_scale).reshape(1),
                        "two": ours.global_scale.reshape(1).repeat(2)}[gs]
    assert compare_quantized(lib, ours, "128x4").kind == WRONG_GLOBAL_SCALE


# -- adapters on the fake quantizers, through CaseRunner ------------------------------------------

def _flashinfer(fake: FakeQuantizer) -> FlashInferQuantAPI:
    return FlashInferQuantAPI(version=fake.version, fp4_quantize=fake.fp4_quantize,
                              nvfp4_quantize=fake.nvfp4_quantize, layout_128x4=releases.SfLayout.layout_128x4)


def _quantizers(fake: FakeQuantizer):
    return [FlashInferFp4Quantize(_flashinfer(fake)), FlashInferNvfp4Quantize(_flashinfer(fake)),
            SglKernelFp4Quant(SglQuantAPI("0.3.21", fake.scaled_fp4_quant))]


@pytest.mark.parametrize("gpu", ["B200", "RTX PRO 6000"])
def test_every_quantizer_row_passes_and_is_timed_on_correct_libraries(monkeypatch, gpu):
    pretend(monkeypatch, gpu)
    runner = CaseRunner(CPU, FAST)
    for be in _quantizers(FakeQuantizer()):
        (tactic,) = be.tactics(QuantProblem(64, 256), CPU)
        res = runner.run(be, QuantProblem(64, 256), tactic)
        assert res.status == MEASURED, (be.name, res.reason)
        assert res.extra_info["check"] == OK and res.timing.samples_s


@pytest.mark.parametrize("version", sorted(releases.RELEASES))
def test_every_flashinfer_quantizer_row_passes_under_each_release(monkeypatch, version):
    """The adapters' calls fit both releases' signatures (0.7.4's default backend "auto" included)."""
    pretend(monkeypatch, "B200")
    runner = CaseRunner(CPU, FAST)
    fake = FakeQuantizer(version=version)
    for be in (FlashInferFp4Quantize(_flashinfer(fake)), FlashInferNvfp4Quantize(_flashinfer(fake))):
        (tactic,) = be.tactics(QuantProblem(64, 256), CPU)
        res = runner.run(be, QuantProblem(64, 256), tactic)
        assert res.status == MEASURED and res.extra_info["check"] == OK, (version, be.name, res.reason)


def test_the_quantizer_fakes_take_only_their_releases_parameters():
    """Each release's ``fp4_quantize`` / ``nvfp4_quantize`` (fakes.flashinfer_releases, from the
    wheels): 0.7.4 adds the keyword-only ``batch_invariant`` and defaults ``backend`` to "auto";
    0.7.2.post1 raises TypeError for that keyword and its own ValueError for "auto"."""
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    gs = torch.ones(1)
    old, new = FakeQuantizer(version="0.7.2.post1"), FakeQuantizer(version="0.7.4")
    layout = releases.SfLayout.layout_128x4
    for name, call in (("fp4_quantize", lambda q, **kw: q.fp4_quantize(x, gs, nvfp4_4over6=None, **kw)),
                       ("nvfp4_quantize", lambda q, **kw: q.nvfp4_quantize(x, gs, layout, nvfp4_4over6=None, **kw))):
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'batch_invariant'$"):
            call(old, batch_invariant=False)
        with pytest.raises(TypeError, match=rf"^{name}\(\) got an unexpected keyword argument 'not_a_keyword'$"):
            call(new, not_a_keyword=1)
        with pytest.raises(ValueError, match=r"^Unknown backend: auto\. Must be 'cuda'"):
            call(old, backend="auto")
        with pytest.raises(ValueError, match=r"^Unknown backend: tvm\. "):
            call(new, backend="tvm")
        same = [torch.equal(p, q) for p, q in zip(call(old), call(new, batch_invariant=False, backend="auto"))]
        assert same == [True, True], name
    # batch_invariant is keyword-only in 0.7.4 (after the positional nvfp4_4over6)
    assert releases.RELEASES["0.7.4"].fp4_quantize.parameters["batch_invariant"].kind is releases._P.KEYWORD_ONLY
    assert releases.RELEASES["0.7.4"].fp4_quantize.parameters["backend"].default == "auto"
    assert releases.RELEASES["0.7.2.post1"].nvfp4_quantize.parameters["backend"].default == "cuda"


def test_the_3398_fault_fails_as_all_zero_scales_at_its_m_only(monkeypatch):
    pretend(monkeypatch, "RTX PRO 6000")
    runner = CaseRunner(CPU, FAST)
    be = FlashInferNvfp4Quantize(_flashinfer(FakeQuantizer(zero_scales=ISSUE_3398_M, zero_scales_k=frozenset({2048}))))
    for m in (128, 384, 512, 1024):
        for k in (256, 2048):
            res = runner.run(be, QuantProblem(m, k), be.tactics(QuantProblem(m, k), CPU)[0])
            bad = m in ISSUE_3398_M and k == 2048
            assert (res.status, res.extra_info["check"]) == ((FAILED, ZERO_SCALES) if bad else (MEASURED, OK)), (m, k)


def test_a_backend_that_hands_the_gemm_a_bf16_global_scale_is_wrong_global_scale(monkeypatch):
    pretend(monkeypatch, "B200")

    class Bf16Scale(FlashInferFp4Quantize):
        @staticmethod
        def global_scale(operands):
            return operands.qa.global_scale.to(torch.bfloat16).reshape(1)

    be = Bf16Scale(_flashinfer(FakeQuantizer()))
    res = CaseRunner(CPU, FAST).run(be, QuantProblem(16, 64), be.tactics(QuantProblem(16, 64), CPU)[0])
    assert res.status == FAILED and res.extra_info["check"] == WRONG_GLOBAL_SCALE


def test_quantizers_are_unavailable_on_sm90_with_the_kernel_reason(monkeypatch):
    pretend(monkeypatch, "H200")
    for be in _quantizers(FakeQuantizer()):
        a = be.availability(CPU)
        assert not a.ok
    assert "__CUDA_ARCH__ 1000" in FlashInferFp4Quantize(_flashinfer(FakeQuantizer())).availability(CPU).reason


# -- end-to-end rows -----------------------------------------------------------------------------

def _e2e(fake_quant: FakeQuantizer):
    from fakes.flashinfer import FakeFlashInfer

    pair = next(p for p in PAIRS if p.gemm == "flashinfer-cutlass")
    return EndToEnd(pair, FlashInferDense(FakeFlashInfer().api()), FlashInferFp4Quantize(_flashinfer(fake_quant)))


def test_an_e2e_row_runs_the_librarys_bytes_through_the_gemm_and_passes(monkeypatch):
    pretend(monkeypatch, "B200")
    fake = FakeQuantizer()
    be = _e2e(fake)
    p = GemmProblem(64, 256, 256)
    res = CaseRunner(CPU, FAST).run(be, p, be.tactics(p, CPU)[0])
    assert res.status == MEASURED and res.extra_info["check"] == OK, res.reason
    assert fake.calls >= 3 + len(res.timing.samples_s), "the timed call quantizes every time"


def test_an_e2e_row_uses_the_quantizers_bytes_not_ours(monkeypatch):
    """A quantizer whose payload differs fails the row by the quantizer's name, before the GEMM."""
    pretend(monkeypatch, "B200")

    class Flipping(FakeQuantizer):
        def _quantize(self, x, gs):
            data, sf = super()._quantize(x, gs)
            data[0, 0] ^= 0x01
            return data, sf

    be = _e2e(Flipping())
    p = GemmProblem(64, 256, 256)
    res = CaseRunner(CPU, FAST).run(be, p, be.tactics(p, CPU)[0])
    assert res.status == FAILED and res.extra_info["check"] == WRONG_PAYLOAD


def test_an_e2e_row_gates_on_both_parts(monkeypatch):
    pretend(monkeypatch, "H200")
    a = _e2e(FakeQuantizer()).availability(CPU)
    assert not a.ok and a.reason.startswith("flashinfer-cutlass:")


def test_make_operands_of_a_quant_problem_holds_our_expected_bytes():
    ops = make_operands(QuantProblem(8, 64), "nvfp4", "nvfp4")
    assert ops.a.shape == (8, 64) and ops.w.numel() == 0
    assert torch.equal(ops.qa.data, formats.nvfp4_quantize(ops.a).data)
