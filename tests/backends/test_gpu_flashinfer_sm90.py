"""FlashInfer on an SM90 GPU (H200/H100): the fused-MoE W4A16 backend and FlashInfer's fp4 helpers
as oracles for ``fp4bench.formats``. Skips, with the reason, without CUDA, FlashInfer or an SM90 GPU.

The MoE module must be loadable without a 30-minute JIT build: build it once with
``tools/flashinfer-sm90`` (its README) and install it where FlashInfer looks for AOT modules.
What is checked:

1. the runner's GEMM1/GEMM2 tactic counts equal the table derived from FlashInfer's C++ heuristic
   (``sm90_w4a16_tactic_descriptions``: 116 per GEMM);
2. fp4bench's torch model of the SM90 weight / scale interleave equals FlashInfer's helpers byte for byte;
3. every tactic of the sweep on a small GLM-5 layer (H 6144, 256 experts, top-8, I 256 = TP8) is
   correct against ``reference_moe`` (poison/NaN checks and ``moe_error_bound`` and the bulk tier); a tactic the
   library cannot run for the shape is data, not a failure;
4. ``block_scale_interleave`` equals ``formats.swizzle_128x4``; ``e2m1_and_ufp8sf_scale_to_float``
   equals our NVFP4 decode within 2^-22 relative (FlashInfer multiplies by the rounded 1/global
   scale, we divide: two fp32 roundings) and our MXFP4 decode exactly. These need FlashInfer's
   ``fp4_quantization`` module for this GPU: where it cannot be loaded or built (prebuilt modules
   only, ``FLASHINFER_DISABLE_JIT=1``) they skip with the library's reason.
"""

from __future__ import annotations

import pytest
import torch

from fakes.library_modules import loaded_or_skip

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)
flashinfer = pytest.importorskip("flashinfer", reason="needs flashinfer-python")

DEV = torch.device("cuda")


@pytest.fixture(scope="module")
def sm90():
    cc = torch.cuda.get_device_capability(DEV)
    if cc != (9, 0):
        pytest.skip(f"the W4A16 fused MoE under test is the SM90 module; this GPU is sm_{cc[0]}{cc[1]}")


@pytest.fixture(scope="module")
def fp4_helpers():
    """FlashInfer's fp4 helpers (their ``fp4_quantization`` module), or a skip naming why they
    cannot be loaded; any other error is the test's to report."""
    probe = torch.zeros((128, 4), dtype=torch.uint8, device=DEV)
    loaded_or_skip("FlashInfer's fp4 helper module", lambda: flashinfer.block_scale_interleave(probe))
    return flashinfer


@pytest.fixture(scope="module")
def runner(sm90):
    from fp4bench.backends.builtin._moe_api import FlashInferMoEApi

    return loaded_or_skip("FlashInfer's fused_moe_90 module (build and install it with tools/flashinfer-sm90)",
                          lambda: FlashInferMoEApi().tactic_runner("90", torch.bfloat16, torch.uint8, 8, True))


def test_tactic_counts_match_the_derived_table(runner):
    from fp4bench.backends.builtin._sm90_moe_tactics import sm90_w4a16_tactic_descriptions

    n1, n2 = int(runner.get_gemm1_tactic_count()), int(runner.get_gemm2_tactic_count())
    assert n1 == n2 == len(sm90_w4a16_tactic_descriptions()) == 116
    assert int(runner.get_tactic_num()) == n1 + n2
    assert all(int(runner.get_tactic_occupancy(t)) > 0 for t in range(n1 + n2))


def test_interleave_models_equal_flashinfer(runner):
    from fp4bench.backends.builtin._moe_api import FlashInferMoEApi
    from fp4bench.formats.sm90_interleave import sm90_interleave_fp4_weights, sm90_interleave_mxfp4_scales

    g = torch.Generator(device=DEV).manual_seed(3)
    w = torch.randint(0, 256, (3, 512, 1024), dtype=torch.uint8, device=DEV, generator=g)
    s = torch.randint(0, 256, (3, 512, 64), dtype=torch.uint8, device=DEV, generator=g)
    assert torch.equal(FlashInferMoEApi().interleave_weights(w), sm90_interleave_fp4_weights(w))
    assert torch.equal(FlashInferMoEApi().interleave_scales(s), sm90_interleave_mxfp4_scales(s))


def test_every_tactic_is_correct_on_a_glm5_layer(runner):
    from fp4bench.backends.base import DEFAULT_TACTIC, TacticUnsupported
    from fp4bench.backends.builtin.flashinfer_moe import FlashInferCutlassMoEW4A16
    from fp4bench.measure.verify import check_case
    from fp4bench.reference.bound import reference_and_bound
    from fp4bench.workload.operands import make_operands
    from fp4bench.workload.problems import MoEProblem, Origin

    g = torch.Generator().manual_seed(0)
    tokens, inter = 16, 256
    ids = tuple(tuple(torch.randperm(256, generator=g)[:8].tolist()) for _ in range(tokens))
    problem = MoEProblem(hidden=6144, inter=inter, num_experts=256, top_k=8, topk_ids=ids,
                         origin=Origin(model="glm-5", batch=tokens, tp=2048 // inter, role="moe"))
    be = FlashInferCutlassMoEW4A16()
    assert be.availability(DEV).ok, be.availability(DEV).reason
    assert be.unsupported_reason(problem) is None
    ops = make_operands(problem, be.act_format, be.weight_format, device=DEV, seed=0)
    prep = be.prepare(problem, ops, DEV)
    ref = reference_and_bound(ops, be.reference_options(prep))  # as the CaseRunner builds it
    ran, wrong = 0, []
    for tac in [DEFAULT_TACTIC, *be.tactics(problem, DEV)]:
        try:
            res = check_case(lambda: be.run(prep, tac), prep.out, ref.out, ref.bound, ref.bulk,
                             unquantized=ref.unquantized)
        except TacticUnsupported:
            continue
        ran += 1
        if not res.ok:
            wrong.append(f"{tac.label}: {res.to_extra_info().get('check_detail')}")
    assert wrong == []
    assert ran > 1


@pytest.mark.parametrize("rows,cols", [(150, 6), (128, 8), (7, 448)])
def test_block_scale_interleave_equals_our_swizzle(fp4_helpers, rows, cols):
    from fp4bench import formats

    g = torch.Generator(device=DEV).manual_seed(7)
    sf = torch.randint(0, 256, (rows, cols), dtype=torch.uint8, device=DEV, generator=g)
    assert torch.equal(flashinfer.block_scale_interleave(sf).reshape(-1).cpu(),
                       formats.swizzle_128x4(sf).reshape(-1).cpu())


@pytest.mark.parametrize("fmt,swizzled", [("nvfp4", True), ("nvfp4", False), ("mxfp4", True)])
def test_flashinfer_decode_equals_ours(fp4_helpers, fmt, swizzled):
    from fp4bench import formats

    g = torch.Generator(device=DEV).manual_seed(7)
    x = torch.randn((96, 256), device=DEV, dtype=torch.bfloat16, generator=g)
    if fmt == "nvfp4":
        q = formats.nvfp4_quantize(x)
        sf = formats.swizzle_128x4(q.scales) if swizzled else q.scales
        got = flashinfer.e2m1_and_ufp8sf_scale_to_float(
            q.data, sf.view(torch.uint8).reshape(-1), (1.0 / q.global_scale).reshape(1).float(),
            sf_vec_size=16, ufp8_type=1, is_sf_swizzled_layout=swizzled)
        want, tol = formats.nvfp4_dequantize(q), 2.0 ** -22
    else:
        q = formats.mxfp4_quantize(x)
        got = flashinfer.e2m1_and_ufp8sf_scale_to_float(
            q.data, formats.swizzle_128x4(q.scales).reshape(-1), torch.ones(1), sf_vec_size=32,
            ufp8_type=0, is_sf_swizzled_layout=True)
        want, tol = formats.mxfp4_dequantize(q), 0.0
    got, want = got.cpu().float(), want.cpu().float()
    rel = ((got - want).abs() / want.abs().clamp_min(1e-30)).max().item()
    assert rel <= tol
