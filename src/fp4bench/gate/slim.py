"""The slim baseline format: how an approved baseline is written, so that a change reads as a diff.

The file is valid JSON: the ``"fp4bench"`` section's fields as a header, one per line, then
``"availability"`` and ``"benchmarks"`` objects with one entry per line, sorted by name. Each
benchmark line holds its raw samples, window by window, and only the ``extra_info`` keys the gate
reads (``record.GATE_KEYS``), ``fp4bench report`` draws from (``REPORT_KEYS``), and that say how
and where the case was measured (``MEASURE_KEYS``, ``UNIT_KEYS``); a change of one benchmark is a
change of one line::

    {"format": "fp4bench-baseline", "schema": 2,
    "fingerprint": {...},
    ...
    "benchmarks": {
    "bench/test_fp4_gemm.py::test_dense[...]": {"extra_info":{...},"windows":[[...],[...],[...]]},
    ...
    }}

A file whose benchmarks all have one window is written as schema 1 (``samples``: one list), which
older readers read. ``gate.baseline.load_baseline`` reads it back.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from fp4bench.gate.baseline import SCHEMA, SLIM_FORMAT, Baseline, BaselineError, parse_text, write_text
from fp4bench.gate.record import GATE_KEYS, BenchmarkRecord

#: ``extra_info`` keys ``fp4bench report`` reads besides the gate's: what the case is (fixed for a
#: case) and the power and clock it ran at
REPORT_KEYS = ("kind", "model", "role", "batch", "m", "num_tokens", "act_format", "weight_format", "flops",
               "bytes", "rel_ci95", "power_w", "power_max_w", "sm_clock_min_mhz", "sm_clock_max_mhz")
#: ``extra_info`` keys that say how a case was timed: the placements it averaged (its rotating copies)
MEASURE_KEYS = ("rotating_copies",)
#: ``extra_info`` keys that say where a benchmark was measured: ``gpu_uuid``, recorded per benchmark by
#: a run spread over several GPUs (``gate.store.approve`` writes each unit's file from it)
UNIT_KEYS = ("gpu_uuid",)


def slim_text(baseline: Baseline) -> str:
    """``baseline`` in the slim format: header fields one per line, then one availability entry and
    one benchmark per line, each sorted by name (a changed benchmark is a changed line)."""
    # a file of single windows keeps schema 1's one ``samples`` list per benchmark, so older
    # readers still read it
    schema = SCHEMA if any(len(r.windows) > 1 for r in baseline.benchmarks.values()) else 1
    head: dict[str, Any] = {"format": SLIM_FORMAT, "schema": schema, "fingerprint": baseline.fingerprint.to_dict(),
                            "sweep": baseline.sweep, "clean": baseline.clean, "verdicts": baseline.verdicts}
    if baseline.approval:
        head["approval"] = baseline.approval
    lines = [f"{json.dumps(k)}: {_compact(v)}," for k, v in head.items()]
    lines[0] = "{" + lines[0]
    lines.append('"availability": {')
    lines.append(",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(baseline.availability.items())))
    lines.append("},")
    lines.append('"benchmarks": {')
    lines.append(",\n".join(f"{json.dumps(name)}: {_compact(slim_record(rec))}"
                            for name, rec in sorted(baseline.benchmarks.items())))
    lines.append("}}")
    return "\n".join(line for line in lines if line) + "\n"


def slim_record(rec: BenchmarkRecord) -> dict[str, Any]:
    """One benchmark as the slim format keeps it: raw samples (``samples`` for one window, else
    ``windows``: a list of sample lists) and the gate's and report's keys."""
    keep = set(GATE_KEYS) | set(REPORT_KEYS) | set(MEASURE_KEYS) | set(UNIT_KEYS)
    extra = {k: v for k, v in rec.extra_info.items() if k in keep}
    if len(rec.windows) == 1:
        return {"extra_info": extra, "samples": list(rec.samples)}
    return {"extra_info": extra, "windows": [list(w) for w in rec.windows]}


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def slim_document(baseline: Baseline, path: str | os.PathLike[str]) -> str:
    """``baseline`` in the slim format, checked by reading the text back (what is written is a
    valid baseline with the same samples); ``path`` names it in errors."""
    text = slim_text(baseline)
    again = parse_text(text, source=str(path))
    if {k: r.windows for k, r in again.benchmarks.items()} != {k: r.windows for k, r in baseline.benchmarks.items()}:
        raise BaselineError(f"{path}: the slim text does not read back to the same samples; nothing written")
    return text


def write_slim(baseline: Baseline, path: str | os.PathLike[str]) -> Path:
    """Write ``baseline`` to ``path`` in the slim format (``slim_document``), atomically."""
    p = Path(path)
    write_text(p, slim_document(baseline, p))
    return p
