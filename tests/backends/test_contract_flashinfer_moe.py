"""Contract tests for the FlashInfer CUTLASS fused-MoE adapters, on CPU, against a fake library.

The fake (``fakes.flashinfer_moe_api``) mirrors ``flashinfer.cutlass_fused_moe`` as the 0.7.2.post1 binding reads its
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

from fp4bench.backends.builtin import flashinfer_moe as fim
from fp4bench.backends.base import DEFAULT_TACTIC, Tactic, TacticUnsupported
from fp4bench.backends.registry import get_backend
from fp4bench.formats import sm90_interleave as sm90
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem

from fakes.flashinfer_moe_api import FakeFlashInfer, check_moe as _check, moe_problem as _problem

CPU = torch.device("cpu")


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


def test_the_nvfp4_row_keeps_the_tactics_the_shape_filter_leaves_out_as_the_tuner_does() -> None:
    """FlashInfer filters by ``get_valid_tactics_for_shape`` for W4A16 only (core.py
    ``MoERunner.get_valid_tactics``: ``if not self.use_w4_group_scaling: return valid_tactics``), so
    the explicit NVFP4 row runs every tactic the tuner may pick; zero occupancy still rules one out."""
    fake = FakeFlashInfer("100", n1=4, n2=4, invalid={5}, zero_occ={7})
    be = fim.FlashInferCutlassMoENVFP4(api=fake)
    ops = make_operands(_problem(), *NVFP4)
    prep = be.prepare(ops.problem, ops, CPU)
    be.run(prep, Tactic((-1, 5), "g1-default+g2-001"))
    assert fake.calls[-1]["profile_ids"] == [-1, 5]
    with pytest.raises(TacticUnsupported, match="zero occupancy"):
        be.run(prep, Tactic((-1, 7), "g1-default+g2-003"))
    assert fake.get_valid_tactics([None, prep.args["call"]["fc1_expert_weights"], None,
                                   prep.args["call"]["fc2_expert_weights"], None], None, gemm_idx=2) == [4, 5, 6]


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


# --------------------------------------------------------------------------- the autotuned rows
@pytest.mark.parametrize("arch, cls, fmt", [("90", "FlashInferCutlassMoEW4A16Tuned", W4A16),
                                            ("100", "FlashInferCutlassMoENVFP4Tuned", NVFP4)])
def test_the_tuned_row_runs_the_tuners_pick_with_the_librarys_defaults_and_records_it(arch, cls, fmt) -> None:
    """No ``profile_ids``, no ``use_fused_finalize`` (the library's default): the tuner's GEMM1 and
    GEMM2 picks run, the output is checked like the explicit rows', the choice is recorded."""
    from fp4bench.backends.builtin import flashinfer_moe_tuned as tuned

    fake = FakeFlashInfer(arch, n1=8, n2=8, fastest=(5, 11))
    be = getattr(tuned, cls)(api=fake)
    assert be.tactics(_problem(), CPU) == [DEFAULT_TACTIC] and be.choice_row
    ops = make_operands(_problem(), *fmt, seed=3)
    prep, out = _run(be, ops)
    assert _check(be, prep, ops, out)
    assert fake.calls[0] == {"profile_ids": [5, 11], "use_fused_finalize": True}  # tuned in prepare
    assert fake.calls[-1] == {"profile_ids": [5, 11], "use_fused_finalize": True}  # the timed call: the cached pick
    assert "use_fused_finalize" not in fake.workspace_calls[-1]
    assert be.library_choice(prep) == {"backend": "cutlass", "tactic": [5, 11], "tuned": True,
                                       "compare_with": be.explicit}
    be.prepare(ops.problem, ops, CPU)  # another copy: the shape is in the tuner's cache, not profiled again
    assert len(fake.tune.profiled) == 16
