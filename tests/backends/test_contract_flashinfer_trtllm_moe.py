"""Contract tests of the TRT-LLM-gen fused-MoE rows (``flashinfer_trtllm_moe.py``) on CPU, against the fake
``trtllm_fp4_block_scale_routed_moe`` (``fakes.flashinfer_trtllm_moe``), which decodes the arguments in the
library's layout (linear activation scales, permuted and 128x4-interleaved weight scales, up rows first,
the three output scales) and fails or diverges from ``reference_moe`` when the adapter marshals wrongly."""

from __future__ import annotations

import functools

import pytest
import torch

from fakes.arch import pretend
from fakes.flashinfer_mm_fp4 import MISPICK_TACTIC, FakeAutoTuner
from fakes.flashinfer_moe_api import matches, moe_problem
from fakes.flashinfer_trtllm_moe import CONFIGS, FakeTrtllmMoE, modules
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.builtin import flashinfer_trtllm_moe as ftm
from fp4bench.reference.bound import reference_and_bound
from fp4bench.workload.operands import make_operands

CPU = torch.device("cpu")
RELEASES = ("0.7.2.post1", "0.7.4")


def _backend(cls=ftm.FlashInferTrtllmMoE, version="0.7.2.post1", **fake_kw):
    fake = FakeTrtllmMoE(version=version, tuner=FakeAutoTuner(version=version), **fake_kw)
    flashinfer, core = modules(fake)
    return cls(api=ftm.trtllm_moe_api(flashinfer, core, lambda: fake.tuner)), fake


@functools.lru_cache(maxsize=None)
def _ops(seed=0):
    """A small problem on the 128-row tiles: 4 tokens, 4 experts, top-2, H = I = 128 (made once per seed:
    the adapter only reads the operands)."""
    return make_operands(moe_problem(t=4, e=4, k=2, h=128, i=128, seed=seed), "nvfp4", "nvfp4", seed=seed)


def _checked(be, ops, tactics=(DEFAULT_TACTIC,)) -> tuple[list[bool], object]:
    """Whether each tactic's output passes the check against the reference of the row's options."""
    prep = be.prepare(ops.problem, ops, CPU)
    ref = reference_and_bound(ops, be.reference_options(prep))
    oks = []
    for tactic in tactics:
        prep.out.fill_(float("nan"))
        oks.append(matches(be.run(prep, tactic), ref))
    return oks, prep


@pytest.mark.parametrize("version, seed", [("0.7.2.post1", 0), ("0.7.4", 1)])
def test_every_tactic_computes_the_reference_and_runs_the_pair_it_names(version, seed, monkeypatch):
    pretend(monkeypatch, "B200")
    be, fake = _backend(version=version)
    ops = _ops(seed=seed)
    tactics = be.tactics(ops.problem, CPU)
    assert [t.value for t in tactics] == [None] + [tuple(c) for c in CONFIGS]
    assert [t.label for t in tactics[1:]] == ["tile8-cfg0", "tile8-cfg1", "tile16-cfg0", "tile16-cfg1"]
    oks, prep = _checked(be, ops, tactics)
    assert oks == [True] * len(tactics)
    assert float(prep.out.float().abs().max()) > 0
    assert fake.calls == [-1] + [list(c) for c in CONFIGS]
    assert be.library_choice(prep) is None  # an explicit row: the caller fixes the tactic


@pytest.mark.parametrize("fault", ["gate_first", "scales_linear", "ignore_global"])
def test_a_library_reading_the_arguments_another_way_fails_the_check(fault, monkeypatch):
    """Negative control: each misreading makes the same check fail."""
    pretend(monkeypatch, "B200")
    be, _ = _backend(fault=fault)
    assert _checked(be, _ops())[0] == [False]


def test_the_default_row_is_not_answered_by_a_pick_the_tuner_cached(monkeypatch):
    pretend(monkeypatch, "B200")
    tuned, fake = _backend(ftm.FlashInferTrtllmMoETuned, tuner_fault="mispick")
    ops = _ops()
    tuned.prepare(ops.problem, ops, CPU)
    assert fake.tuner.cache  # the tuner holds a pick for this shape
    plain = ftm.FlashInferTrtllmMoE(api=tuned._library())
    fake.calls.clear()
    plain.run(plain.prepare(ops.problem, ops, CPU), DEFAULT_TACTIC)
    assert fake.calls == [-1]


@pytest.mark.parametrize("version", RELEASES)
def test_the_tuned_row_records_the_tuners_pick_held_to_the_explicit_row(version, monkeypatch):
    pretend(monkeypatch, "B300")
    be, fake = _backend(ftm.FlashInferTrtllmMoETuned, version=version, tuner_fault="mispick")
    ops = _ops()
    assert be.tactics(ops.problem, CPU) == [DEFAULT_TACTIC]
    oks, prep = _checked(be, ops)
    assert oks == [True]
    picked = list(CONFIGS[MISPICK_TACTIC])
    assert fake.calls[-1] == picked  # the timed call runs the cached pick
    assert be.library_choice(prep) == {"backend": "trtllm-gen", "tactic": picked, "tuned": True,
                                       "compare_with": "flashinfer-trtllm-moe-nvfp4"}
    assert be.choice_row and not ftm.FlashInferTrtllmMoE.choice_row


def test_the_call_takes_each_releases_keywords_only(monkeypatch):
    """0.7.4 pins 4over6 off (``nvfp4_4over6=None``); 0.7.2.post1 has no such keyword (TypeError if passed)."""
    pretend(monkeypatch, "B200")
    ops = _ops()
    for version, pinned in (("0.7.2.post1", False), ("0.7.4", True)):
        be, _ = _backend(version=version)
        prep = be.prepare(ops.problem, ops, CPU)
        assert ("nvfp4_4over6" in prep.args["call"]) is pinned
        assert prep.args["call"]["hidden_states_scale_layout"] == 2  # SfLayout.layout_linear
    be, fake = _backend(version="0.7.2.post1")
    flashinfer, _ = modules(fake)
    with pytest.raises(TypeError, match="nvfp4_4over6"):
        flashinfer.fused_moe.trtllm_fp4_block_scale_routed_moe(nvfp4_4over6=None, **prep.args["call"])


@pytest.mark.parametrize("gpu, why", [("H200", r"sm_\[100, 103\] only; this is SM90"),
                                      ("RTX PRO 6000", r"this is SM120"), ("GB10", r"this is SM121")])
def test_the_row_is_absent_off_sm100_naming_the_gpu(gpu, why, monkeypatch):
    pretend(monkeypatch, gpu)
    be, _ = _backend()
    avail = be.availability(CPU)
    assert not avail.ok and pytest.importorskip("re").search(why, avail.reason), avail.reason


def test_the_row_is_available_on_sm100_and_sm103_naming_the_release(monkeypatch):
    for gpu in ("B200", "B300"):
        pretend(monkeypatch, gpu)
        be, _ = _backend(version="0.7.4")
        avail = be.availability(CPU)
        assert avail.ok and "flashinfer 0.7.4" in avail.reason


def test_a_problem_off_the_128_row_tiles_is_skipped_naming_the_rule():
    be, _ = _backend()
    why = be.unsupported_reason(moe_problem(h=256, i=64))
    assert why and "divisible by 128" in why and "inter=64" in why
    assert be.unsupported_reason(moe_problem(h=256, i=128)) is None
