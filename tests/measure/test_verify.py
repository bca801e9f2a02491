"""The correctness layer on synthetic tensors: each failure kind, the derived error bound at its
edge (one bf16 ulp inside passes, one ulp outside fails), and the poison/run/poison protocol."""

from __future__ import annotations

import math

import pytest
import torch

from fp4bench.measure.verify import (ALL_ZERO, FAILURE_KINDS, MISMATCH, NAN_INF, OK, SENTINEL, UNWRITTEN,
                                     WRONG_LAYOUT, CheckResult, check_case, classify)
from fp4bench.reference.bound import BF16_UNIT_ROUNDOFF, gemm_error_bound
from fp4bench.reference.bulk import gemm_bulk

M, N, K = 200, 48, 256


def _bf16_exact(shape, gen, scale=1.0) -> torch.Tensor:
    """fp32 values exactly representable in bf16: their products are exact in fp32 (8 + 8 bits),
    so the only rounding in a GEMM of them is the accumulation."""
    return (torch.randn(shape, generator=gen) * scale).to(torch.bfloat16).float()


@pytest.fixture
def gemm():
    gen = torch.Generator().manual_seed(7)
    a, w = _bf16_exact((M, K), gen), _bf16_exact((N, K), gen, K ** -0.5)
    ref = a @ w.t()
    return a, w, ref, gemm_error_bound(a, w, ref, K)


def _chunked(a: torch.Tensor, w: torch.Tensor, chunk: int) -> torch.Tensor:
    """A different, legitimate fp32 summation order: split-K partial products summed last to first."""
    parts = [a[:, i:i + chunk] @ w[:, i:i + chunk].t() for i in range(0, a.shape[1], chunk)]
    out = torch.zeros_like(parts[0])
    for p in reversed(parts):
        out += p
    return out


def _bulk(ref: torch.Tensor, bound: torch.Tensor):
    """The bulk tier of a one-rounding GEMM with ``gemm_error_bound``'s absolute terms (as ``reference.bound``)."""
    return gemm_bulk(1, bound - BF16_UNIT_ROUNDOFF * ref.abs())


# --- classify: one case per kind -----------------------------------------------------------------


def test_correct_output_in_another_summation_order_passes(gemm):
    a, w, ref, bound = gemm
    for other in (a.flip(1) @ w.flip(1).t(), _chunked(a, w, 16), _chunked(a, w, 96)):
        assert not torch.equal(other, ref)  # the order really changed the fp32 result
        out = other.to(torch.bfloat16).float()  # what a bf16-output kernel stores
        res = classify(out, out, ref, bound, _bulk(ref, bound))
        assert res.kind == OK and res.ok, res.detail
        assert 0 < res.worst_bound_ratio <= 1.0
        assert res.max_rel_err < 2 * BF16_UNIT_ROUNDOFF
        assert res.sqnr_db > 40  # bf16 output: ~ 6 dB x 8 bits


def test_bound_is_tight_where_it_matters(gemm):
    """The bound is the bf16 rounding of the result plus a much smaller accumulation term, not a
    loose tolerance: for these well-conditioned rows it is within 2x of half a bf16 ulp."""
    _, _, ref, bound = gemm
    rel = (bound / ref.abs()).flatten()
    assert float(rel.median()) < 2 * BF16_UNIT_ROUNDOFF
    assert bool((bound >= BF16_UNIT_ROUNDOFF * ref.abs()).all())


def _bf16_step_above(x: float) -> tuple[float, float]:
    """(largest bf16 <= x, next bf16 above it) for x > 0, computed exactly in float64."""
    ulp = 2.0 ** (math.floor(math.log2(x)) - 7)  # bf16: 8 significant bits
    lo = math.floor(x / ulp) * ulp
    return lo, lo + ulp


def test_one_bf16_ulp_beyond_the_bound_fails(gemm):
    a, w, ref, bound = gemm
    base = _chunked(a, w, 16).to(torch.bfloat16).float()
    # take positive elements of ordinary magnitude; perturb each upward to the edge of its bound
    big = (ref > 0.05).nonzero().tolist()
    idx = [big[0], big[len(big) // 2], big[-1]]  # spread over both row tiles
    assert {i // 128 for i, _ in idx} == {0, 1}
    for i, j in idx:
        r, b = float(ref[i, j]), float(bound[i, j])
        inside, outside = _bf16_step_above(r + b)
        # both are bf16 numbers, one grid step apart, on either side of ref + bound
        assert torch.tensor(inside).to(torch.bfloat16).item() == inside
        assert torch.tensor(outside).to(torch.bfloat16).item() == outside
        assert inside - r <= b < outside - r
        good = base.clone()
        good[i, j] = inside
        assert classify(good, good, ref, bound, _bulk(ref, bound)).kind == OK
        bad = base.clone()
        bad[i, j] = outside
        res = classify(bad, bad, ref, bound, _bulk(ref, bound))
        assert res.kind == MISMATCH
        assert res.detail.startswith(f"1/{M * N} elements beyond the bound")
        assert f"row-tile(s) of 128 [{i // 128}]" in res.detail
        assert res.worst_bound_ratio > 1.0


def test_mismatch_names_count_and_tiles(gemm):
    _, _, ref, bound = gemm
    out = ref.to(torch.bfloat16).float()
    out[130:140] += 0.05 * ref.abs().max()  # 5 % of the output scale: 12x the bf16 rounding anywhere
    res = classify(out, out, ref, bound, _bulk(ref, bound))
    assert res.kind == MISMATCH
    assert res.detail.startswith(f"{10 * N}/{M * N} elements beyond the bound")
    assert "1 row-tile(s) of 128 [1]" in res.detail


def test_all_zero_output(gemm):
    _, _, ref, bound = gemm
    zeros = torch.zeros_like(ref)
    res = classify(zeros, zeros, ref, bound, _bulk(ref, bound))
    assert res.kind == ALL_ZERO
    assert res.detail.startswith(f"all {M * N} outputs are 0 while max|ref| = ")
    # a zero output is right when the product is zero
    assert classify(zeros, zeros, torch.zeros_like(ref), 1e-30, gemm_bulk(1)).kind == OK


def test_nan_made_by_the_kernel(gemm):
    _, _, ref, bound = gemm
    out = ref.to(torch.bfloat16).float()
    out[5, 7] = float("nan")  # NaN in both runs: the kernel computed it
    res = classify(out, out, ref, bound, _bulk(ref, bound))
    assert res.kind == NAN_INF
    assert res.detail == "1 elements in 1 row-tile(s) of 128 [0]"
    out[5, 7] = float("-inf")
    assert classify(out, out, ref, bound, _bulk(ref, bound)).kind == NAN_INF


def test_unwritten_tiles_detected_through_bf16(gemm):
    _, _, ref, bound = gemm
    first = ref.to(torch.bfloat16)
    second = first.clone()
    first[128:] = float("nan")  # run 1 poisoned with NaN, last tile never written
    second[128:] = SENTINEL  # run 2 poisoned with the sentinel, still not written
    assert second.dtype == torch.bfloat16 and float(second[150, 0]) == SENTINEL  # exact in bf16
    res = classify(first.float(), second.float(), ref, bound, _bulk(ref, bound))
    assert res.kind == UNWRITTEN
    assert res.detail == f"{(M - 128) * N} elements in 1 row-tile(s) of 128 [1]"


def test_sentinel_is_exact_in_every_output_dtype():
    for dt in (torch.bfloat16, torch.float16, torch.float32):
        assert float(torch.tensor(SENTINEL, dtype=dt)) == SENTINEL


def test_failure_kinds_and_extra_info():
    assert set(FAILURE_KINDS) == {ALL_ZERO, UNWRITTEN, NAN_INF, MISMATCH, WRONG_LAYOUT} and OK not in FAILURE_KINDS
    d = CheckResult(NAN_INF, "x").to_extra_info()
    assert d == {"check": NAN_INF, "check_detail": "x", "max_rel_err": None, "worst_bound_ratio": None,
                 "sqnr_db": None, "e2e_cosine": None, "e2e_sqnr_db": None}


# --- check_case: the protocol, end to end --------------------------------------------------------


class _Kernel:
    """A fake kernel writing ``out`` (bf16) from ``value``; records what it saw on entry."""

    def __init__(self, out: torch.Tensor, value: torch.Tensor, rows: int | None = None):
        self.out, self.value, self.rows, self.seen = out, value, rows, []

    def __call__(self) -> torch.Tensor:
        self.seen.append(self.out.float().clone())
        r = self.out.shape[0] if self.rows is None else self.rows
        self.out[:r] = self.value[:r].to(self.out.dtype)
        return self.out


def test_check_case_poisons_then_classifies(gemm):
    a, w, ref, bound = gemm
    out = torch.empty(M, N, dtype=torch.bfloat16)
    k = _Kernel(out, _chunked(a, w, 32))
    unq = ref + 0.01 * torch.randn(ref.shape, generator=torch.Generator().manual_seed(3))
    res = check_case(k, out, ref, bound, _bulk(ref, bound), unquantized=unq)
    assert res.kind == OK
    assert len(k.seen) == 2
    assert bool(torch.isnan(k.seen[0]).all()) and bool((k.seen[1] == SENTINEL).all())
    assert 0.99 < res.e2e_cosine <= 1.0 and math.isfinite(res.e2e_sqnr_db)


def test_check_case_failure_kinds(gemm):
    a, w, ref, bound = gemm
    good = _chunked(a, w, 32)

    def run_with(value, rows=None):
        out = torch.empty(M, N, dtype=torch.bfloat16)
        return check_case(_Kernel(out, value, rows), out, ref, bound, _bulk(ref, bound), unquantized=ref)

    assert run_with(good, rows=128).kind == UNWRITTEN
    assert run_with(torch.zeros_like(good)).kind == ALL_ZERO
    nan = good.clone()
    nan[0, 0] = float("nan")
    r = run_with(nan)
    assert r.kind == NAN_INF and math.isnan(r.e2e_cosine)  # no end-to-end numbers on garbage
    assert run_with(good * 1.02).kind == MISMATCH


def test_check_case_accepts_an_api_that_returns_its_own_tensor(gemm):
    a, w, ref, bound = gemm
    out = torch.empty(M, N, dtype=torch.bfloat16)
    res = check_case(lambda: (a @ w.t()).to(torch.bfloat16), out, ref, bound, _bulk(ref, bound))
    assert res.kind == OK


# --- the bulk tier -------------------------------------------------------------------------------


@pytest.mark.parametrize("edge", ["zero row", "tiny", "subnormal", "all zero"])
def test_the_bulk_tier_does_not_fail_a_correct_dense_output_at_the_edges(gemm, edge):
    """Another summation order stored in bf16, on outputs with a zero row, all values tiny (2^-100),
    mostly subnormal (inputs scaled by 2^-125: bf16 keeps a few bits there) or all zero: both tiers pass."""
    a, w, _, _ = gemm
    a = a.clone()
    if edge == "zero row":
        a[3] = 0
    elif edge in ("tiny", "subnormal"):
        a = a * 2.0 ** (-100 if edge == "tiny" else -125)
    else:
        a.zero_()
    ref = a @ w.t()
    bound = gemm_error_bound(a, w, ref, K)
    out = _chunked(a, w, 16).to(torch.bfloat16).float()
    res = classify(out, out, ref, bound, _bulk(ref, bound))
    assert res.kind == OK, res.detail


def test_the_bulk_tier_names_an_output_off_in_norm_within_the_elementwise_bound(gemm):
    _, _, ref, bound = gemm
    res = classify(ref * 1.5, ref * 1.5, ref, 10 * ref.abs().max(), gemm_bulk(1))
    assert res.kind == MISMATCH and res.worst_bound_ratio < 1
    assert res.detail == ("bulk tier: relative error 0.5 over the tolerance 0.00391 "
                          "(1 bf16 rounding of the output; ||out-ref||/||ref||)")
    zero = torch.zeros_like(ref)
    res = classify(zero + 1e-3, zero + 1e-3, zero, 1.0, gemm_bulk(1))
    assert res.kind == MISMATCH and res.detail == "bulk tier: error norm 0.098 over the tolerance 0 while ref is all zero"
