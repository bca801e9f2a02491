"""Contract tests of the ``mm_fp4`` rows (``flashinfer-auto``, ``-auto-tuned``, ``-cudnn``, ``-b12x``,
``-cute-dsl``, ``-cutedsl-low-latency``, ``-trtllm``) against the fake ``mm_fp4`` (``fakes.flashinfer_mm_fp4``): what ``auto`` picks for
the CUDA (nvcc) and cuDNN versions and the GPU, what each row records as the library's choice,
why a backend is unavailable, and the output against the reference."""

from __future__ import annotations

import pytest
import torch

from fakes.arch import pretend
from fakes.checks import assert_matches_reference
from fakes.flashinfer import FakeFlashInfer
from fakes.flashinfer_mm_fp4 import MISPICK_TACTIC, FakeAutoTuner, FakeMmFp4
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.builtin.flashinfer_auto import FlashInferAuto, FlashInferAutoTuned
from fp4bench.backends.builtin.flashinfer_b12x import FlashInferB12x
from fp4bench.backends.builtin.flashinfer_cudnn import FlashInferCudnn
from fp4bench.backends.builtin.flashinfer_cute_dsl import FlashInferCuteDsl
from fp4bench.backends.builtin.flashinfer_cutedsl_low_latency import FlashInferCuteDslLowLatency
from fp4bench.backends.builtin.flashinfer_trtllm import FlashInferTrtllm
from fp4bench.backends.builtin._mm_fp4 import nvfp4_inputs
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem

CPU = torch.device("cpu")
PROBLEM = GemmProblem(3, 64, 128)


def _fake(gpu_cc: tuple[int, int], **kw) -> FakeMmFp4:
    return FakeMmFp4(dense=FakeFlashInfer(), tuner=FakeAutoTuner(), sm=gpu_cc, **kw)


def _choice(backend, fake: FakeMmFp4, problem=PROBLEM):
    be = backend(api=fake.api())
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=problem.k)
    prep = be.prepare(problem, ops, CPU)
    prep.out.fill_(float("nan"))
    out = be.run(prep, DEFAULT_TACTIC)
    assert_matches_reference(out, ops)
    return be.library_choice(prep)


# gpu, nvcc, cuDNN backend version -> the backend auto runs first (gemm_base.py _heuristic_func_mm_fp4 of
# 0.7.2.post1 and 0.7.4); PROBLEM has M = 3, K = 128: cutedsl_low_latency is auto's last candidate on SM100/103
AUTO_CASES = [
    ("B200", (10, 0), "12.9", 91500, "cutlass"),    # CUDA 12: CUTLASS first whatever cuDNN is
    ("B200", (10, 0), "13.0", 91400, "cutlass"),    # cuDNN below 9.15
    ("B200", (10, 0), "13.0", 91500, "cudnn"),      # the cuDNN-first case
    ("B300", (10, 3), "13.0", 91500, "cutlass"),    # SM103: CUTLASS first
    ("B200", (10, 0), "13.0", None, "cutlass"),     # cudnn-frontend not importable
    ("RTX PRO 6000", (12, 0), "13.0", 91500, "b12x"),   # SM120 + CUDA 13: b12x first
    ("RTX PRO 6000", (12, 0), "12.9", 91500, "b12x"),   # b12x's NVFP4 GEMM from CUDA 12.9 on
    ("RTX PRO 6000", (12, 0), "12.8", 91500, "cutlass"),
    ("GB10", (12, 1), "13.0", 91500, "cudnn"),      # SM121: no b12x in auto; cuDNN first as on SM100
]


@pytest.mark.parametrize("gpu, cc, nvcc, cudnn, first", AUTO_CASES)
def test_auto_untuned_runs_the_heuristics_first_backend_with_its_default_tactic(monkeypatch, gpu, cc, nvcc, cudnn, first):
    pretend(monkeypatch, gpu)
    fake = _fake(cc, cuda=nvcc, cudnn=cudnn, cudnn_frontend="1.14.0" if cudnn else None, cute_dsl=True)
    choice = _choice(FlashInferAuto, fake)
    assert choice["backend"] == first and choice["tactic"] == -1 and choice["tuned"] is False, choice
    assert choice["compare_with"] == f"flashinfer-{first}"
    avail = FlashInferAuto(api=fake.api()).availability(CPU)
    assert avail.ok and f"auto order {first} >" in avail.reason and f"CUDA {nvcc}" in avail.reason, avail.reason


def test_the_untuned_row_is_not_answered_by_a_pick_cached_for_an_earlier_case(monkeypatch):
    pretend(monkeypatch, "B200")
    fake = _fake((10, 0), fault="mispick")
    assert _choice(FlashInferAutoTuned, fake)["tactic"] == MISPICK_TACTIC  # cached for this very shape
    assert _choice(FlashInferAuto, fake)["tactic"] == -1


def test_the_tuned_row_records_the_tuners_pick(monkeypatch):
    pretend(monkeypatch, "RTX PRO 6000")
    fake = _fake((12, 0), cuda="13.0", cudnn=91500, cudnn_frontend="1.14.0", cute_dsl=True, fault="mispick")
    choice = _choice(FlashInferAutoTuned, fake)
    assert choice == {"backend": "b12x", "tactic": MISPICK_TACTIC, "tuned": True, "compare_with": "flashinfer-b12x",
                      "candidates": ["b12x", "cutlass", "cudnn"]}
    assert {op for op, _, _ in fake.tuner.profiled} == {"fp4_gemm"}


@pytest.mark.parametrize("backend, gpu, cc, kw, why", [
    (FlashInferCudnn, "B200", (10, 0), dict(cudnn=None), "cudnn-frontend (nvidia-cudnn-frontend) does not import"),
    (FlashInferCudnn, "B200", (10, 0), dict(cudnn=91002, cudnn_frontend="1.12.0"), "cudnn-frontend 1.12.0 < 1.13"),
    (FlashInferCudnn, "B200", (10, 0), dict(cudnn=90800, cudnn_frontend="1.14.0"), "cuDNN backend 90800 < 91002"),
    (FlashInferB12x, "RTX PRO 6000", (12, 0), dict(cuda="12.8", cute_dsl=True), "b12x needs CUDA >= 12.9; FlashInfer reads CUDA 12.8"),
    (FlashInferB12x, "RTX PRO 6000", (12, 0), dict(cuda="13.0", cute_dsl=False), "CuTe DSL (nvidia-cutlass-dsl)"),
    (FlashInferB12x, "B200", (10, 0), dict(cuda="13.0", cute_dsl=True), "mm_fp4 backend 'b12x' does not support SM100"),
    (FlashInferCuteDsl, "B200", (10, 0), dict(cute_dsl=False), "CuTe DSL (nvidia-cutlass-dsl)"),
    (FlashInferCuteDslLowLatency, "RTX PRO 6000", (12, 0), dict(cute_dsl=True),
     "mm_fp4 backend 'cutedsl_low_latency' does not support SM120"),
])
def test_an_unavailable_backend_names_the_version_or_gpu_that_rules_it_out(monkeypatch, backend, gpu, cc, kw, why):
    pretend(monkeypatch, gpu)
    avail = backend(api=_fake(cc, **kw).api()).availability(CPU)
    assert not avail.ok and why in avail.reason and "flashinfer 0.7.2.post1" in avail.reason, avail.reason


@pytest.mark.parametrize("backend, gpu, cc, problem", [
    (FlashInferCudnn, "B200", (10, 0), GemmProblem(130, 96, 256)),
    (FlashInferB12x, "RTX PRO 6000", (12, 0), GemmProblem(130, 96, 256)),
    (FlashInferCuteDsl, "B200", (10, 0), GemmProblem(130, 96, 256)),
    (FlashInferCuteDsl, "RTX PRO 6000", (12, 0), GemmProblem(130, 128, 256)),
    (FlashInferCuteDslLowLatency, "B200", (10, 0), GemmProblem(8, 96, 192)),
    (FlashInferTrtllm, "B200", (10, 0), GemmProblem(130, 128, 256)),
])
def test_each_explicit_backend_computes_the_reference_and_records_its_default_tactic(monkeypatch, backend, gpu, cc,
                                                                                     problem):
    pretend(monkeypatch, gpu)
    fake = _fake(cc, cuda="13.0", cudnn=91500, cudnn_frontend="1.14.0", cute_dsl=True)
    be = backend(api=fake.api())
    assert be.availability(CPU).ok and be.unsupported_reason(problem) is None
    choice = _choice(backend, fake, problem)
    assert choice["backend"] == be.library_backend and choice["tactic"] == -1 and choice["candidates"] == [be.library_backend]


@pytest.mark.parametrize("backend, gpu, problem, why", [
    (FlashInferCuteDslLowLatency, "B200", GemmProblem(9, 96, 192), "needs M <= 8 and K % 64 == 0, got M=9, K=192"),
    (FlashInferCuteDslLowLatency, "B200", GemmProblem(8, 96, 160), "got M=8, K=160"),
    (FlashInferCuteDsl, "RTX PRO 6000", GemmProblem(8, 96, 256), "SM120/121 cute-dsl GEMM needs N % 64 == 0"),
    (FlashInferTrtllm, "B200", GemmProblem(8, 96, 256), "weight shuffle needs N % 128 == 0 and K % 64 == 0, got N=96"),
])
def test_a_problem_outside_a_backends_requirement_is_skipped_naming_the_rule(monkeypatch, backend, gpu, problem, why):
    pretend(monkeypatch, gpu)
    be = backend(api=_fake((12, 0) if gpu == "RTX PRO 6000" else (10, 0), cute_dsl=True).api())
    assert be.availability(CPU).ok
    assert why in (be.unsupported_reason(problem) or ""), be.unsupported_reason(problem)


def test_auto_offers_cutedsl_low_latency_last_for_a_decode_sized_m_only(monkeypatch):
    pretend(monkeypatch, "B200")
    fake = _fake((10, 0), cuda="13.0", cudnn=91500, cudnn_frontend="1.14.0", cute_dsl=True)
    assert _choice(FlashInferAuto, fake)["candidates"] == ["cudnn", "cutlass", "cutedsl_low_latency"]
    assert _choice(FlashInferAuto, fake, GemmProblem(9, 64, 128))["candidates"] == ["cudnn", "cutlass"]
    fake.cute_dsl = False  # FlashInfer did not find the CuTe DSL: the heuristic leaves it out
    assert _choice(FlashInferAuto, fake)["candidates"] == ["cudnn", "cutlass"]


def test_the_fake_takes_each_releases_keywords_only():
    """0.7.4's ``autotune(tie_tolerance=)`` and ``mm_fp4(batch_invariant=)`` are a TypeError under
    0.7.2.post1, as they are in that release (autotuner.py:835, gemm_base.py:9538)."""
    old = _fake((10, 0))
    with pytest.raises(TypeError, match="tie_tolerance"):
        with old.tuner.tuning(True, tie_tolerance=0.01):
            pass
    new = FakeMmFp4(dense=FakeFlashInfer(version="0.7.4"), tuner=FakeAutoTuner(version="0.7.4"), sm=(10, 0))
    with new.tuner.tuning(True, tie_tolerance=0.01):
        assert new.tuner.tie_tolerance == 0.01
    assert new.tuner.tie_tolerance == 0.0
    a = torch.zeros(1, 64, dtype=torch.uint8)
    with pytest.raises(TypeError, match="batch_invariant"):
        old(a, a.T, a, a.T, batch_invariant=False)


def test_a_tie_tolerance_keeps_the_first_near_tied_tactic_enumerated_before_the_fastest(monkeypatch):
    """0.7.4 ``AutoTuner._settle_near_ties``: the fake's tactic t measures 1 + t/1000 CUTLASS launches,
    but the planted ``tuned_wrong`` tactic 2 half of that (0.501); tactic 0 (1.0) is enumerated before
    it and within a tolerance of 0.999 (limit 1.0015), not within 0.9 (limit 0.952)."""
    pretend(monkeypatch, "B200")
    fake = FakeMmFp4(dense=FakeFlashInfer(version="0.7.4"), tuner=FakeAutoTuner(version="0.7.4"), sm=(10, 0),
                     fault="tuned_wrong")  # tactic 2 measures half: the fastest by far
    be = FlashInferAutoTuned(api=fake.api())
    assert _tactic_tuned(be, fake, tie=None) == 2
    fake.tuner.cache.clear()
    assert _tactic_tuned(be, fake, tie=0.9) == 2
    fake.tuner.cache.clear()
    assert _tactic_tuned(be, fake, tie=0.999) == 0


def _tactic_tuned(be, fake, tie):
    problem = GemmProblem(3, 64, 128)
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=1)
    with fake.tuner.tuning(True, tie_tolerance=tie):
        prep = be.prepare(problem, ops, CPU)
    return be.library_choice(prep)["tactic"]


def test_the_trtllm_row_passes_the_weights_shuffled_as_the_kernel_reads_them(monkeypatch):
    """The fake TRT-LLM-gen runner reads ``b`` in the shuffled layout: unshuffled weights (what every
    other row passes) compute a wrong product, so the reference check of ``_choice`` would fail."""
    pretend(monkeypatch, "B200")
    problem = GemmProblem(4, 128, 128)
    be = FlashInferTrtllm(api=_fake((10, 0)).api())
    ops = make_operands(problem, "nvfp4", "nvfp4", seed=5)
    right = be.run(be.prepare(problem, ops, CPU), DEFAULT_TACTIC).clone()
    monkeypatch.setattr(FlashInferTrtllm, "inputs", lambda self, p, o, d: nvfp4_inputs(p, o, d, self.name))
    wrong = be.run(be.prepare(problem, ops, CPU), DEFAULT_TACTIC)
    assert_matches_reference(right, ops)
    assert not torch.equal(right, wrong)
