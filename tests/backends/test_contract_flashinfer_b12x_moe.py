"""Contract tests of the b12x fused-MoE row (``flashinfer_b12x_moe.py``) on CPU, against the fake
``b12x_fused_moe`` (``fakes.flashinfer_b12x_moe``), which quantizes the bf16 activations itself with the
given scale, reads the weight scales through the MMA layout and up rows first, and applies the folded
alphas: a marshalling mistake makes it fail or diverge from ``reference_moe``."""

from __future__ import annotations

import functools
import re

import pytest
import torch

from fakes.arch import pretend
from fakes.flashinfer_b12x_moe import FakeB12xMoE, modules
from fakes.flashinfer_moe_api import matches, moe_problem
from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.backends.builtin import flashinfer_b12x_moe as fbm
from fp4bench.reference.bound import reference_and_bound
from fp4bench.workload.operands import make_operands

CPU = torch.device("cpu")
#: small tensors: torch's thread pool costs more than it saves (conftest ``one_thread``)
pytestmark = pytest.mark.usefixtures("one_thread")


def _backend(version="0.7.4", **fake_kw):
    fake = FakeB12xMoE(version=version, **fake_kw)
    return fbm.FlashInferB12xMoE(api=fbm.B12xMoEApi(**modules(fake))), fake


@functools.lru_cache(maxsize=None)
def _ops(seed=0):
    """4 tokens, 4 experts, top-2, H = 128, I = 64 (made once per seed: the adapter only reads them)."""
    return make_operands(moe_problem(t=4, e=4, k=2, h=128, i=64, seed=seed), "nvfp4", "nvfp4", seed=seed)


def _checked(be, ops) -> tuple[bool, object]:
    prep = be.prepare(ops.problem, ops, CPU)
    ref = reference_and_bound(ops, be.reference_options(prep))
    prep.out.fill_(float("nan"))
    return matches(be.run(prep, DEFAULT_TACTIC), ref), prep


@pytest.mark.parametrize("version, seed", [("0.7.2.post1", 0), ("0.7.4", 1)])
def test_the_row_computes_the_reference_from_the_bf16_activations(version, seed, monkeypatch):
    pretend(monkeypatch, "RTX PRO 6000")
    be, fake = _backend(version=version)
    ops = _ops(seed=seed)
    assert be.tactics(ops.problem, CPU) == [DEFAULT_TACTIC]  # the library lists no tactics
    ok, prep = _checked(be, ops)
    assert ok and fake.calls == 1
    assert float(prep.out.float().abs().max()) > 0
    x = prep.args["call"]["x"]  # the originals (values on a rounding tie one ulp off it), quantized by the kernel
    assert x.dtype == torch.bfloat16 and int((x.view(torch.int16) - ops.a.view(torch.int16)).abs().max()) <= 1
    assert be.reference_options(prep)["kernel_input"] is x
    assert be.library_choice(prep) is None


@pytest.mark.parametrize("fault", ["gate_first", "scales_linear", "ignore_alphas"])
def test_a_library_reading_the_arguments_another_way_fails_the_check(fault, monkeypatch):
    """Negative control: each misreading makes the same check fail."""
    pretend(monkeypatch, "RTX PRO 6000")
    be, _ = _backend(fault=fault)
    assert _checked(be, _ops())[0] is False


def test_input_global_scale_is_the_decode_scale_the_kernel_folds_into_fc1(monkeypatch):
    """Passing the encode scale instead (the other convention) scales FC1 by gs_a^2: the check fails."""
    pretend(monkeypatch, "RTX PRO 6000")
    be, _ = _backend()
    ops = _ops()
    prep = be.prepare(ops.problem, ops, CPU)
    call = prep.args["call"]
    assert torch.allclose(call["input_global_scale"] * ops.qa.global_scale.float(), torch.ones(1))
    call["input_global_scale"] = 1.0 / call["input_global_scale"]
    assert not matches(be.run(prep, DEFAULT_TACTIC), reference_and_bound(ops, be.reference_options(prep)))


@pytest.mark.parametrize("gpu, why", [("H200", r"SM120/121 only; this is SM90"),
                                      ("B200", r"SM120/121 only; this is SM100")])
def test_the_row_is_absent_off_sm120_naming_the_gpu(gpu, why, monkeypatch):
    pretend(monkeypatch, gpu)
    avail = _backend()[0].availability(CPU)
    assert not avail.ok and re.search(why, avail.reason), avail.reason


def test_the_row_is_absent_below_cuda_13_naming_the_versions(monkeypatch):
    pretend(monkeypatch, "RTX PRO 6000")
    be, fake = _backend(version="0.7.2.post1", cuda="12.9")
    avail = be.availability(CPU)
    assert not avail.ok and "CUDA >= 13" in avail.reason and "CUDA 12.9" in avail.reason, avail.reason
    assert "flashinfer 0.7.2.post1" in avail.reason
    ops = _ops()
    with pytest.raises(ValueError, match="requires CUDA 13"):  # what the library does if called anyway
        be.run(be.prepare(ops.problem, ops, CPU), DEFAULT_TACTIC)


def test_the_row_is_available_on_sm120_and_sm121_naming_the_release(monkeypatch):
    for gpu in ("RTX PRO 6000", "GB10"):
        pretend(monkeypatch, gpu)
        avail = _backend(version="0.7.4")[0].availability(CPU)
        assert avail.ok and "flashinfer 0.7.4 (CUDA 13.0)" in avail.reason, avail.reason


def test_an_unknown_keyword_is_a_type_error():
    be, fake = _backend()
    ops = _ops()
    prep = be.prepare(ops.problem, ops, CPU)
    with pytest.raises(TypeError, match="nvfp4_4over6"):
        modules(fake)["fused_moe"](nvfp4_4over6=None, **prep.args["call"])


def test_a_problem_off_the_tiles_is_skipped_naming_the_rule():
    be, _ = _backend()
    why = be.unsupported_reason(moe_problem(h=192, i=96))
    assert why and "hidden=192 (needs a multiple of 128)" in why and "inter=96 (needs a multiple of 64)" in why
    assert be.unsupported_reason(moe_problem(h=256, i=64)) is None
