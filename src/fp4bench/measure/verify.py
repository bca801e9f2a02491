"""Correctness of one measured case, with the failure kinds named separately.

Protocol (``check_case``): run the kernel twice into the same output buffer, first poisoned
with NaN, then with a finite sentinel. An element still holding the poison of *both* runs was
never written ("unwritten tiles"); a NaN/Inf that replaced the sentinel was produced by the
kernel ("NaN/Inf"); an output that is exactly zero everywhere while the reference is not is the
FlashInfer #2577/#3398 pattern ("all-zero output"); everything else is compared with tolerances
derived from the arithmetic ("mismatch"), in two tiers:

1. elementwise: every ``|out - ref|`` within the bound of ``reference.bound`` (same decoded bytes on
   both sides, so quantization error cancels) -- rigorous, so loose for the fused MoE;
2. bulk: ``||out - ref||_2 <= relative·||ref||_2 + floor`` (``reference.bulk.BulkTolerance``, from the
   bf16 roundings, E2M1 flips and fp32 summation of the path) -- catches an output wrong by
   O(|ref|) everywhere (swapped gate/up, misread scale layout) that the elementwise bound lets by.

Nothing here is tuned to make a backend pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from fp4bench.reference.bulk import BulkTolerance

OK = "ok"
ALL_ZERO = "all-zero output"
UNWRITTEN = "unwritten tiles"
NAN_INF = "NaN/Inf"
MISMATCH = "mismatch"
WRONG_LAYOUT = "wrong output dtype/shape"
FAILURE_KINDS = (ALL_ZERO, UNWRITTEN, NAN_INF, MISMATCH, WRONG_LAYOUT)

SENTINEL = -12288.0  # -3·2^12: exact in bf16, fp16 and fp32; far outside these GEMMs' outputs


@dataclass
class CheckResult:
    kind: str
    detail: str = ""
    max_rel_err: float = math.nan  # max|out-ref| / max|ref|
    worst_bound_ratio: float = math.nan  # max |out-ref| / bound (<= 1 passes)
    sqnr_db: float = math.nan  # vs the same-bytes reference
    e2e_cosine: float = math.nan  # vs the unquantized bf16 product (quantization loss, recorded)
    e2e_sqnr_db: float = math.nan
    output: torch.Tensor | None = field(default=None, repr=False, compare=False)  # the checked output

    @property
    def ok(self) -> bool:
        return self.kind == OK

    def to_extra_info(self) -> dict:
        d = {"check": self.kind, "check_detail": self.detail}
        for k in ("max_rel_err", "worst_bound_ratio", "sqnr_db", "e2e_cosine", "e2e_sqnr_db"):
            v = getattr(self, k)
            d[k] = None if math.isnan(v) else round(float(v), 6)
        return d


def sqnr_db(signal: torch.Tensor, approx: torch.Tensor) -> float:
    s = signal.double()
    noise = (s - approx.double()).norm()
    if noise == 0:
        return math.inf
    return float(20 * torch.log10(s.norm() / noise))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(a.double().flatten(), b.double().flatten(), dim=0))


def _tile_summary(mask: torch.Tensor, tile: int = 128) -> str:
    """Where the bad elements are, in 128-row tiles: the CUTLASS/PDL bugs are tile-shaped."""
    rows = mask.reshape(mask.shape[0], -1).any(dim=1).nonzero().flatten()
    if rows.numel() == 0:
        return ""
    tiles = sorted({int(r) // tile for r in rows.tolist()})
    shown = ", ".join(str(t) for t in tiles[:8]) + (" ..." if len(tiles) > 8 else "")
    return f"{int(mask.sum())} elements in {len(tiles)} row-tile(s) of {tile} [{shown}]"


def _bulk_error(out: torch.Tensor, ref: torch.Tensor, bulk: BulkTolerance) -> str:
    """'' when the output's error norm is within the bulk tolerance, else what is over it."""
    err = float((out.double() - ref.double()).norm())
    ref_norm = float(ref.double().norm())
    limit = bulk.limit(ref_norm)
    if err <= limit:
        return ""
    if ref_norm > 0:
        return (f"relative error {err / ref_norm:.3g} over the tolerance {limit / ref_norm:.3g} "
                f"({bulk.why}; ||out-ref||/||ref||)")
    return f"error norm {err:.3g} over the tolerance {limit:.3g} while ref is all zero"


def classify(first: torch.Tensor, second: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor | float,
             bulk: BulkTolerance) -> CheckResult:
    """Classify two outputs of the same call (NaN-poisoned, then ``SENTINEL``-poisoned); a mismatch
    is an element beyond ``bound`` or an error norm beyond ``bulk``."""
    out = second.float()
    unwritten = torch.isnan(first) & (out == SENTINEL)
    if unwritten.any():
        return CheckResult(UNWRITTEN, _tile_summary(unwritten))
    bad = ~torch.isfinite(out)
    if bad.any():
        return CheckResult(NAN_INF, _tile_summary(bad))
    ref_max = float(ref.abs().max()) if ref.numel() else 0.0
    if ref_max > 0 and not bool(out.ne(0).any()):
        return CheckResult(ALL_ZERO, f"all {out.numel()} outputs are 0 while max|ref| = {ref_max:.4g}")
    err = (out - ref).abs()
    bound_t = torch.as_tensor(bound, dtype=torch.float32, device=err.device)
    ratio = float((err / bound_t).max()) if err.numel() else 0.0
    res = CheckResult(OK, max_rel_err=float(err.max()) / ref_max if ref_max > 0 else float(err.max()),
                      worst_bound_ratio=ratio, sqnr_db=sqnr_db(ref, out))
    if ratio > 1.0:
        over = err > bound_t
        res.kind = MISMATCH
        res.detail = (f"{int(over.sum())}/{out.numel()} elements beyond the bound (worst {ratio:.3g}x bound); "
                      f"{_tile_summary(over)}")
        return res
    bulk_error = _bulk_error(out, ref, bulk)
    if bulk_error:
        res.kind, res.detail = MISMATCH, f"bulk tier: {bulk_error}"
    return res


def layout_error(result: torch.Tensor, out: torch.Tensor, ref: torch.Tensor) -> str:
    """'' when ``result`` has the output buffer's dtype and the reference's shape, else what
    differs. Values alone cannot show it: a float64 result compares fine after ``.float()``, and
    an ``[N]`` result broadcasts against an ``[1, N]`` reference at M = 1."""
    if not isinstance(result, torch.Tensor):
        return f"the backend returned {type(result).__name__}, not a tensor"
    wrong = []
    if result.dtype != out.dtype:
        wrong.append(f"dtype {result.dtype} (expected {out.dtype})")
    if tuple(result.shape) != tuple(ref.shape):
        wrong.append(f"shape {tuple(result.shape)} (expected {tuple(ref.shape)})")
    return ", ".join(wrong)


def check_case(run: Callable[[], torch.Tensor], out: torch.Tensor, ref: torch.Tensor,
               bound: torch.Tensor | float, bulk: BulkTolerance,
               unquantized: torch.Tensor | None = None) -> CheckResult:
    """Poison, run, poison differently, run, classify; add the end-to-end numbers."""
    out.fill_(float("nan"))
    result = run()
    wrong = layout_error(result, out, ref)
    if wrong:
        return CheckResult(WRONG_LAYOUT, f"output has {wrong}")
    first = result.float().clone()
    out.fill_(SENTINEL)
    second = run()
    if out.is_cuda:
        torch.cuda.synchronize(out.device)
    res = classify(first, second.float(), ref.float(), bound, bulk)
    res.output = second
    if unquantized is not None and res.kind in (OK, MISMATCH):
        res.e2e_cosine = cosine(unquantized, second.float())
        res.e2e_sqnr_db = sqnr_db(unquantized, second.float())
    return res
