"""Each ``mm_fp4`` backend's own tactics as rows (``--fp4-tactics all``), against the fake ``mm_fp4``
(``fakes.flashinfer_mm_fp4``): the list is the backend's runner's ``get_valid_tactics`` for the problem,
each row runs its tactic through the tuner and computes the reference, the library-choice rows keep one row."""

from __future__ import annotations

import pytest
import torch

from fakes.arch import pretend
from fakes.checks import assert_matches_reference
from fakes.flashinfer import SM100_CONFIGS, SM120_CONFIGS, FakeFlashInfer
from fakes.flashinfer_mm_fp4 import WRONG_TACTIC, FakeAutoTuner, FakeMmFp4
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.builtin._mm_fp4 import ShapeProfile, tactic_label
from fp4bench.backends.builtin.flashinfer_auto import FlashInferAuto, FlashInferAutoTuned
from fp4bench.backends.builtin.flashinfer_b12x import FlashInferB12x
from fp4bench.backends.builtin.flashinfer_cudnn import FlashInferCudnn
from fp4bench.backends.builtin.flashinfer_trtllm import FlashInferTrtllm
from fp4bench.workload.operands import make_operands
from fp4bench.workload.problems import GemmProblem

CPU = torch.device("cpu")
PROBLEM = GemmProblem(3, 128, 256)


def _fake(cc, **kw) -> FakeMmFp4:
    """A build of the first four configs per family (few rows, fast; ``WRONG_TACTIC`` is one of them)."""
    lists = {"sm100": SM100_CONFIGS[:4], "sm103": SM100_CONFIGS[:4], "sm120": SM120_CONFIGS[:4]}
    return FakeMmFp4(dense=FakeFlashInfer(config_lists=lists), tuner=FakeAutoTuner(), sm=cc, cuda="13.0",
                     cudnn=91500, cudnn_frontend="1.14.0", cute_dsl=True, **kw)


@pytest.mark.parametrize("backend, gpu, cc", [(FlashInferCudnn, "B200", (10, 0)), (FlashInferTrtllm, "B300", (10, 3)),
                                               (FlashInferB12x, "RTX PRO 6000", (12, 0))])
def test_each_listed_tactic_is_a_row_that_runs_it_and_computes_the_reference(monkeypatch, backend, gpu, cc):
    pretend(monkeypatch, gpu)
    fake = _fake(cc)
    be = backend(api=fake.api())
    tactics = be.tactics(PROBLEM, CPU)
    listed = fake.dense._runner(*cc).get_valid_tactics([], None)
    assert tactics[0] == DEFAULT_TACTIC and [t.value for t in tactics[1:]] == listed and len(listed) > 1
    assert [t.label for t in tactics[1:]] == [f"t{i}" for i in listed]
    ops = make_operands(PROBLEM, "nvfp4", "nvfp4", seed=1)
    prep = be.prepare(PROBLEM, ops, CPU)
    for tactic in tactics:
        before = len(fake.dense.kernels)
        prep.out.fill_(float("nan"))
        assert_matches_reference(be.run(prep, tactic), ops)
        ran = -1 if tactic.value is None else tactic.value
        assert fake.dense.kernels[before:] and fake.dense.kernels[-1].endswith(f"_t{ran}"), fake.dense.kernels[before:]
        assert be.library_choice(prep)["tactic"] == ran  # what the call ran, as the tuner answered it


def test_a_wrong_listed_tactic_fails_its_check(monkeypatch):
    """Negative control: the fake's ``tuned_wrong`` tactic computes without alpha; its row alone is wrong."""
    pretend(monkeypatch, "B200")
    fake = _fake((10, 0), fault="tuned_wrong")
    be = FlashInferCudnn(api=fake.api())
    ops = make_operands(PROBLEM, "nvfp4", "nvfp4", seed=2)
    prep = be.prepare(PROBLEM, ops, CPU)
    for tactic in be.tactics(PROBLEM, CPU):
        out = be.run(prep, tactic)
        if tactic.value == WRONG_TACTIC:
            with pytest.raises(AssertionError):
                assert_matches_reference(out, ops)
        else:
            assert_matches_reference(out, ops)


def test_the_library_choice_rows_keep_one_row_and_the_listing_leaves_the_tuner_as_it_was(monkeypatch):
    pretend(monkeypatch, "B200")
    fake = _fake((10, 0))
    for backend in (FlashInferAuto, FlashInferAutoTuned):
        assert backend(api=fake.api()).tactics(PROBLEM, CPU) == [DEFAULT_TACTIC]
    FlashInferCudnn(api=fake.api()).tactics(PROBLEM, CPU)
    assert "choose_one" not in vars(fake.tuner) and not fake.tuner.cache  # nothing tuned, nothing left patched


def test_a_tactic_label_is_stable_for_the_forms_runners_list():
    """ints (CUTLASS, TRT-LLM-gen), tuples of tiles and flags (b12x: gemm_base.py ``B12xFp4GemmRunner``)."""
    assert tactic_label(3) == "t3"
    assert tactic_label(((128, 64), (1, 1), True, False, "sm120", None)) == "t128-64-1-1-True-False-sm120-None"
    assert ShapeProfile([torch.zeros(3, 4), None, 7]).get_opt_shapes() == [(3, 4), None, None]
