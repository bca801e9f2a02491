"""Contract tests for the FlashInfer CUTLASS fused-MoE adapters, on CPU, against a fake library.

The fake mirrors ``flashinfer.cutlass_fused_moe`` as the 0.7.2.post1 binding reads its
arguments (flashinfer_cutlass_fused_moe_binding.cu: dtypes, ranks, quant-scale lists,
profile-id ranges) and computes the MoE the way the kernel does: it *decodes the arguments
in the library's layout* (SM90: de-interleaved weight bytes and folded scales; Blackwell:
int64 weight views, 128x4-swizzled scales, alphas), takes the gate from the second half of
fc1 (TRT-LLM's w3_w1 order), stores GEMM outputs in bf16 and finalizes in fp32. If the
adapter marshals anything wrongly, the fake's result diverges from ``reference_moe``.

What the fake cannot prove is that FlashInfer's real layout is the one modelled here: the
scale fold is compared with FlashInfer's own (pure torch) helper when flashinfer imports, and
the weight interleave -- a CUDA kernel -- is compared on the H200 by tests/backends/test_gpu_flashinfer_sm90.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from fp4bench import formats
from fp4bench.backends.builtin import flashinfer_moe as fim
from fp4bench.backends.base import DEFAULT_TACTIC, Tactic, TacticUnsupported
from fp4bench.backends.registry import get_backend
from fp4bench.formats import sm90_interleave as sm90
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem, MoEProblem
from fp4bench.reference.moe import moe_error_bound, reference_moe

CPU = torch.device("cpu")


# --------------------------------------------------------------------------- the fake library
class FakeRunner:
    def __init__(self, n1: int, n2: int, invalid: set[int] = frozenset(), zero_occ: set[int] = frozenset()):
        self.n1, self.n2, self.invalid, self.zero_occ = n1, n2, set(invalid), set(zero_occ)

    def get_gemm1_tactic_count(self) -> int:
        return self.n1

    def get_gemm2_tactic_count(self) -> int:
        return self.n2

    def get_tactic_occupancy(self, t: int) -> int:
        return 0 if t in self.zero_occ else 2

    def get_valid_tactics_for_shape(self, stage: int, n: int, k: int) -> list[int]:
        lo, hi = (0, self.n1) if stage == 1 else (self.n1, self.n1 + self.n2)
        return [t for t in range(lo, hi) if t not in self.invalid]


class FakeFlashInfer:
    """Stands in for ``FlashInferMoEApi``; ``mistake`` makes it decode wrongly (negative tests)."""

    def __init__(self, arch: str = "90", n1: int = 116, n2: int = 116, mistake: str | None = None,
                 failing: set[int] = frozenset(), invalid: set[int] = frozenset(),
                 zero_occ: set[int] = frozenset()):
        self.arch, self.mistake, self.failing = arch, mistake, set(failing)
        self.runner = FakeRunner(n1, n2, invalid, zero_occ)
        self.calls: list[dict] = []

    def version(self) -> str:
        return "0.7.2.post1-fake"

    def device_arch(self, device: torch.device) -> str:
        return self.arch

    def accepts(self, keyword: str) -> bool:
        return False  # 0.7.2.post1's cutlass_fused_moe: no nvfp4_4over6

    def workspace_size(self, **kw) -> int:
        assert kw["use_fused_finalize"] is False
        return 4096

    def interleave_weights(self, w: torch.Tensor) -> torch.Tensor:
        assert w.dtype == torch.uint8 and w.dim() == 3 and w.is_contiguous()
        return sm90.sm90_interleave_fp4_weights(w)

    def interleave_scales(self, s: torch.Tensor) -> torch.Tensor:
        assert s.dtype == torch.uint8 and s.dim() == 3
        return sm90.sm90_interleave_mxfp4_scales(s)

    def tactic_runner(self, arch, x_dtype, weight_dtype, top_k, use_w4_group_scaling):
        assert arch == self.arch
        return self.runner

    # -- the op ------------------------------------------------------------------------
    def cutlass_fused_moe(self, *, input, token_selected_experts, token_final_scales,
                          fc1_expert_weights, fc2_expert_weights, output_dtype, quant_scales,
                          output, profile_ids, use_fused_finalize, workspace_buffer,
                          use_w4_group_scaling=False, input_sf=None, swizzled_input_sf=True):
        self.calls.append({"profile_ids": list(profile_ids), "use_fused_finalize": use_fused_finalize})
        n1, n2 = self.runner.n1, self.runner.n2
        g1, g2 = profile_ids
        if not (g1 == -1 or 0 <= g1 < n1) or not (g2 == -1 or n1 <= g2 < n1 + n2):
            raise RuntimeError(f"Invalid gemm profile id: {profile_ids}")
        if g1 in self.failing or g2 in self.failing:
            raise RuntimeError("[TensorRT-LLM][ERROR] Failed to initialize cutlass TMA WS grouped gemm.\nmore")
        assert output_dtype == torch.bfloat16 and output.dtype == torch.bfloat16
        assert token_selected_experts.dtype == torch.int32 and token_final_scales.dtype == torch.float32
        assert workspace_buffer.dtype == torch.uint8 and workspace_buffer.numel() >= 4096
        if self.arch == "90":
            w1, w2, x = self._decode_w4a16(input, fc1_expert_weights, fc2_expert_weights, quant_scales,
                                           use_w4_group_scaling)
            fc2_quant = None
        else:
            w1, w2, x, fc2_quant = self._decode_nvfp4(input, input_sf, swizzled_input_sf,
                                                      fc1_expert_weights, fc2_expert_weights, quant_scales)
        output.copy_(self._moe(x, w1, w2, token_selected_experts, token_final_scales, fc2_quant))

    def _decode_w4a16(self, x, fc1, fc2, quant_scales, use_w4):
        assert use_w4 is True and x.dtype == torch.bfloat16
        assert fc1.dtype == fc2.dtype == torch.uint8 and len(quant_scales) == 2
        assert all(q.dtype == torch.int32 for q in quant_scales)
        e, two_i, hb = fc1.shape
        h, inter = hb * 2, fc2.shape[2] * 2
        assert fc2.shape == (e, h, inter // 2) and two_i == 2 * inter
        if self.mistake != "no_weight_deinterleave":
            fc1, fc2 = sm90.sm90_deinterleave_fp4_weights(fc1), sm90.sm90_deinterleave_fp4_weights(fc2)
        s1, s2 = (q.view(torch.uint8) for q in quant_scales)
        if self.mistake == "no_scale_deinterleave":
            s1, s2 = s1.reshape(e, two_i, h // 32), s2.reshape(e, h, inter // 32)
        else:
            s1 = sm90.sm90_deinterleave_mxfp4_scales(s1, two_i, h // 32)
            s2 = sm90.sm90_deinterleave_mxfp4_scales(s2, h, inter // 32)
        w1 = formats.mxfp4_dequantize(formats.MXFP4(fc1, s1))
        w2 = formats.mxfp4_dequantize(formats.MXFP4(fc2, s2))
        return w1, w2, x.float()

    def _decode_nvfp4(self, x, input_sf, swizzled, fc1, fc2, quant_scales):
        assert x.dtype == torch.uint8 and input_sf is not None and swizzled is True
        assert fc1.dtype == fc2.dtype == torch.int64 and len(quant_scales) == 6
        a_gs, s1, alpha1, gs2, s2, alpha2 = quant_scales
        assert s1.dtype == s2.dtype == torch.int32 and a_gs.dim() == 0 and gs2.dim() == 0
        e = fc1.shape[0]
        h, inter = fc2.shape[1], fc2.shape[2] * 16
        assert fc1.shape == (e, 2 * inter, h // 16) and alpha1.shape == alpha2.shape == (e,)

        def weights(w, s, rows, k):
            sf = formats.unswizzle_128x4(s.view(torch.uint8), rows, k // 16).view(torch.float8_e4m3fn)
            return formats.nvfp4_dequantize(formats.NVFP4(w.view(torch.uint8), sf, torch.ones(())))

        a_sf = formats.unswizzle_128x4(input_sf, x.shape[0], h // 16).view(torch.float8_e4m3fn)
        a = formats.nvfp4_dequantize(formats.NVFP4(x, a_sf, torch.ones(())))        # e2m1 * sf, no gs
        w1 = weights(fc1, s1, 2 * inter, h) * alpha1[:, None, None]   # alpha folded per expert
        w2 = weights(fc2.view(torch.int64), s2, h, inter) * alpha2[:, None, None]
        return w1, w2, a, gs2

    def _moe(self, x, w1, w2, ids, scales, fc2_quant_gs):
        inter = w2.shape[2]
        out = torch.zeros(x.shape[0], w2.shape[1])
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            h = (x[tok] @ w1[e].t()).to(torch.bfloat16).float()        # GEMM1 stores bf16
            linear, gate = h[:, :inter], h[:, inter:]                  # kernel: up first, gate second
            if self.mistake == "gate_first":
                linear, gate = gate, linear
            act = torch.nn.functional.silu(gate) * linear
            if fc2_quant_gs is None:
                act = act.to(torch.bfloat16).float()
            else:                                                      # in-kernel NVFP4 requant; alpha2 holds 1/gs2
                q = formats.nvfp4_quantize(act, global_scale=fc2_quant_gs)
                act = formats.nvfp4_dequantize(formats.NVFP4(q.data, q.scales, torch.ones(())))
            y = (act @ w2[e].t()).to(torch.bfloat16).float()           # GEMM2 stores bf16
            out.index_add_(0, tok, y * scales[tok, slot][:, None])     # fp32 finalize
        return out.to(torch.bfloat16)


# --------------------------------------------------------------------------- helpers
def _problem(t=5, e=6, k=2, h=256, i=128, seed=0) -> MoEProblem:
    g = torch.Generator().manual_seed(seed)
    ids = tuple(tuple(torch.randperm(e, generator=g)[:k].tolist()) for _ in range(t))
    return MoEProblem(hidden=h, inter=i, num_experts=e, top_k=k, topk_ids=ids)


def _matches(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> bool:
    """Kernel-vs-reference check on the *same bytes*.

    Both sides decode identical FP4 bytes exactly and round the same intermediates to bf16,
    so they differ by (a) the final bf16 store of the output, <= 2^-9 |ref| (half an ulp,
    RNE), and (b) fp32 summation order, ~K * 2^-24 relative, which on a rare near-tie flips
    an intermediate bf16 (NVFP4 path: E2M1) rounding. Tier 1 -- 99.9 % of elements within
    2^-8 |ref| + 2^-12 max|ref| -- catches any systematic error (a 1 % scale error fails it
    almost everywhere); tier 2 -- every element within ``moe_error_bound`` (the worst case
    of (a) + (b) through the magnitudes, reference/moe.py) -- bounds the rare flips.
    """
    ref = ref.float()
    err = (out.float() - ref).abs()
    tight = err <= 2 ** -8 * ref.abs() + 2 ** -12 * float(ref.abs().max())
    return bool(torch.isfinite(out).all()) and float(tight.float().mean()) >= 0.999 \
        and bool((err <= bound).all())


def _check(be, prep, ops, out) -> bool:
    ref = reference_moe(ops, **be.reference_options(prep))
    gs2 = prep.args["meta"].get("fc2_act_global_scale")
    return _matches(out, ref, moe_error_bound(ops, ref, be.intermediate, gs2))


def _run(backend, ops, tactic=DEFAULT_TACTIC):
    prep = backend.prepare(ops.problem, ops, CPU)
    prep.out.fill_(float("nan"))
    return prep, backend.run(prep, tactic)


W4A16 = ("bf16", "mxfp4")
NVFP4 = ("nvfp4", "nvfp4")


# --------------------------------------------------------------------------- SM90 W4A16
@pytest.mark.parametrize("seed", [0, 1])
def test_w4a16_matches_reference(seed: int) -> None:
    ops = make_operands(_problem(seed=seed), *W4A16, seed=seed)
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90"))
    prep, out = _run(be, ops)
    assert out is prep.out and out.shape == (5, 256)
    assert float(out.float().abs().max()) > 0
    assert _check(be, prep, ops, out)


@pytest.mark.parametrize("mistake", ["no_weight_deinterleave", "no_scale_deinterleave", "gate_first"])
def test_w4a16_wrong_decoding_is_caught(mistake: str) -> None:
    """Negative control: a library reading the arguments any other way fails the same check."""
    ops = make_operands(_problem(), *W4A16, seed=0)
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90", mistake=mistake))
    prep, out = _run(be, ops)
    assert not _check(be, prep, ops, out)


def test_w4a16_call_arguments() -> None:
    fake = FakeFlashInfer("90")
    be = fim.FlashInferCutlassMoEW4A16(api=fake)
    ops = make_operands(_problem(), *W4A16)
    prep = be.prepare(ops.problem, ops, CPU)
    call = prep.args["call"]
    assert call["use_w4_group_scaling"] is True and "input_sf" not in call
    assert call["fc1_expert_weights"].shape == (6, 256, 128)              # [E, 2I, H/2] uint8
    assert [q.shape for q in call["quant_scales"]] == [(6, 4, 2, 16, 4), (6, 4, 1, 16, 4)]
    be.run(prep, Tactic((3, -1), "x"))
    assert fake.calls[-1] == {"profile_ids": [3, -1], "use_fused_finalize": False}
    be.run(prep, DEFAULT_TACTIC)
    assert fake.calls[-1]["profile_ids"] == [-1, -1]                      # never the autotuner


# --------------------------------------------------------------------------- Blackwell NVFP4
@pytest.mark.parametrize("arch", ["100", "120"])
def test_nvfp4_matches_reference(arch: str) -> None:
    ops = make_operands(_problem(h=128, i=64, seed=2), *NVFP4, seed=2)
    be = fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer(arch, n1=42, n2=84))
    prep, out = _run(be, ops)
    assert float(out.float().abs().max()) > 0
    assert _check(be, prep, ops, out)
    gs2 = prep.args["meta"]["fc2_act_global_scale"]
    assert prep.args["call"]["quant_scales"][3] is not gs2 and float(gs2) > 0


def test_nvfp4_gate_first_library_is_caught() -> None:
    ops = make_operands(_problem(h=128, i=64, seed=2), *NVFP4, seed=2)
    be = fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer("100", n1=42, n2=84, mistake="gate_first"))
    prep, out = _run(be, ops)
    assert not _check(be, prep, ops, out)


# --------------------------------------------------------------------------- tactics
def test_sweep_runs_every_tactic_once_with_decoded_sm90_labels() -> None:
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90"))
    p = _problem()
    g1, g2 = be.tactic_lists(p, CPU)
    sweep = be.tactics(p, CPU)
    assert len(g1) == len(g2) == 116 and sweep == [DEFAULT_TACTIC] + g1 + g2  # the library's default first
    assert [t.value for t in g1] == [(i, -1) for i in range(116)]
    assert [t.value for t in g2] == [(-1, 116 + j) for j in range(116)]
    assert len({t.label for t in sweep}) == len(sweep)
    assert g1[0].label == "g1-000:64x16x128B_c1x1_pingpong_swapab+g2-default"
    assert g2[-1].label == "g1-default+g2-115:256x256x128B_c2x2_coop_swapab"


def test_labels_fall_back_to_indices_when_counts_differ() -> None:
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90", n1=3, n2=2))
    labels = [t.label for t in be.tactics(_problem(), CPU)]
    assert labels == ["default", "g1-000+g2-default", "g1-001+g2-default", "g1-002+g2-default",
                      "g1-default+g2-000", "g1-default+g2-001"]


def test_unusable_tactics_raise_tactic_unsupported() -> None:
    fake = FakeFlashInfer("90", n1=4, n2=4, failing={2}, invalid={5}, zero_occ={7})
    be = fim.FlashInferCutlassMoEW4A16(api=fake)
    ops = make_operands(_problem(), *W4A16)
    prep = be.prepare(ops.problem, ops, CPU)
    outcomes = {}
    for t in be.tactics(ops.problem, CPU):
        try:
            be.run(prep, t)
            outcomes[t.value] = "ok"
        except TacticUnsupported as exc:
            outcomes[t.value] = str(exc)
    assert outcomes[(0, -1)] == outcomes[(-1, 4)] == "ok"
    assert "Failed to initialize" in outcomes[(2, -1)] and "\n" not in outcomes[(2, -1)]
    assert "invalid for N=256, K=128" in outcomes[(-1, 5)]
    assert "zero occupancy" in outcomes[(-1, 7)]
    called = [c["profile_ids"] for c in fake.calls]
    assert [-1, 5] not in called and [-1, 7] not in called     # rejected before any launch
    with pytest.raises(ValueError, match="pair"):
        be.run(prep, Tactic(3, "bad"))


# --------------------------------------------------------------------------- gates
def test_availability_gates_on_cuda_cc_and_import(monkeypatch: pytest.MonkeyPatch) -> None:
    w4, nv = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer()), fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not w4.availability(torch.device("cuda")).ok
    assert not w4.availability(CPU).ok
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: "NVIDIA fake")
    for cc, w4_ok, nv_ok in [((9, 0), True, False), ((10, 0), False, True), ((12, 1), False, True),
                             ((8, 9), False, False), ((10, 7), False, False)]:
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None, cc=cc: cc)
        a, b = w4.availability(torch.device("cuda")), nv.availability(torch.device("cuda"))
        assert (a.ok, b.ok) == (w4_ok, nv_ok), cc
        if not a.ok:
            assert f"sm_{10 * cc[0] + cc[1]}" in a.reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d=None: (9, 0))
    assert w4.availability(torch.device("cuda")).version == "0.7.2.post1-fake"

    class Missing(FakeFlashInfer):
        def version(self) -> str:
            raise ImportError("No module named 'flashinfer'")

    gone = fim.FlashInferCutlassMoEW4A16(api=Missing()).availability(torch.device("cuda"))
    assert not gone.ok and "not importable" in gone.reason


def test_shape_and_operand_gates() -> None:
    w4, nv = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer()), fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer("100"))
    assert w4.unsupported_reason(_problem()) is None
    assert "inter=192" in w4.unsupported_reason(_problem(i=192))
    assert nv.unsupported_reason(_problem(i=192)) is None
    assert "hidden=96" in nv.unsupported_reason(_problem(h=96))
    assert "dense" in w4.unsupported_reason(GemmProblem(4, 64, 64))
    ops = make_operands(_problem(), *NVFP4)
    with pytest.raises(ValueError, match="bf16 x mxfp4"):
        w4.prepare(ops.problem, ops, CPU)
    bad = make_operands(_problem(i=192), *W4A16)
    with pytest.raises(ValueError, match="divisible by 128"):
        w4.prepare(bad.problem, bad, CPU)


def test_registered_by_name() -> None:
    assert isinstance(get_backend("flashinfer-cutlass-moe"), fim.FlashInferCutlassMoEW4A16)
    assert isinstance(get_backend("flashinfer-cutlass-moe-nvfp4"), fim.FlashInferCutlassMoENVFP4)


# --------------------------------------------------------------------------- layout models
def _kernel_loop_interleave(w: torch.Tensor) -> torch.Tensor:
    """Scalar walk of interleave_fp4_weights_for_sm90_mixed_gemm_kernel's index arithmetic
    (one expert), independent of the vectorized model; bit permutation from sm90._BIT_SRC."""
    rows, kb = w.shape
    cols = kb * 2
    flat, out = w.flatten().tolist(), [0] * w.numel()
    for block, part, lane in itertools.product(range(rows // 2), range(cols // 64), range(16)):
        row = block // 8 * 16 + block % 8
        mma = lane // 4
        col = part * 32 + mma * 8 + lane % 4
        src = [row * kb + col, (row + 8) * kb + col, row * kb + col + 4, (row + 8) * kb + col + 4]
        raw = sum(flat[s] << (8 * i) for i, s in enumerate(src))
        word = sum(((raw >> s) & 1) << d for d, s in enumerate(sm90._BIT_SRC))
        dst = (row + (mma % 2) * 8) * kb + part * 32 + lane // 8 * 16 + (lane % 4) * 4
        for i in range(4):
            out[dst + i] = (word >> (8 * i)) & 0xFF
    return torch.tensor(out, dtype=torch.uint8).reshape(rows, kb)


def test_weight_interleave_model_follows_the_kernel_and_inverts() -> None:
    assert sorted(sm90._BIT_SRC) == list(range(32))
    w = torch.randint(0, 256, (2, 32, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    il = sm90.sm90_interleave_fp4_weights(w)
    assert torch.equal(il[1], _kernel_loop_interleave(w[1]))
    assert not torch.equal(il, w)
    assert torch.equal(sm90.sm90_deinterleave_fp4_weights(il), w)
    with pytest.raises(ValueError, match="n % 16"):
        sm90.sm90_interleave_fp4_weights(w[:, :8])


def test_scale_fold_model_matches_flashinfer_helper() -> None:
    s = torch.randint(0, 256, (3, 128, 8), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    folded = sm90.sm90_interleave_mxfp4_scales(s)
    assert torch.equal(sm90.sm90_deinterleave_mxfp4_scales(folded, 128, 8), s)
    assert folded[0, 0, 0, 0, 4 * 1 + 2] == s[0, 16 * 1 + 0, 2]     # byte 4j+g of row i = row 16j+i, group g
    prepare = pytest.importorskip("flashinfer.fused_moe.prepare", reason="flashinfer not installed")
    assert torch.equal(folded, prepare.interleave_moe_scales_for_sm90_mixed_gemm(s, group_size=32))


# --------------------------------------------------------------------------- the real path
def test_nvfp4_case_runner_checks_against_the_backends_own_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """CaseRunner (the production path) must model the NVFP4 re-quantized intermediate: with
    the plain bf16-intermediate reference a correct kernel reports hundreds of mismatches."""
    from fakes.arch import pretend
    from fp4bench.run.case import MEASURED, CaseRunner
    from fp4bench.measure.timing import TimingConfig

    pretend(monkeypatch, "B200")
    be = fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer("100", n1=3, n2=3))
    runner = CaseRunner(CPU, TimingConfig(mode="cpu", time_budget_s=0.01))
    res = runner.run(be, _problem(h=128, i=64, seed=2), DEFAULT_TACTIC, measure=False)
    assert res.status == MEASURED and res.check.ok, res.reason


def test_argument_check_errors_are_errors_not_unsupported() -> None:
    """TVM-FFI raises RuntimeError for a failed argument check too: it must not become "unsupported"."""
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90", n1=4, n2=4))
    ops = make_operands(_problem(), *W4A16)
    prep = be.prepare(ops.problem, ops, CPU)
    with pytest.raises(RuntimeError, match="Invalid gemm profile id") as info:
        be.run(prep, Tactic((99, -1), "g1-099+g2-default"))
    assert not isinstance(info.value, TacticUnsupported)


def test_all_zero_occupancy_keeps_every_tactic_as_flashinfer_does() -> None:
    """FlashInfer's own filter falls back to all tactics when every one reports 0 occupancy."""
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90", n1=3, n2=3, zero_occ={0, 1, 2, 4}))
    ops = make_operands(_problem(), *W4A16)
    unusable = be.prepare(ops.problem, ops, CPU).args["meta"]["unusable"]
    assert sorted(unusable) == [4]  # GEMM1: all zero -> keep all; GEMM2: only tactic 4 is zero


def test_w4a16_every_tactic_is_replayed_on_two_operand_sets_and_a_stale_tactic_fails(monkeypatch) -> None:
    """The SM90 W4A16 path through CaseRunner: the second set's bf16 input is found in its prepared
    layout (``run.checks``), every tactic's replays pass, and a kernel that keeps returning its
    first result fails as ``replay mismatch`` (FlashInfer #4841's class: right at warm-up, wrong later)."""
    from fakes.arch import pretend
    from fp4bench.measure.replays import REPLAY_MISMATCH
    from fp4bench.measure.timing import TimingConfig
    from fp4bench.run.case import FAILED, MEASURED, CaseRunner

    pretend(monkeypatch, "H200")
    be = fim.FlashInferCutlassMoEW4A16(api=FakeFlashInfer("90", n1=1, n2=1))
    runner = CaseRunner(CPU, TimingConfig(mode="cpu", time_budget_s=0.01), replays=4)  # the fake MoE is slow
    p = _problem(t=3, e=4, h=128, i=128, seed=3)
    for tactic in be.tactics(p, CPU):
        res = runner.run(be, p, tactic, measure=False)
        assert res.status == MEASURED, res.reason
        info = res.extra_info
        assert info["replays"] == 4 and info["replays_failed"] == 0 and info["replay_method"] == "eager calls"
        assert info["scale_padding_poisoned"] == 0  # MXFP4 scales interleaved, never padded

    class Stale(fim.FlashInferCutlassMoEW4A16):
        first = None

        def run(self, prepared, tactic):
            out = super().run(prepared, tactic)
            if self.first is None:
                self.first = out.clone()
            out.copy_(self.first)
            return out

    res = CaseRunner(CPU, TimingConfig(mode="cpu", time_budget_s=0.01), replays=4).run(
        Stale(api=FakeFlashInfer("90", n1=1, n2=1)), p, DEFAULT_TACTIC, measure=False)
    assert res.status == FAILED and res.check.kind == REPLAY_MISMATCH
    assert res.reason.startswith("replay mismatch: 2 of 4 replays; first bad: replay 2 (operand set B): mismatch")
