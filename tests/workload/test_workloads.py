"""Workloads: routing, decode problems, the doc's arithmetic."""

from __future__ import annotations

import math
import statistics

import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench.models import get_model, list_models
from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem
from fp4bench.workload.decode import (
    Routing,
    arithmetic_intensity,
    decode_problems,
    expected_active_experts,
    mean_tokens_per_expert,
    parse_routing,
    route,
    route_tensor,
    tokens_per_expert,
)

# ------------------------------------------------------------------------------- arithmetic


def test_seed_tokens_per_expert_glm5():
    # the seed documents: GLM-5 (256 experts, top-8) at concurrency 512 / 1024
    assert mean_tokens_per_expert("glm-5", 512) == 16.0
    assert mean_tokens_per_expert("glm-5", 1024) == 32.0
    assert mean_tokens_per_expert("qwen3-235b-a22b", 512) == 32.0
    assert mean_tokens_per_expert("llama-4-scout", 16) == 1.0


@pytest.mark.parametrize("bad", [0, -1, 2.5])
def test_tokens_per_expert_rejects_bad_concurrency(bad):
    with pytest.raises(ValueError, match="positive int"):
        mean_tokens_per_expert("glm-5", bad)


# expected active experts under uniform routing, E·(1 − (1 − k/E)^B):
# (E, k) -> active experts at B = 1, 8, 32, 128, 512
ACTIVE_DOC = {
    (256, 8): (8, 57, 163, 252, 256),
    (128, 8): (8, 52, 112, 128, 128),
    (128, 4): (4, 29, 82, 126, 128),
    (16, 1): (1, 6.5, 14, 16, 16),
}
ROWS_DOC = {(256, 8): (1.0, 1.1, 1.6, 4.1, 16), (128, 8): (1.0, 1.2, 2.3, 8, 32)}


@pytest.mark.parametrize("ek", sorted(ACTIVE_DOC))
def test_expected_active_experts_matches_doc_table(ek):
    e, k = ek
    for b, want in zip((1, 8, 32, 128, 512), ACTIVE_DOC[ek]):
        # the doc rounds to integers (6.5 to a half): within half a unit
        assert expected_active_experts(e, k, b) == pytest.approx(want, abs=0.5)
    for b, want in zip((1, 8, 32, 128, 512), ROWS_DOC.get(ek, ())):
        # rows per active expert, B·k / E[active]: the typical M_e of a decode grouped GEMM
        assert b * k / expected_active_experts(e, k, b) == pytest.approx(want, abs=0.05)  # doc: one decimal


def test_expected_active_experts_agrees_with_sampled_routing():
    # the formula and the router must describe the same process: mean over 300 seeded batches
    e, k, b, n = 64, 4, 16, 300
    active = [sum(1 for c in tokens_per_expert(route(b, e, k, seed=s), e) if c) for s in range(n)]
    mean, se = statistics.fmean(active), statistics.stdev(active) / math.sqrt(n)
    assert abs(mean - expected_active_experts(e, k, b)) < 4 * se  # 4 standard errors


def test_arithmetic_intensity_by_hand():
    # m=1, n=k=64, NVFP4: 2·64·64 / (64·64·0.5625 + 1·64·0.5625 + 1·64·2) = 8192 / 2468
    assert arithmetic_intensity(1, 64, 64) == pytest.approx(8192 / 2468)
    # bf16 weights of 2 bytes: 2·2·128·256 / (128·256·2 + 2·256·2 + 2·128·2)
    assert arithmetic_intensity(2, 128, 256, "bf16") == pytest.approx(131072 / (65536 + 1024 + 512))


def test_arithmetic_intensity_approaches_the_docs_weight_only_3_56_m():
    """The doc's simplification 2·M_e / bytes per weight (≈ 3.56·M_e for NVFP4) counts weights only:
    the full intensity stays below it and approaches it for large N, K."""
    for m in (1, 4, 16):
        weight_only = 2 * m / 0.5625
        assert arithmetic_intensity(m, 4096, 7168) < weight_only
        assert arithmetic_intensity(m, 1 << 20, 1 << 20) == pytest.approx(weight_only, rel=1e-3)
    assert 2 / 0.5625 == pytest.approx(3.56, abs=0.005)


@pytest.mark.parametrize("args", [(0, 64, 64), (1, 0, 64), (1, 64, -1)])
def test_arithmetic_intensity_rejects_non_positive(args):
    with pytest.raises(ValueError, match="must be positive"):
        arithmetic_intensity(*args)


def test_arithmetic_intensity_rejects_unknown_format():
    with pytest.raises(ValueError, match="unknown format 'int4'"):
        arithmetic_intensity(1, 64, 64, "int4")


# ---------------------------------------------------------------------------------- routing


@settings(max_examples=40, deadline=None)
@given(
    tokens=st.integers(1, 64),
    experts=st.integers(1, 48),
    data=st.data(),
    seed=st.integers(0, 2**31 - 1),
    zipf=st.sampled_from(["uniform", "zipf:0.8", "zipf:1.2", "zipf:2.5"]),
)
def test_routing_properties(tokens, experts, data, seed, zipf):
    k = data.draw(st.integers(1, experts))
    ids = route(tokens, experts, k, zipf, seed)
    assert len(ids) == tokens
    for row in ids:
        assert len(row) == k and len(set(row)) == k
        assert all(0 <= e < experts for e in row)
    counts = tokens_per_expert(ids, experts)
    assert len(counts) == experts and sum(counts) == tokens * k
    assert route(tokens, experts, k, zipf, seed) == ids  # deterministic per seed


def test_different_seeds_give_different_routings():
    assert route(32, 64, 4, seed=0) != route(32, 64, 4, seed=1)
    assert route(32, 64, 4, "zipf:1.2", seed=0) != route(32, 64, 4, "zipf:1.2", seed=1)


def test_uniform_routing_is_uniform():
    # 6000 tokens x top-4 over 32 experts: each expert expects 750 rows; chi-square goodness of fit
    counts = tokens_per_expert(route_tensor(6000, 32, 4, "uniform", seed=3), 32)
    assert scipy.stats.chisquare(counts).pvalue > 1e-3


def test_zipf_routing_follows_popularity():
    # inclusion frequency must rank experts like their Zipf weight (monotone in weight)
    import torch

    from fp4bench.workload.decode import zipf_popularity

    weights = zipf_popularity(32, 1.2, torch.Generator().manual_seed(5))
    counts = tokens_per_expert(route_tensor(4000, 32, 4, "zipf:1.2", seed=5), 32)
    rho = scipy.stats.spearmanr(weights.tolist(), counts).statistic
    assert rho > 0.95


def test_zipf_hot_expert_depends_on_seed():
    # ranks are a seeded permutation: the hottest expert is not always id 0
    import torch

    from fp4bench.workload.decode import zipf_popularity

    hottest = {int(zipf_popularity(64, 1.2, torch.Generator().manual_seed(s)).argmax()) for s in range(10)}
    assert len(hottest) > 3


def test_zipf_skew_raises_peak_load():
    def ratio(routing, seed):
        c = tokens_per_expert(route(64, 128, 8, routing, seed), 128)
        return max(c) / (sum(c) / len(c))

    seeds = range(25)
    uni = statistics.fmean(ratio("uniform", s) for s in seeds)
    z1 = statistics.fmean(ratio("zipf:1.0", s) for s in seeds)
    z2 = statistics.fmean(ratio("zipf:2.0", s) for s in seeds)
    assert uni < z1 < z2


@pytest.mark.parametrize(
    "spec, tag",
    [("uniform", "uniform"), (" Uniform ", "uniform"), ("zipf:1.2", "zipf1.2"), ("zipf=2", "zipf2"),
     ("zipf0.5", "zipf0.5"), (Routing("zipf", 1.5), "zipf1.5")],
)
def test_parse_routing(spec, tag):
    assert parse_routing(spec).tag == tag
    assert parse_routing(parse_routing(spec).tag) == parse_routing(spec)  # tag round-trips


@pytest.mark.parametrize(
    "bad, match",
    [("gauss", "unknown routing"), ("", "unknown routing"), ("zipf", "needs an exponent"),
     ("zipf:", "needs an exponent"), ("zipfian", "not a number"), ("zipf:abc", "not a number"),
     ("zipf:0", "positive finite"),
     ("zipf:-1", "positive finite"), ("zipf:nan", "positive finite"), ("zipf:inf", "positive finite"),
     (1.2, "must be a string")],
)
def test_bad_routing_strings(bad, match):
    with pytest.raises(ValueError, match=match):
        parse_routing(bad)


@pytest.mark.parametrize(
    "args, match",
    [((0, 8, 2), "num_tokens must be a positive int"), ((4, 8, 9), "top_k=9 exceeds num_experts=8"),
     ((4, 0, 1), "num_experts must be a positive int"), ((4, 8, 0), "top_k must be a positive int")],
)
def test_route_rejects_bad_sizes(args, match):
    with pytest.raises(ValueError, match=match):
        route(*args)


def test_tokens_per_expert_rejects_out_of_range_ids():
    with pytest.raises(ValueError, match="out of range"):
        tokens_per_expert(((0, 8),), 8)
    with pytest.raises(ValueError, match="out of range"):
        tokens_per_expert(((-1, 2),), 8)


# ------------------------------------------------------------------------- decode problems


def _by_role(problems):
    return {p.origin.role: p for p in problems}


def test_glm5_decode_problems_tp1():
    ps = decode_problems("glm-5", 16, tp=1, routing="zipf:1.2", seed=7)
    roles = [p.origin.role for p in ps]
    assert roles == ["shared_gate_up", "shared_down", "gate_up", "down", "moe"]
    r = _by_role(ps)
    assert isinstance(r["shared_gate_up"], GemmProblem)
    assert (r["shared_gate_up"].m, r["shared_gate_up"].n, r["shared_gate_up"].k) == (16, 4096, 6144)
    assert (r["shared_down"].m, r["shared_down"].n, r["shared_down"].k) == (16, 6144, 2048)
    assert isinstance(r["gate_up"], GroupedProblem) and (r["gate_up"].n, r["gate_up"].k) == (4096, 6144)
    assert (r["down"].n, r["down"].k) == (6144, 2048)
    moe = r["moe"]
    assert isinstance(moe, MoEProblem)
    assert (moe.hidden, moe.inter, moe.num_experts, moe.top_k, moe.num_tokens) == (6144, 2048, 256, 8, 16)
    for p in ps:
        assert (p.origin.model, p.origin.batch, p.origin.tp, p.origin.routing) == ("glm-5", 16, 1, "zipf1.2")


@pytest.mark.parametrize(
    "name, tp, gate_up_nk, down_nk, shared",
    [
        ("qwen3-235b-a22b", 16, (192, 4096), (4096, 96), None),  # the awkward K=96 split
        ("qwen3-30b-a3b", 16, (96, 2048), (2048, 48), None),
        ("deepseek-v3", 8, (512, 7168), (7168, 256), ((512, 7168), (7168, 256))),
        ("kimi-k2", 4, (1024, 7168), (7168, 512), ((1024, 7168), (7168, 512))),
        ("llama-4-maverick", 2, (8192, 5120), (5120, 4096), ((8192, 5120), (5120, 4096))),
        ("gpt-oss-120b", 8, (720, 2880), (2880, 360), None),
        ("mixtral-8x7b", 2, (14336, 4096), (4096, 7168), None),
    ],
)
def test_decode_problem_shapes_under_tp(name, tp, gate_up_nk, down_nk, shared):
    r = _by_role(decode_problems(name, 8, tp=tp))
    assert (r["gate_up"].n, r["gate_up"].k) == gate_up_nk
    assert (r["down"].n, r["down"].k) == down_nk
    assert r["moe"].inter == down_nk[1]
    if shared is None:
        assert "shared_gate_up" not in r and "shared_down" not in r
    else:
        assert (r["shared_gate_up"].n, r["shared_gate_up"].k) == shared[0]
        assert (r["shared_down"].n, r["shared_down"].k) == shared[1]
        assert r["shared_gate_up"].m == r["shared_down"].m == 8


@pytest.mark.parametrize("name", list_models())
@pytest.mark.parametrize("batch", [1, 37])
def test_decode_problem_invariants(name, batch):
    m = get_model(name)
    for tp in (1, 2, 4, 8, 16):
        ps = decode_problems(m, batch, tp=tp, routing="zipf:1.1", seed=batch)
        r = _by_role(ps)
        counts = r["gate_up"].tokens_per_expert
        assert len(counts) == m.num_experts and sum(counts) == batch * m.top_k
        assert r["down"].tokens_per_expert == counts == r["moe"].tokens_per_expert
        assert r["gate_up"].n == 2 * m.moe_intermediate // tp and r["down"].k == m.moe_intermediate // tp
        assert len({p.id for p in ps}) == len(ps)  # ids are unique per case


def test_decode_problems_deterministic_and_seeded():
    a = decode_problems("deepseek-r1", 32, tp=2, routing="zipf:1.2", seed=4)
    assert a == decode_problems("deepseek-v3", 32, tp=2, routing="zipf:1.2", seed=4)
    assert a != decode_problems("deepseek-v3", 32, tp=2, routing="zipf:1.2", seed=5)
    assert a[0].origin.model == "deepseek-v3"  # aliases resolve to the canonical id


@pytest.mark.parametrize(
    "args, match",
    [
        (("glm-5", 0), "batch"),
        (("glm-5", -4), "batch"),
        (("glm-5", 8, 3), "TP=3 does not divide glm-5"),
        (("glm-5", 8, 0), "TP size"),
        (("gpt-oss-120b", 8, 128), "TP=128 does not divide"),
        (("llama-3-70b", 8), "unknown model 'llama-3-70b'"),
        (("glm-5", 8, 1, "zipf:-2"), "positive finite"),
    ],
)
def test_decode_problems_bad_inputs(args, match):
    with pytest.raises(ValueError, match=match):
        decode_problems(*args)
