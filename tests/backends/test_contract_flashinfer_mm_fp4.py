"""Contract tests of the ``mm_fp4`` rows (``flashinfer-auto``, ``-auto-tuned``, ``-cudnn``, ``-b12x``,
``-cute-dsl``) against the fake ``mm_fp4`` (``fakes.flashinfer_mm_fp4``): what ``auto`` picks for
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


# gpu, nvcc, cuDNN backend version -> the backend auto runs first (gemm_base.py _heuristic_func_mm_fp4)
AUTO_CASES = [
    ("B200", (10, 0), "12.9", 91500, "cutlass"),    # CUDA 12: CUTLASS first whatever cuDNN is
    ("B200", (10, 0), "13.0", 91400, "cutlass"),    # cuDNN below 9.15
    ("B200", (10, 0), "13.0", 91500, "cudnn"),      # the cuDNN-first case
    ("B300", (10, 3), "13.0", 91500, "cutlass"),    # SM103: CUTLASS first
    ("B200", (10, 0), "13.0", None, "cutlass"),     # cudnn-frontend not importable
    ("RTX PRO 6000", (12, 0), "13.0", 91500, "b12x"),   # SM120 + CUDA 13: b12x first
    ("RTX PRO 6000", (12, 0), "12.9", 91500, "cutlass"),
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
    (FlashInferB12x, "RTX PRO 6000", (12, 0), dict(cuda="12.9", cute_dsl=True), "b12x needs CUDA >= 13; FlashInfer reads CUDA 12.9"),
    (FlashInferB12x, "RTX PRO 6000", (12, 0), dict(cuda="13.0", cute_dsl=False), "CuTe DSL (nvidia-cutlass-dsl)"),
    (FlashInferB12x, "B200", (10, 0), dict(cuda="13.0", cute_dsl=True), "mm_fp4 backend 'b12x' does not support SM100"),
    (FlashInferCuteDsl, "RTX PRO 6000", (12, 0), dict(cute_dsl=True), "mm_fp4 backend 'cute-dsl' does not support SM120"),
])
def test_an_unavailable_backend_names_the_version_or_gpu_that_rules_it_out(monkeypatch, backend, gpu, cc, kw, why):
    pretend(monkeypatch, gpu)
    avail = backend(api=_fake(cc, **kw).api()).availability(CPU)
    assert not avail.ok and why in avail.reason and "flashinfer 0.7.2.post1" in avail.reason, avail.reason


@pytest.mark.parametrize("backend, gpu, cc", [(FlashInferCudnn, "B200", (10, 0)), (FlashInferB12x, "RTX PRO 6000", (12, 0)),
                                              (FlashInferCuteDsl, "B200", (10, 0))])
def test_each_explicit_backend_computes_the_reference_and_records_its_default_tactic(monkeypatch, backend, gpu, cc):
    pretend(monkeypatch, gpu)
    fake = _fake(cc, cuda="13.0", cudnn=91500, cudnn_frontend="1.14.0", cute_dsl=True)
    be = backend(api=fake.api())
    assert be.availability(CPU).ok
    choice = _choice(backend, fake, GemmProblem(130, 96, 256))
    assert choice["backend"] == be.library_backend and choice["tactic"] == -1 and choice["candidates"] == [be.library_backend]
