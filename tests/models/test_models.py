"""Model catalog: numbers against the configs' published values, sources for every number, lookup, discovery."""

from __future__ import annotations

import textwrap
from dataclasses import fields

import pytest

from fp4bench.models import (
    DEFAULT_MODEL,
    SOURCE_TAGS,
    SOURCED_FIELDS,
    MoEModel,
    all_models,
    build_registry,
    get_model,
    list_models,
    sourced_values,
)
from fp4bench.workload.problems import BYTES_PER_ELEMENT

# published config.json values, transcribed by hand:
# H, I, E, top-k, shared count, shared intermediate, MoE layers, layers, native format,
# NVFP4 (MXFP4 for gpt-oss) MB per expert gate_up / down (None where the doc gives "—"),
# I/TP for TP = 2 / 4 / 8 / 16.
DOC = {
    "deepseek-v3": (7168, 2048, 256, 8, 1, 2048, 58, 61, "nvfp4", (16.5, 8.3), (1024, 512, 256, 128)),
    "kimi-k2": (7168, 2048, 384, 8, 1, 2048, 60, 61, "nvfp4", (16.5, 8.3), (1024, 512, 256, 128)),
    "glm-5": (6144, 2048, 256, 8, 1, 2048, 75, 78, "nvfp4", (14.2, 7.1), (1024, 512, 256, 128)),
    "glm-4.5": (5120, 1536, 160, 8, 1, 1536, 89, 92, "nvfp4", (8.8, 4.4), (768, 384, 192, 96)),
    "glm-4.5-air": (4096, 1408, 128, 8, 1, 1408, 45, 46, "nvfp4", None, (704, 352, 176, 88)),
    "qwen3-235b-a22b": (4096, 1536, 128, 8, 0, 0, 94, 94, "nvfp4", (7.1, 3.5), (768, 384, 192, 96)),
    "qwen3-30b-a3b": (2048, 768, 128, 8, 0, 0, 48, 48, "nvfp4", (1.8, 0.9), (384, 192, 96, 48)),
    "llama-4-scout": (5120, 8192, 16, 1, 1, 8192, 48, 48, "nvfp4", (47.2, 23.6), (4096, 2048, 1024, 512)),
    "llama-4-maverick": (5120, 8192, 128, 1, 1, 8192, 24, 48, "nvfp4", (47.2, 23.6), (4096, 2048, 1024, 512)),
    "gpt-oss-120b": (2880, 2880, 128, 4, 0, 0, 36, 36, "mxfp4", (8.8, 4.4), (1440, 720, 360, 180)),
    "gpt-oss-20b": (2880, 2880, 32, 4, 0, 0, 24, 24, "mxfp4", (8.8, 4.4), (1440, 720, 360, 180)),
    "mixtral-8x7b": (4096, 14336, 8, 2, 0, 0, 32, 32, "bf16", (66.0, 33.0), (7168, 3584, 1792, 896)),
}
NUMERIC = ("hidden", "moe_intermediate", "num_experts", "top_k", "shared_experts",
           "shared_intermediate", "moe_layers", "num_layers", "native_format")


def test_catalog_is_exactly_the_documented_models():
    # a model added without a doc row here fails, so its numbers get checked too
    assert set(list_models()) == set(DOC)


@pytest.mark.parametrize("name", sorted(DOC))
def test_numbers_match_doc(name):
    m = get_model(name)
    assert tuple(getattr(m, f) for f in NUMERIC) == DOC[name][:9]


@pytest.mark.parametrize("name", sorted(DOC))
def test_inter_per_rank_matches_doc(name):
    m = get_model(name)
    assert tuple(m.inter_per_rank(tp) for tp in (2, 4, 8, 16)) == DOC[name][10]
    assert m.gate_up_nk(8) == (2 * DOC[name][10][2], m.hidden)
    assert m.down_nk(8) == (m.hidden, DOC[name][10][2])


@pytest.mark.parametrize("name", sorted(n for n in DOC if DOC[n][9] is not None))
def test_weight_megabytes_per_expert_match_doc(name):
    m = get_model(name)
    (gn, gk), (dn_, dk) = m.gate_up_nk(1), m.down_nk(1)
    bpe = BYTES_PER_ELEMENT[m.fp4_format]  # block scales included
    gu, dn = gn * gk * bpe, dn_ * dk * bpe
    # the doc prints MB (1e6 bytes) rounded to 0.1 (Mixtral to 1): allow half a rounding step
    tol = 0.5 if name == "mixtral-8x7b" else 0.05
    assert gu / 1e6 == pytest.approx(DOC[name][9][0], abs=tol)
    assert dn / 1e6 == pytest.approx(DOC[name][9][1], abs=tol)


@pytest.mark.parametrize("model", all_models(), ids=lambda m: m.name)
def test_every_number_has_a_tagged_source(model):
    # every field holding a number (or the format fact) must be a sourced field ...
    for f in fields(model):
        value = getattr(model, f.name)
        if (isinstance(value, int) and not isinstance(value, bool)) or f.name == "native_format":
            assert f.name in SOURCED_FIELDS, f"{f.name} is a number without a required source"
    # ... and every sourced field has a non-empty source carrying one of the doc's tags
    for name, value in sourced_values(model).items():
        src = model.sources[name]
        assert src.strip(), f"{model.name}.{name}={value} has an empty source"
        assert any(tag in src for tag in SOURCE_TAGS), f"{model.name}.{name}: untagged source {src!r}"


def test_doc_tags_carried_verbatim():
    assert "[source]" in get_model("deepseek-v3").sources["hidden"]
    assert "config_671B.json" in get_model("deepseek-v3").sources["hidden"]
    assert "[secondary]" in get_model("kimi-k2").sources["num_experts"]
    assert "[unverified]" in get_model("qwen3-30b-a3b").sources["moe_layers"]
    assert "[unverified]" in get_model("glm-4.5-air").sources["hidden"]
    assert "glm_moe_dsa" in get_model("glm-5").sources["hidden"]


def test_formats():
    assert get_model("gpt-oss-120b").fp4_format == "mxfp4"
    assert get_model("glm-5").fp4_format == "nvfp4"
    assert get_model("mixtral-8x7b").fp4_format == "nvfp4"  # bf16 checkpoint, benchmarked as NVFP4


def test_default_model_is_glm5():
    assert DEFAULT_MODEL == "glm-5"
    assert get_model().name == "glm-5"


@pytest.mark.parametrize(
    "alias, name",
    [
        ("deepseek-r1", "deepseek-v3"),
        ("DeepSeek_R1", "deepseek-v3"),
        ("deepseek-ai/DeepSeek-R1", "deepseek-v3"),
        ("  GLM-5 ", "glm-5"),
        ("glm-5.1", "glm-5"),
        ("glm-4.7", "glm-4.5"),
        ("Qwen/Qwen3-235B-A22B", "qwen3-235b-a22b"),
        ("openai/gpt-oss-20b", "gpt-oss-20b"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama-4-scout"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral-8x7b"),
    ],
)
def test_aliases(alias, name):
    assert get_model(alias).name == name


@pytest.mark.parametrize("bad", ["llama-3-70b", "deepseek", "glm", "", "   ", None, 7])
def test_unknown_model_lists_known_names(bad):
    with pytest.raises(ValueError) as e:
        get_model(bad)
    msg = str(e.value)
    assert repr(bad) in msg
    if isinstance(bad, str) and bad.strip():
        assert "glm-5" in msg and "deepseek-v3" in msg


def test_model_instance_passes_through_and_is_hashable_and_read_only():
    m = get_model("glm-5")
    assert get_model(m) is m
    assert len({m, get_model("glm5")}) == 1
    with pytest.raises(TypeError):
        m.sources["hidden"] = "x"  # type: ignore[index]


@pytest.mark.parametrize("name, tp", [("glm-5", 3), ("gpt-oss-120b", 7), ("mixtral-8x7b", 3), ("qwen3-30b-a3b", 5)])
def test_tp_must_divide_intermediate(name, tp):
    with pytest.raises(ValueError, match=f"TP={tp} does not divide"):
        get_model(name).inter_per_rank(tp)


@pytest.mark.parametrize("tp", [0, -2, 1.5, True])
def test_tp_must_be_positive_int(tp):
    with pytest.raises(ValueError, match="TP size"):
        get_model("glm-5").check_tp(tp)


def _kwargs(**over):
    base = dict(
        name="toy", hidden=64, moe_intermediate=32, num_experts=4, top_k=2, shared_experts=0,
        shared_intermediate=0, moe_layers=2, num_layers=2, native_format="nvfp4",
        sources={f: "[unverified] test" for f in SOURCED_FIELDS},
    )
    base.update(over)
    return base


@pytest.mark.parametrize(
    "over, match",
    [
        (dict(sources={f: "[source] x" for f in SOURCED_FIELDS if f != "top_k"}), "no source for \\['top_k'\\]"),
        (dict(sources={**{f: "[source] x" for f in SOURCED_FIELDS}, "hidden": "a config"}), "trust tag"),
        (dict(sources={**{f: "[source] x" for f in SOURCED_FIELDS}, "bogus": "[source] x"}), "unknown fields"),
        (dict(shared_experts=1), "must both be zero or both positive"),
        (dict(top_k=5), "top_k=5 exceeds num_experts=4"),
        (dict(moe_layers=3), "moe_layers=3 exceeds"),
        (dict(native_format="int4"), "native_format"),
        (dict(hidden=0), "hidden must be a positive int"),
        (dict(name="Toy Model"), "model name"),
    ],
)
def test_model_validation(over, match):
    with pytest.raises(ValueError, match=match):
        MoEModel(**_kwargs(**over))


def _write_pkg(root, pkgname, files):
    pkg = root / pkgname
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, body in files.items():
        (pkg / f"{name}.py").write_text(textwrap.dedent(body))


_TOY = """
    from fp4bench.models.moe_model import MoEModel, SOURCED_FIELDS
    MODELS = (MoEModel(name="{name}", hidden=64, moe_intermediate=32, num_experts=4, top_k=2,
                       shared_experts=0, shared_intermediate=0, moe_layers=2, num_layers=2,
                       native_format="nvfp4", sources={{f: "[unverified] toy" for f in SOURCED_FIELDS}},
                       aliases=("{alias}",)),)
"""


def test_adding_a_family_file_registers_it(tmp_path, monkeypatch):
    _write_pkg(tmp_path, "toymodels_ok", {"toy": _TOY.format(name="toy-moe", alias="toy"), "helpers": "X = 1\n"})
    monkeypatch.syspath_prepend(str(tmp_path))
    table = build_registry("toymodels_ok")
    assert table["toy-moe"] is table["toy"]
    assert table["toy-moe"].num_experts == 4
    assert set(table) == {"toy-moe", "toy"}  # modules without MODELS are ignored


def test_duplicate_names_are_an_error(tmp_path, monkeypatch):
    files = {"a": _TOY.format(name="toy-a", alias="dup"), "b": _TOY.format(name="toy-b", alias="dup")}
    _write_pkg(tmp_path, "toymodels_dup", files)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ValueError, match="'dup' defined twice"):
        build_registry("toymodels_dup")


def test_real_registry_maps_every_alias_to_its_model():
    table = build_registry()
    for m in all_models():
        for a in m.aliases:
            assert table[a] is m
