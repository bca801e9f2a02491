"""Backend shape rules: skip with a reason, or pad as the serving stack does; never drop a shape."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fp4bench.backends.alignment import (CUBLASLT_FP4, CUTLASS_FP4_SM100, FLASHINFER_MXFP4_PAD, Aligned,
                                         AlignmentPolicy, Skipped, align_problem)
from fp4bench.workload.problems import GemmProblem
from fp4bench.workload.decode import decode_problems


def _by_role(problems):
    return {p.origin.role: p for p in problems}


def _align_all(problems, policy) -> tuple[list[Aligned], list[Skipped]]:
    out = [align_problem(p, policy) for p in problems]
    return [a for a in out if isinstance(a, Aligned)], [s for s in out if isinstance(s, Skipped)]



def test_gpt_oss_padded_to_3072_as_flashinfer_mxfp4_does():
    ps = decode_problems("gpt-oss-120b", 8, tp=1)
    kept, skipped = _align_all(ps, FLASHINFER_MXFP4_PAD)
    assert not skipped and len(kept) == len(ps)
    r = {a.original.origin.role: a for a in kept}
    assert (r["gate_up"].problem.n, r["gate_up"].problem.k) == (6144, 3072)
    assert (r["down"].problem.n, r["down"].problem.k) == (3072, 3072)
    assert (r["moe"].problem.hidden, r["moe"].problem.inter) == (3072, 3072)
    for a in kept:
        assert a.padded
        assert "2880→3072" in a.note and "vLLM/sglang FlashInfer MXFP4" in a.note
        assert a.problem.id != a.original.id
    # routing is untouched by padding
    assert r["gate_up"].problem.tokens_per_expert == r["gate_up"].original.tokens_per_expert


def test_gpt_oss_tp8_pads_the_per_rank_intermediate():
    # sglang/vLLM round I/TP (360) up to 256-multiples, then fuse gate and up: N = 2·512
    kept, _ = _align_all(decode_problems("gpt-oss-120b", 8, tp=8), FLASHINFER_MXFP4_PAD)
    r = {a.original.origin.role: a for a in kept}
    assert (r["gate_up"].problem.n, r["gate_up"].problem.k) == (1024, 3072)
    assert (r["down"].problem.n, r["down"].problem.k) == (3072, 512)
    assert "I 360→512" in r["gate_up"].note


def test_cublaslt_skips_misaligned_k_with_a_reason():
    ps = decode_problems("gpt-oss-120b", 8, tp=8)  # down K = 360
    kept, skipped = _align_all(ps, CUBLASLT_FP4)
    assert len(kept) + len(skipped) == len(ps)  # nothing dropped
    assert {s.problem.origin.role for s in skipped} == {"down", "moe"}
    for s in skipped:
        assert "K=360 is not a multiple of 32" in s.reason and "cuBLASLt" in s.reason
        assert s.problem.id in s.reason
    assert all(not a.padded and a.note == "" for a in kept)


def test_n_multiple_differs_between_backends():
    # gate_up N = 720 at TP8: fine for cuBLASLt (N % 16), not for CUTLASS SM100 (N % 32)
    gate_up = _by_role(decode_problems("gpt-oss-120b", 4, tp=8))["gate_up"]
    assert isinstance(align_problem(gate_up, CUBLASLT_FP4), Aligned)
    s = align_problem(gate_up, CUTLASS_FP4_SM100)
    assert isinstance(s, Skipped) and "N=720 is not a multiple of 32" in s.reason


def test_awkward_k96_is_aligned_for_cublaslt():
    down = _by_role(decode_problems("qwen3-235b-a22b", 8, tp=16))["down"]
    assert down.k == 96
    assert isinstance(align_problem(down, CUBLASLT_FP4), Aligned)


def test_qwen3_30b_tp16_down_is_skipped_by_cublaslt():
    down = _by_role(decode_problems("qwen3-30b-a3b", 8, tp=16))["down"]
    s = align_problem(down, CUBLASLT_FP4)
    assert isinstance(s, Skipped) and "K=48" in s.reason


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 5000), k=st.integers(1, 5000),
    km=st.sampled_from([16, 32, 64, 256]), nm=st.sampled_from([8, 16, 32, 256]),
    role=st.sampled_from(["down", "gate_up", "shared_gate_up", ""]),
)
def test_padding_is_minimal_and_aligned(n, k, km, nm, role):
    from fp4bench.workload.problems import Origin

    pol = AlignmentPolicy("test", k_multiple=km, n_multiple=nm, action="pad", stack="a test stack")
    p = GemmProblem(m=3, n=n, k=k, origin=Origin(role=role))
    out = align_problem(p, pol)
    assert isinstance(out, Aligned)
    q = out.problem
    assert q.k % km == 0 and q.n % nm == 0 and q.m == 3
    assert k <= q.k < k + km
    if n % nm == 0 and k % km == 0:
        assert (q.n, q.k) == (n, k)  # an aligned problem is never touched
    elif role.endswith("gate_up") and n % 2 == 0:
        assert q.n == 2 * (-(-(n // 2) // nm) * nm)  # the intermediate is what gets rounded
    else:
        assert n <= q.n < n + nm
    assert out.padded == ((q.n, q.k) != (n, k))
    assert (out.note == "") == (not out.padded)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(k_multiple=0, n_multiple=16), "k_multiple"),
        (dict(k_multiple=32, n_multiple=-16), "n_multiple"),
        (dict(k_multiple=32, n_multiple=16, action="drop"), "action"),
        (dict(k_multiple=32, n_multiple=16, action="pad"), "serving stack"),
    ],
)
def test_alignment_policy_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        AlignmentPolicy("x", **kwargs)
