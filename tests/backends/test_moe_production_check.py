"""The production check (``CaseRunner``: ``reference_and_bound`` with the row's own reference options,
then ``verify.check_case``) names a fused-MoE library that swaps gate and up, or misreads the weight
scale layout, as a mismatch -- at a size where the elementwise bound alone lets both by (its magnitude
term grows as sqrt(I)·|ref|), so the bulk tier is what catches them. Each NVFP4 fused-MoE fake: the
CUTLASS row (``fakes.flashinfer_moe_api``), TRT-LLM-gen (``fakes.flashinfer_trtllm_moe``) and b12x
(``fakes.flashinfer_b12x_moe``)."""

from __future__ import annotations

import pytest
import torch

from fakes.arch import pretend
from fakes.flashinfer_b12x_moe import FakeB12xMoE, modules as b12x_modules
from fakes.flashinfer_mm_fp4 import FakeAutoTuner
from fakes.flashinfer_moe_api import FakeFlashInfer, moe_problem
from fakes.flashinfer_trtllm_moe import FakeTrtllmMoE, modules as trtllm_modules
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.builtin import flashinfer_b12x_moe as fbm
from fp4bench.backends.builtin import flashinfer_moe as fim
from fp4bench.backends.builtin import flashinfer_trtllm_moe as ftm
from fp4bench.measure.timing import TimingConfig
from fp4bench.measure.verify import MISMATCH
from fp4bench.run.case import FAILED, MEASURED, CaseRunner

CPU = torch.device("cpu")
pytestmark = pytest.mark.usefixtures("one_thread")
#: 8 tokens, 4 experts, top-2, H = 2048, I = 512: the elementwise bound holds every fault below (worst
#: element 0.64-0.94 of it) while the output is wrong by 60-83 % in norm
PROBLEM = moe_problem(t=8, e=4, k=2, h=1024, i=512, seed=0)


def _cutlass(fault):
    return fim.FlashInferCutlassMoENVFP4(api=FakeFlashInfer("100", n1=1, n2=1, mistake=fault)), "B200"


def _trtllm(fault):
    fake = FakeTrtllmMoE(version="0.7.4", tuner=FakeAutoTuner(version="0.7.4"), fault=fault)
    flashinfer, core = trtllm_modules(fake)
    return ftm.FlashInferTrtllmMoE(api=ftm.trtllm_moe_api(flashinfer, core, lambda: fake.tuner)), "B200"


def _b12x(fault):
    return fbm.FlashInferB12xMoE(api=fbm.B12xMoEApi(**b12x_modules(FakeB12xMoE(version="0.7.4", fault=fault)))), \
        "RTX PRO 6000"


ROWS = {"cutlass-nvfp4": _cutlass, "trtllm-gen": _trtllm, "b12x": _b12x}


def _check(row, fault, monkeypatch):
    be, gpu = ROWS[row](fault)
    pretend(monkeypatch, gpu)
    runner = CaseRunner(CPU, TimingConfig(mode="cpu", time_budget_s=0.01), replays=0)
    return runner.run(be, PROBLEM, DEFAULT_TACTIC, measure=False)


@pytest.mark.parametrize("row, fault", [("cutlass-nvfp4", "gate_first"), ("cutlass-nvfp4", "scales_linear"),
                                        ("trtllm-gen", "gate_first"), ("trtllm-gen", "scales_linear"),
                                        ("b12x", "gate_first"), ("b12x", "scales_linear")])
def test_a_swapped_gate_up_or_misread_scale_layout_is_a_mismatch_in_production(row, fault, monkeypatch):
    res = _check(row, fault, monkeypatch)
    assert res.status == FAILED and res.check.kind == MISMATCH, res.reason
    assert res.check.worst_bound_ratio <= 1.0  # the elementwise tier alone passes it ...
    assert res.check.detail.startswith("bulk tier: relative error ")  # ... the bulk tier names it
    assert 10 ** (-res.check.sqnr_db / 20) > 0.5  # wrong by half the output or more


@pytest.mark.parametrize("row", sorted(ROWS))
def test_the_correct_library_passes_the_production_check(row, monkeypatch):
    res = _check(row, None, monkeypatch)
    assert res.status == MEASURED and res.check.ok, res.reason
    assert res.check.sqnr_db > 50  # relative error norm ~1.6e-3: the bf16 store of the output
