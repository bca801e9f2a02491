"""Synthetic pytest-benchmark ``--benchmark-json`` files for the gate tests.

The structure mirrors what pytest-benchmark 5.3.1 writes (checked against a real run in
test_baseline.py::test_real_pytest_benchmark_json_loads): top-level machine_info, commit_info,
benchmarks[], datetime, version; each benchmark has name, fullname, params, param, extra_info,
options and stats (with raw samples in ``stats.data``).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import make_section

H200 = Fingerprint(
    gpu_name="NVIDIA H200",
    gpu_slug="nvidia-h200",
    compute_capability="9.0",
    sm_count=132,
    memory_gib=139.8,
    l2_bytes=52428800,
    driver="580.1",
    cuda="13.0",
    torch="2.11.0",
    flashinfer="0.5.2",
    sgl_kernel=None,
    cublaslt="13.1.0",
    python="3.12.3",
    power_limit_w=700.0,
    sm_clock_max_mhz=1980,
    mem_clock_max_mhz=3201,
)
B200 = replace(H200, gpu_name="NVIDIA B200", gpu_slug="nvidia-b200", compute_capability="10.0", sm_count=148)


def samples(rng: np.random.Generator, median: float, rel_sigma: float, n: int = 30) -> list[float]:
    """Lognormal timings around ``median`` (seconds): skewed and positive like GPU times."""
    return (median * np.exp(rng.normal(0.0, rel_sigma, n))).tolist()


def bench_entry(
    fullname: str, data: Sequence[float], extra_info: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One element of ``benchmarks[]`` as pytest-benchmark writes it."""
    a = np.asarray(data, dtype=float)
    q1, med, q3 = np.percentile(a, [25, 50, 75])
    iqr = q3 - q1
    name = fullname.split("::")[-1]
    param = name[name.index("[") + 1 : -1] if "[" in name else None
    return {
        "group": None,
        "name": name,
        "fullname": fullname,
        "params": {"case": param} if param else None,
        "param": param,
        "extra_info": dict(extra_info or {}),
        "options": {
            "disable_gc": False,
            "timer": "perf_counter",
            "min_rounds": 5,
            "max_time": 1.0,
            "min_time": 5e-06,
            "precision": None,
            "confidence": None,
            "warmup": False,
        },
        "stats": {
            "min": float(a.min()),
            "max": float(a.max()),
            "mean": float(a.mean()),
            "stddev": float(a.std(ddof=1)) if a.size > 1 else 0.0,
            "rounds": int(a.size),
            "median": float(med),
            "iqr": float(iqr),
            "q1": float(q1),
            "q3": float(q3),
            "iqr_outliers": 0,
            "stddev_outliers": 0,
            "outliers": "0;0",
            "ld15iqr": float(a.min()),
            "hd15iqr": float(a.max()),
            "ops": float(1.0 / a.mean()),
            "total": float(a.sum()),
            "data": a.tolist(),
            "iterations": 1,
        },
    }


def bench_json(
    benchmarks: Sequence[dict[str, Any]],
    fingerprint: Fingerprint | None = H200,
    availability: dict[str, str] | None = None,
    clean: bool | None = True,
    verdicts: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A whole file; ``fingerprint=None`` leaves out the fp4bench section (plain pytest-benchmark)."""
    data: dict[str, Any] = {
        "machine_info": {"node": "gpu-node", "python_version": "3.12.3", "system": "Linux"},
        "commit_info": {"id": "0123abc", "time": None, "dirty": False, "project": "fp4bench", "branch": "main"},
        "benchmarks": list(benchmarks),
        "datetime": "2026-01-01T00:00:00+00:00",
        "version": "5.3.1",
    }
    if fingerprint is not None:
        data["fp4bench"] = make_section(fingerprint, availability, {"models": ["synthetic"]}, clean, verdicts)
    return data


def write(path: Path, data: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path
