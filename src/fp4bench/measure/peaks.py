"""Per-GPU peak dense tensor throughput and memory bandwidth, each number with its source.

Why: a time means little without the ceiling it is measured against. Decode expert GEMMs are
weight-bandwidth-bound (M_e ~ 1-16, intensity ~3.56·M_e FLOP/B against ridge points near
1,000 FLOP/B), so ``% of peak bandwidth`` is the primary efficiency figure and ``% of peak
compute`` the secondary one. Spec-sheet peaks are optimistic; ``with_measured`` replaces them
with ceilings measured on the machine (a bf16 GEMM, a device copy).

Numbers are vendor datasheet values; each carries its source and trust tag. L2 sizes are not in
the datasheets: they are left None here; read ``torch.cuda.get_device_properties(d).L2_cache_size``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

#: the peak fields a measurement may override (TFLOP/s, TB/s, MB)
PEAK_FIELDS: tuple[str, ...] = ("fp4_tflops", "fp8_tflops", "bf16_tflops", "bandwidth_tbs", "l2_mb")
#: operand format -> the peak that bounds it (MXFP4 and NVFP4 share the FP4 tensor-core rate)
#: trust tags ([source], [secondary], [unverified], [estimate]) plus [measured]; every source string carries one
SOURCE_TAGS: tuple[str, ...] = ("[source]", "[secondary]", "[unverified]", "[estimate]", "[measured]")
#: fp16 shares the bf16 tensor rate; fp32 (CUDA-core / TF32) has no entry in the table
FORMAT_PEAK: dict[str, str | None] = {
    "nvfp4": "fp4_tflops",
    "mxfp4": "fp4_tflops",
    "fp4": "fp4_tflops",
    "fp8": "fp8_tflops",
    "bf16": "bf16_tflops",
    "fp16": "bf16_tflops",
    "fp32": None,
}


def _tokens(name: str) -> frozenset[str]:
    return frozenset(t for t in re.split(r"[^A-Z0-9]+", name.upper()) if t)


@dataclass(frozen=True)
class GpuPeaks:
    """Dense (non-sparse) peaks of one GPU model; None where the GPU lacks the format or it is unknown.

    ``match`` are tokens that must all appear in the name torch reports, ``exclude`` tokens
    that must not (so "B200" never matches "GB200", and an H100 PCIe never gets SXM peaks).
    """

    name: str
    arch: str
    fp4_tflops: float | None
    fp8_tflops: float | None
    bf16_tflops: float | None
    bandwidth_tbs: float
    memory_gb: float
    sources: Mapping[str, str] = field(hash=False)
    l2_mb: float | None = None
    notes: str = ""
    match: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for f in (*PEAK_FIELDS, "memory_gb"):
            v = getattr(self, f)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{self.name}: {f} must be a positive number or None, got {v!r}")
            src = str(self.sources.get(f, ""))
            if not src.strip():
                raise ValueError(f"{self.name}: {f}={v} has no source")
            if not any(t in src for t in SOURCE_TAGS):
                raise ValueError(f"{self.name}: source of {f} lacks a trust tag {SOURCE_TAGS}: {src!r}")
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def matches(self, gpu_name: str) -> bool:
        toks = _tokens(gpu_name)
        return bool(self.match) and set(self.match) <= toks and not (set(self.exclude) & toks)

    @property
    def memory_type(self) -> str:
        """HBM3, HBM3e or GDDR7, as the cited source of ``memory_gb`` names it."""
        m = re.search(r"\b(HBM\d[eE]?|GDDR\d)\b", str(self.sources.get("memory_gb", "")))
        return m.group(1).replace("E", "e") if m else "unknown memory type"

    @property
    def short_name(self) -> str:
        """The name to type: ``RTX PRO 6000 Blackwell`` -> ``rtx-pro-6000``, ``H200 SXM`` -> ``h200``."""
        return "-".join(t.lower() for t in self.name.split() if t.upper() not in ("BLACKWELL", "SXM"))

    def peak_tflops(self, fmt: str) -> float | None:
        """Dense peak for operands in ``fmt`` (None: the GPU has no such tensor-core path)."""
        if fmt not in FORMAT_PEAK:
            raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMAT_PEAK)}")
        f = FORMAT_PEAK[fmt]
        return None if f is None else getattr(self, f)

    def ridge_point(self, fmt: str) -> float | None:
        """FLOP/byte where ``fmt`` GEMMs turn from bandwidth- to compute-bound."""
        peak = self.peak_tflops(fmt)
        return None if peak is None else peak * 1e12 / (self.bandwidth_tbs * 1e12)

    def with_measured(self, source: str = "measured on this machine", **values: float) -> GpuPeaks:
        """A copy whose given peaks are replaced by measured ceilings (source recorded per field)."""
        unknown = sorted(set(values) - set(PEAK_FIELDS))
        if unknown:
            raise ValueError(f"cannot override {unknown}; measurable peaks are {PEAK_FIELDS}")
        if not values:
            return self
        sources = dict(self.sources)
        for f in values:
            sources[f] = f"[measured] {source}"
        return replace(self, sources=sources, **values)

    def with_measured_file(self, path: str | Path) -> GpuPeaks:
        """Apply a JSON file ``{"bf16_tflops": 780.0, "bandwidth_tbs": 4.3, "source": "..."}``."""
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise ValueError(f"cannot read measured peaks from {p}: {e}") from e
        if not isinstance(data, dict):
            raise ValueError(f"{p}: expected a JSON object of peak values, got {type(data).__name__}")
        source = str(data.pop("source", f"measured, from {p}"))
        return self.with_measured(source=source, **data)


_GD = "[secondary]"
_H100 = (
    "glennklockwood.com/garden/processors/h100: BF16 989.4 dense / 1978.9 sparse, FP8 3957.8 is the "
    "sparse figure; NVIDIA datasheet values (sparse 3,958 / 1,979) [secondary]"
)
_B200 = (
    "glennklockwood.com/garden/processors/B200 (HGX B200 table); Vultr HGX B200 page; verda.com "
    "GB300 post [secondary]"
)
_GB200 = "glennklockwood (GB200 variant) [secondary]"
_B300 = (
    "verda.com (B300 14 PF, GB300 15 PF); glennklockwood (HGX B300 FP4 13.1 PF dense, FP8 4.5). "
    "Sources disagree; [estimate]"
)
_GB300 = (
    'verda.com; NVIDIA Blackwell Ultra blog as quoted: "NVFP4 dense/sparse 15 / 20 PF" [secondary]; '
    "GB300 NVL72 1.1 EF dense FP4 / 72 ≈ 15 PF"
)
_PRO6000 = "NVIDIA GTC 2025 via secondary pages: 4,000 AI TOPS, 125 TF FP32, 1,792 GB/s [secondary]"
_5090 = "Spheron/Linux-Format spec pages: FP16 tensor 838 TF sparse, FP8 1,677 sparse, FP4 3,352 sparse [secondary]"

PEAKS: tuple[GpuPeaks, ...] = (
    GpuPeaks(
        name="H100 SXM",
        arch="sm90",
        fp4_tflops=None,
        fp8_tflops=1979.0,
        bf16_tflops=989.0,
        bandwidth_tbs=3.35,
        memory_gb=80.0,
        sources={
            "fp8_tflops": _H100,
            "bf16_tflops": _H100,
            "bandwidth_tbs": f"NVIDIA H100 SXM datasheet 3.35 TB/s {_GD}",
            "memory_gb": f"80 GB HBM3 {_GD}",
        },
        notes="no FP4 tensor cores (SM90)",
        match=("H100",),
        exclude=("PCIE", "NVL"),
    ),
    GpuPeaks(
        name="H200 SXM",
        arch="sm90",
        fp4_tflops=None,
        fp8_tflops=1979.0,
        bf16_tflops=989.0,
        bandwidth_tbs=4.8,
        memory_gb=141.0,
        sources={
            "fp8_tflops": f"Same compute as H100 {_GD}",
            "bf16_tflops": f"Same compute as H100 {_GD}",
            "bandwidth_tbs": f"141 GB HBM3e, 4.8 TB/s {_GD}",
            "memory_gb": f"141 GB HBM3e {_GD}",
        },
        notes=(
            "no FP4 tensor cores (SM90). Measured on an H200: bf16 8192^3 torch matmul ≈ 770-800 TF/s; "
            "device-to-device copy ≈ 4.3 TB/s"
        ),
        match=("H200",),
        exclude=("NVL", "PCIE"),
    ),
    GpuPeaks(
        name="B200",
        arch="sm100",
        fp4_tflops=9000.0,
        fp8_tflops=4500.0,
        bf16_tflops=2250.0,
        bandwidth_tbs=8.0,
        memory_gb=180.0,
        sources={
            "fp4_tflops": _B200,
            "fp8_tflops": _B200,
            "bf16_tflops": _B200,
            "bandwidth_tbs": f"{_B200}; 8 TB/s (later docs: 7.7)",
            "memory_gb": f"{_B200}; 180 GB usable (192 GB physical) HBM3e",
        },
        notes="HGX B200, 1000 W",
        match=("B200",),
    ),
    GpuPeaks(
        name="GB200",
        arch="sm100",
        fp4_tflops=10000.0,
        fp8_tflops=5000.0,
        bf16_tflops=2500.0,
        bandwidth_tbs=8.0,
        memory_gb=186.0,
        sources={**{f: _GB200 for f in ("fp4_tflops", "fp8_tflops", "bf16_tflops", "bandwidth_tbs")},
                 "memory_gb": f"HBM3e (NVIDIA GB200 NVL72 product page); {_GB200}"},
        notes="1200 W",
        match=("GB200",),
    ),
    GpuPeaks(
        name="B300",
        arch="sm103",
        fp4_tflops=14000.0,
        fp8_tflops=4500.0,
        bf16_tflops=2250.0,
        bandwidth_tbs=8.0,
        memory_gb=288.0,
        sources={
            "fp4_tflops": f"{_B300}; 14 PF (verda.com) taken, glennklockwood gives 13.1",
            "fp8_tflops": _B300,
            "bf16_tflops": f"NVIDIA datasheet: 2.25 PF {_GD}",
            "bandwidth_tbs": f"7.7-8 TB/s, upper value taken; {_B300}",
            "memory_gb": f"270-288 GB HBM3e, upper value taken; {_B300}",
        },
        notes="HGX B300; sources disagree on FP4 (13.1-14 PF)",
        match=("B300",),
    ),
    GpuPeaks(
        name="GB300",
        arch="sm103",
        fp4_tflops=15000.0,
        fp8_tflops=5000.0,
        bf16_tflops=2500.0,
        bandwidth_tbs=8.0,
        memory_gb=288.0,
        sources={
            "fp4_tflops": _GB300,
            "fp8_tflops": _GB300,
            "bf16_tflops": _GB300,
            "bandwidth_tbs": _GB300,
            "memory_gb": f"279-288 GB HBM3e, upper value taken; {_GB300}",
        },
        match=("GB300",),
    ),
    GpuPeaks(
        name="RTX PRO 6000 Blackwell",
        arch="sm120",
        fp4_tflops=2000.0,
        fp8_tflops=1000.0,
        bf16_tflops=500.0,
        bandwidth_tbs=1.792,
        memory_gb=96.0,
        sources={
            "fp4_tflops": f'{_PRO6000}; dense = 4,000 sparse AI TOPS ÷ 2 [estimate]',
            "fp8_tflops": f"≈1 PF [estimate] ({_PRO6000})",
            "bf16_tflops": f"≈0.5 PF [estimate] ({_PRO6000})",
            "bandwidth_tbs": f"1,792 GB/s, 96 GB GDDR7 512-bit 28 Gbps; {_PRO6000}",
            "memory_gb": f"96 GB GDDR7; {_PRO6000}",
        },
        notes=(
            "GB202, 188 SMs. Professional parts are believed to run full-rate FP32 accumulation "
            "[unverified]. Max-Q (300 W) is excluded: its clocks differ."
        ),
        match=("RTX", "PRO", "6000", "BLACKWELL"),
        exclude=("MAX",),
    ),
    GpuPeaks(
        name="RTX 5090",
        arch="sm120",
        fp4_tflops=1676.0,
        fp8_tflops=838.5,
        bf16_tflops=419.0,
        bandwidth_tbs=1.792,
        memory_gb=32.0,
        sources={
            "fp4_tflops": f"{_5090}; dense ≈1.68 PF = 3,352 ÷ 2",
            "fp8_tflops": f"{_5090}; dense ≈0.84 PF = 1,677 ÷ 2",
            "bf16_tflops": (
                f"{_5090}; ≈0.42 PF = 838 ÷ 2 with FP16 accumulation; with FP32 accumulation likely "
                "half (≈0.21 PF) [estimate]"
            ),
            "bandwidth_tbs": f"1,792 GB/s; {_5090}",
            "memory_gb": f"32 GB GDDR7; {_5090}",
        },
        notes=(
            "GB202, 170 SMs. GeForce has historically run FP32-accumulate at half rate (RTX 4090 "
            "precedent): torch bf16 GEMMs accumulate in FP32, so measure and override bf16_tflops."
        ),
        match=("RTX", "5090"),
        exclude=("LAPTOP", "D"),
    ),
)


def known_gpus() -> tuple[str, ...]:
    """The short names ``gpu_by_name`` accepts, in table order."""
    return tuple(p.short_name for p in PEAKS)


def gpu_by_name(text: str) -> GpuPeaks:
    """A table entry by short name (``rtx-pro-6000``, ``b200``), table name, or the name torch
    reports; ``ValueError`` naming the known ones otherwise."""
    key = text.strip().lower().replace(" ", "-").replace("_", "-")
    hits = [p for p in PEAKS if key in (p.short_name, p.name.lower().replace(" ", "-"))]
    found = hits[0] if hits else peak_for(text)
    if found is None:
        raise ValueError(f"unknown GPU {text!r}; known: {', '.join(known_gpus())}")
    return found


def peak_for(gpu_name: str, measured: str | Path | Mapping[str, float] | None = None) -> GpuPeaks | None:
    """Peaks for the name ``torch.cuda.get_device_name()`` reports; None for an unknown GPU.

    ``measured``: a mapping of peak fields or a JSON file path whose values override the table.
    """
    if not isinstance(gpu_name, str):
        raise ValueError(f"gpu_name must be a string, got {gpu_name!r}")
    hits = [p for p in PEAKS if p.matches(gpu_name)]
    if len(hits) > 1:  # a table bug, not a user error: the match tokens overlap
        raise RuntimeError(f"GPU name {gpu_name!r} matches several peak entries: {[p.name for p in hits]}")
    if not hits:
        return None
    peaks = hits[0]
    if measured is None:
        return peaks
    if isinstance(measured, Mapping):
        values = dict(measured)
        source = str(values.pop("source", "measured on this machine"))
        return peaks.with_measured(source=source, **values)
    return peaks.with_measured_file(measured)


class Roofline(NamedTuple):
    """Achieved rates and their share of the peaks (None where the peak is unknown)."""

    tflops: float
    tbs: float
    pct_compute: float | None
    pct_bandwidth: float | None


class PeakShares(NamedTuple):
    """Achieved rates as % of the compute peak, of peak bandwidth, and of the roof at their
    intensity (min(compute peak, intensity x bandwidth)); None where a rate or the peak is unknown."""

    pct_compute: float | None
    pct_bandwidth: float | None
    pct_roof: float | None


def shares_of_peak(tflops: float | None, tbs: float | None, peaks: GpuPeaks | None, fmt: str) -> PeakShares:
    """The one place "% of peak" and "% of roof" are computed (the run, the report data and the
    plots all ask here)."""
    if peaks is None:
        return PeakShares(None, None, None)
    peak = peaks.peak_tflops(fmt)
    pct_c = 100.0 * tflops / peak if tflops is not None and peak else None
    pct_b = 100.0 * tbs / peaks.bandwidth_tbs if tbs is not None else None
    pct_roof = None
    if tflops is not None and tbs:
        attainable = (tflops / tbs) * peaks.bandwidth_tbs
        if peak is not None:
            attainable = min(attainable, peak)
        pct_roof = 100.0 * tflops / attainable if attainable > 0 else None
    return PeakShares(pct_c, pct_b, pct_roof)


def percent_of_peak(
    flops: float, bytes_moved: float, seconds: float, peaks: GpuPeaks | None, fmt: str
) -> Roofline:
    """(TFLOP/s, TB/s, % of the ``fmt`` compute peak, % of peak bandwidth) for one timed kernel."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"seconds must be a positive finite number, got {seconds!r}")
    if flops < 0 or bytes_moved < 0:
        raise ValueError(f"flops and bytes must be non-negative, got {flops!r}, {bytes_moved!r}")
    if fmt not in FORMAT_PEAK:
        raise ValueError(f"unknown format {fmt!r}; expected one of {sorted(FORMAT_PEAK)}")
    tflops = flops / seconds / 1e12
    tbs = bytes_moved / seconds / 1e12
    if peaks is None:
        return Roofline(tflops, tbs, None, None)
    shares = shares_of_peak(tflops, tbs, peaks, fmt)
    return Roofline(tflops, tbs, shares.pct_compute, shares.pct_bandwidth)
