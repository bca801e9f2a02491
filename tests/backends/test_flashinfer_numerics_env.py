"""FlashInfer's NVFP4 quantization environment: recorded in the fingerprint, shown under "what
changed", pinned where the installed ``cutlass_fused_moe`` takes ``nvfp4_4over6``, named on a
failed NVFP4 MoE check; the release fakes accept exactly their release's keywords."""

from __future__ import annotations

import pytest

from fakes import flashinfer_releases as releases
from fakes.flashinfer_moe import FakeFusedMoE
from fp4bench.backends.builtin import _numerics_env as numerics_env
from fp4bench.backends.base import Prepared
from fp4bench.backends.builtin.flashinfer_moe import FlashInferCutlassMoENVFP4
from fp4bench.env import collect_fingerprint
from fp4bench.report.tables import describe_changes


def test_the_fingerprint_records_the_set_variables_and_the_gate_names_a_difference(monkeypatch):
    for name in numerics_env.NVFP4_QUANT_ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    base = collect_fingerprint("cpu")
    assert base.flashinfer_numerics_env is None
    monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6", "1")
    monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6_ERR_MODE", "mse")
    now = collect_fingerprint("cpu")
    value = "FLASHINFER_NVFP4_4OVER6=1, FLASHINFER_NVFP4_4OVER6_ERR_MODE=mse"
    assert now.flashinfer_numerics_env == value
    assert base.differences(now) == [("flashinfer_numerics_env", None, value)]
    assert "FLASHINFER_NVFP4_4OVER6=1" in describe_changes(base.differences(now))


def test_the_release_fakes_take_only_their_releases_keywords():
    old, new = FakeFusedMoE(version="0.7.2.post1"), FakeFusedMoE(version="0.7.4")
    required = {n: None for n, p in new.release.cutlass_fused_moe.parameters.items() if p.default is p.empty}
    with pytest.raises(TypeError, match="cutlass_fused_moe\\(\\) got an unexpected keyword argument 'nvfp4_4over6'"):
        old.cutlass_fused_moe(**required, nvfp4_4over6=None)
    with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_keyword'"):
        new.cutlass_fused_moe(**required, not_a_keyword=1)
    assert "nvfp4_4over6" in releases.RELEASES["0.7.4"].cutlass_fused_moe.parameters
    with pytest.raises(TypeError, match="MoERunner\\(\\) missing a required argument"):
        releases.bind(releases.RELEASES["0.7.4"].moe_runner, "MoERunner", {"x_dtype": None})


class _Api:
    """The one ``FlashInferMoEApi`` question the pin asks, answered from a release's signature."""

    def __init__(self, version: str):
        self.sig = releases.release(version).cutlass_fused_moe

    def accepts(self, keyword: str) -> bool:
        return keyword in self.sig.parameters


@pytest.mark.parametrize("version, pinned", [("0.7.2.post1", False), ("0.7.4", True)])
def test_the_nvfp4_moe_pins_4over6_off_only_where_the_library_takes_it(monkeypatch, version, pinned):
    be = FlashInferCutlassMoENVFP4(api=_Api(version))
    assert be._pinned_recipe() == ({"nvfp4_4over6": None} if pinned else {})
    monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6", "1")
    monkeypatch.setenv("FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH", "1")
    prep = Prepared(problem=None, out=None, args={"call": dict(be._pinned_recipe())})
    hint = be.failure_hint(prep)
    assert "FLASHINFER_DISABLE_FP4_QUANT_FAST_MATH=1" in hint  # never pinned by nvfp4_4over6
    assert ("FLASHINFER_NVFP4_4OVER6=1" in hint) == (not pinned)


def test_the_moe_fake_reads_the_4over6_environment_as_the_library_does(monkeypatch):
    """On only for exactly "1" (TRT-LLM ``getBoolEnv``); absolute error unless ERR_MODE is MSE
    (any case); another ERR_MODE is an error."""
    from fakes.flashinfer_moe import four_over_six_from_env

    for value, mode in (("true", None), ("0", None), ("1", "MAE")):
        monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6", value)
        assert four_over_six_from_env() == mode, value
    monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6_ERR_MODE", "mse")
    assert four_over_six_from_env() == "MSE"
    monkeypatch.setenv("FLASHINFER_NVFP4_4OVER6_ERR_MODE", "max")
    with pytest.raises(ValueError, match="must be MAE or MSE"):
        four_over_six_from_env()
