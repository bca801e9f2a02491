"""Flatten fp4bench result files (pytest-benchmark JSON + ``fp4bench`` section) into plot rows.

One ``CaseRow`` per measured benchmark, one ``UnsupportedTile`` per availability entry that did
not initialize. A case's time is its headline median (``gate.record.headline_median``: the
geometric mean of its window medians, the time the verdict compares) and its rates are recomputed
from it and the FLOP/byte counts the run recorded, so every window counts and the verdict, the
tables and the plots show one time; % of peak uses the peak table of ``fp4bench.measure.peaks``
for the run's GPU.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from fp4bench.gate.baseline import Baseline, is_ok
from fp4bench.gate.record import BenchmarkRecord
from fp4bench.measure.peaks import FORMAT_PEAK, GpuPeaks, peak_for, shares_of_peak

DEFAULT_LABEL = "default"
# FlashInfer fused-MoE tactics are swept one GEMM at a time: "g1-<tile>+g2-default" varies the
# first GEMM's tile with the second on its default, and vice versa.
_STAGED = re.compile(r"^g1-(?P<g1>.+)\+g2-(?P<g2>.+)$")
# M from a problem id when no measured case of the problem says it (dense "m64n…", MoE "t64e…").
_M_IN_ID = re.compile(r"-(?:m|t)(\d+)(?:n|e)\d")


@dataclass(frozen=True)
class CaseRow:
    """One measured case, with the numbers every plot and table needs."""

    fullname: str
    backend: str
    tactic: str
    problem: str
    kind: str
    model: str
    role: str
    m: int | None  # tokens: dense M, MoE tokens, grouped decode batch
    fmt: str  # operand format that bounds the tensor-core peak
    median_s: float  # the headline median (gate.record.headline_median)
    tflops: float | None
    tbs: float | None
    intensity: float | None  # FLOP per byte moved
    pct_compute: float | None
    pct_bandwidth: float | None
    rel_ci95: float | None
    power_w: float | None
    power_max_w: float | None
    sm_clock_mhz: float | None
    sm_clock_min_mhz: float | None
    sm_clock_max_mhz: float | None
    throttled: bool

    @property
    def series(self) -> str:
        """What one line of a plot follows across M: backend, model and GEMM role."""
        return f"{self.backend} · {self.model} {self.role}"

    @property
    def label(self) -> str:
        """Model and GEMM role, as recorded by the run (the M is shown separately)."""
        return f"{self.model} {self.role}"

    @property
    def short(self) -> str:
        return f"{self.backend} [{self.tactic}] {self.problem}"


@dataclass(frozen=True)
class UnsupportedTile:
    backend: str
    problem: str
    tactic: str
    reason: str


def split_tactic(label: str) -> tuple[str, str]:
    """(stage, tile): ``("GEMM1", "000:64x16x128B_…")`` for a staged MoE label, else ``("", label)``."""
    m = _STAGED.match(label)
    if m:
        g1, g2 = m.group("g1"), m.group("g2")
        if g2 == DEFAULT_LABEL and g1 != DEFAULT_LABEL:
            return "GEMM1", g1
        if g1 == DEFAULT_LABEL and g2 != DEFAULT_LABEL:
            return "GEMM2", g2
    return "", label


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _m_of(extra: dict[str, Any], problem: str) -> int | None:
    for key in ("m", "num_tokens", "batch"):
        v = extra.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return m_from_problem_id(problem)


def m_from_problem_id(problem: str) -> int | None:
    hit = _M_IN_ID.search(problem)
    return int(hit.group(1)) if hit else None


def _fmt_of(extra: dict[str, Any]) -> str:
    """The narrower of the two operand formats sets the tensor-core path (W4A16 MoE runs bf16 MMAs
    on dequantized weights, so its compute peak is bf16's)."""
    act, w = str(extra.get("act_format", "")), str(extra.get("weight_format", ""))
    if act in FORMAT_PEAK and FORMAT_PEAK[act] is not None:
        return act
    return w if w in FORMAT_PEAK else "bf16"


def case_row(rec: BenchmarkRecord, peaks: GpuPeaks | None) -> CaseRow:
    x = rec.extra_info
    median = rec.median
    flops, nbytes = _num(x.get("flops")), _num(x.get("bytes"))
    tflops = flops / median / 1e12 if flops is not None and median > 0 else _num(x.get("tflops"))
    tbs = nbytes / median / 1e12 if nbytes is not None and median > 0 else _num(x.get("tbps"))
    fmt = _fmt_of(x)
    pct_c = pct_b = None
    if peaks is not None:
        pct_c, pct_b, _ = shares_of_peak(tflops, tbs, peaks, fmt)
    else:
        pct_c, pct_b = _num(x.get("pct_peak_compute")), _num(x.get("pct_peak_bandwidth"))
    problem = str(x.get("problem", rec.name))
    return CaseRow(
        fullname=rec.fullname,
        backend=str(x.get("backend", "?")),
        tactic=str(x.get("tactic", DEFAULT_LABEL)),
        problem=problem,
        kind=str(x.get("kind", "?")),
        model=str(x.get("model", "?")),
        role=str(x.get("role", "?")),
        m=_m_of(x, problem),
        fmt=fmt,
        median_s=median,
        tflops=tflops,
        tbs=tbs,
        intensity=flops / nbytes if flops is not None and nbytes else None,
        pct_compute=pct_c,
        pct_bandwidth=pct_b,
        rel_ci95=_num(x.get("rel_ci95")),
        power_w=_num(x.get("power_w")),
        power_max_w=_num(x.get("power_max_w")),
        sm_clock_mhz=_num(x.get("sm_clock_mhz")),
        sm_clock_min_mhz=_num(x.get("sm_clock_min_mhz")),
        sm_clock_max_mhz=_num(x.get("sm_clock_max_mhz")),
        throttled=bool(x.get("throttled")),
    )


@dataclass
class RunData:
    """The rows of one or more result files of the same GPU model (later files win on a clash)."""

    rows: list[CaseRow]
    unsupported: list[UnsupportedTile]
    peaks: GpuPeaks | None
    gpu: str
    sources: list[str]
    fingerprint: dict[str, Any]
    sweep: dict[str, Any]


def run_data(runs: Sequence[Baseline]) -> RunData:
    if not runs:
        raise ValueError("no result files given")
    gpu = runs[-1].fingerprint.gpu_name
    for r in runs:
        if not r.fingerprint.same_model(runs[-1].fingerprint):
            raise ValueError(f"{r.source} was measured on {r.fingerprint.gpu_name}, {runs[-1].source} on {gpu}: "
                             "one report covers one GPU model")
    peaks = peak_for(gpu)
    records: dict[str, BenchmarkRecord] = {}
    avail: dict[str, str] = {}
    for r in runs:
        records.update(r.benchmarks)
        avail.update(r.availability)
    unsupported = []
    for key, value in avail.items():
        if is_ok(value):
            continue
        backend, problem, tactic = key.split("|", 2)
        reason = value.split(":", 1)[1].strip() if ":" in value else value
        unsupported.append(UnsupportedTile(backend, problem, tactic, reason))
    return RunData(rows=[case_row(rec, peaks) for rec in records.values()], unsupported=unsupported, peaks=peaks,
                   gpu=gpu, sources=[r.source for r in runs], fingerprint=runs[-1].fingerprint.to_dict(),
                   sweep=dict(runs[-1].sweep))


def best_per_problem(rows: Iterable[CaseRow]) -> dict[tuple[str, str], CaseRow]:
    """Fastest case per (backend, problem): the tile a tuned deployment would pick."""
    out: dict[tuple[str, str], CaseRow] = {}
    for r in rows:
        key = (r.backend, r.problem)
        if key not in out or r.median_s < out[key].median_s:
            out[key] = r
    return out
