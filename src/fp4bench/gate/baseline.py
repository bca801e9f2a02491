"""Baseline files: the two formats the gate reads, their validation, and the slim writer.

A run's result is a pytest-benchmark ``--benchmark-json`` file (raw samples in ``stats.data``)
plus a top-level ``"fp4bench"`` section::

    {"schema": 2, "fingerprint": {...}, "availability": {"<backend>|<problem>|<tactic>": "ok" |
     "unsupported: <reason>"}, "sweep": {...}, "clean": true, "verdicts": {"PASS": 40, ...},
     "windows": {"<fullname>": [[samples of window 1...], [window 2...], ...]}}

A **window** is one independent measurement of a benchmark: its own prepared operands, graph
capture and cold-L2 copies, taken at another time of the run than its other windows
(``--fp4-windows``: interleaved passes over the sweep). ``stats.data`` holds the first window
(what pytest-benchmark's own tools read); ``windows`` holds every window of every benchmark that
had more than one. The gate judges window medians (``gate.rule``).

The approved baseline is kept in the *slim* format (``slim_text``): the same section as a header,
then ``"availability"`` and ``"benchmarks"`` objects with one entry per line, sorted by name; each
benchmark line holds its raw samples, window by window, and only the ``extra_info`` keys the gate reads
(``GATE_KEYS``) and ``fp4bench report`` draws from (``REPORT_KEYS``). The file is valid JSON and a
change of one benchmark is a change of one line::

    {"format": "fp4bench-baseline", "schema": 2,
    "fingerprint": {...},
    ...
    "benchmarks": {
    "bench/test_fp4_gemm.py::test_dense[...]": {"extra_info":{...},"windows":[[...],[...],[...]]},
    ...
    }}

``load_baseline`` reads both formats, and schema 1 files (one ``samples`` list per benchmark:
one window). Where files live and how a run becomes the approved
baseline is ``gate.store``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from fp4bench.env import Fingerprint

SCHEMA = 2
#: the schema numbers this fp4bench reads (the written one included)
SUPPORTED_SCHEMAS = (1, 2)
#: the shortest time one call of a GPU kernel can take, in seconds. CUDA events, which time every
#: GPU sample here, resolve "around 0.5 microseconds" (CUDA Runtime API, cudaEventElapsedTime),
#: and a kernel's launch and drain on the GPU take about a microsecond even inside a CUDA graph;
#: a CPU call pays torch's dispatch (microseconds). 1e-7 s is five times below the event
#: resolution: no real call is refused, while 1e-30 s or a denormal (a broken timer or a corrupt
#: file, which would make any slowdown read as a speed-up) is.
MIN_SAMPLE_S = 1e-7
#: the longest one call can take, in seconds: the largest GEMM of the model catalog (~2.5e12
#: FLOP) takes milliseconds on a GPU and the per-case time budget is seconds; a minute per call is
#: not a timing (a unit error or a corrupt file, e.g. 1e6 s)
MAX_SAMPLE_S = 60.0
SECTION = "fp4bench"
#: the ``format`` value that marks a slim baseline file
SLIM_FORMAT = "fp4bench-baseline"
OK = "ok"
UNSUPPORTED = "unsupported"
#: ``extra_info`` keys ``gate.verdict`` reads (tests/test_slim_baseline.py checks the list against it)
GATE_KEYS = ("backend", "problem", "tactic", "explicit_tactic", "tactic_config", "kernels", "sm_clock_mhz",
             "throttle_reasons", "throttled", "clock_anomaly", "invalid", "noise_floor")
#: ``extra_info`` keys ``fp4bench report`` reads besides those: what the case is (fixed for a case)
#: and the power and clock it ran at
REPORT_KEYS = ("kind", "model", "role", "batch", "m", "num_tokens", "act_format", "weight_format", "flops",
               "bytes", "rel_ci95", "power_w", "power_max_w", "sm_clock_min_mhz", "sm_clock_max_mhz")
#: ``extra_info`` keys that say how a case was timed: the placements it averaged (its rotating copies)
MEASURE_KEYS = ("rotating_copies",)
#: ``extra_info`` keys that say where a benchmark was measured: ``gpu_uuid``, recorded per benchmark by
#: a run spread over several GPUs (``gate.store.approve`` writes each unit's file from it)
UNIT_KEYS = ("gpu_uuid",)

_RESAVE = "re-save with --benchmark-json (raw samples are required for the statistical gate)"


class BaselineError(ValueError):
    """A baseline file that cannot be used, with the reason in words."""


class IncompatibleBaseline(BaselineError):
    """Baseline and current run are from different GPU models: timings are not comparable."""


@dataclass(frozen=True)
class BenchmarkRecord:
    """One benchmark of a baseline file: raw samples (seconds) and what was recorded with them."""

    fullname: str
    name: str
    samples: tuple[float, ...]
    extra_info: dict[str, Any] = field(default_factory=dict)
    #: the samples window by window (independent measurements); ``()`` means one window
    windows: tuple[tuple[float, ...], ...] = ()

    def __post_init__(self) -> None:
        if not self.windows:
            object.__setattr__(self, "windows", (tuple(self.samples),))

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    @property
    def window_medians(self) -> tuple[float, ...]:
        return tuple(float(np.median(w)) for w in self.windows)


def with_windows(fullname: str, name: str, windows: Any, extra_info: dict[str, Any]) -> BenchmarkRecord:
    """A record from its windows (each a list of samples); ``samples`` is all of them in order."""
    ws = tuple(tuple(w) for w in windows)
    return BenchmarkRecord(fullname, name, tuple(x for w in ws for x in w), extra_info, ws)


@dataclass
class Baseline:
    """A parsed, validated baseline (or candidate) file."""

    fingerprint: Fingerprint
    benchmarks: dict[str, BenchmarkRecord]  # by fullname: pytest-benchmark's identity
    availability: dict[str, str]
    sweep: dict[str, Any]
    clean: bool | None
    verdicts: dict[str, Any]
    source: str
    #: how it became the approved baseline (``gate.store.approve``): from, at, forced; {} otherwise
    approval: dict[str, Any] = field(default_factory=dict)
    #: read from a slim file (pytest-benchmark's own tools cannot read it)
    slim: bool = False

    #: the fewest windows any benchmark has (1 for files written before windows were kept)
    @property
    def min_windows(self) -> int:
        return min((len(r.windows) for r in self.benchmarks.values()), default=0)

    def as_current(self) -> dict[str, tuple[tuple[tuple[float, ...], ...], dict[str, Any]]]:
        """``{fullname: (windows, extra_info)}``: this file as the *new* side of a comparison."""
        return {k: (r.windows, r.extra_info) for k, r in self.benchmarks.items()}


# --- availability map -------------------------------------------------------------------------


def availability_key(backend: str, problem_id: str, tactic: str) -> str:
    """``"<backend>|<problem id>|<tactic>"``; parts must not contain the separator."""
    for what, part in (("backend", backend), ("problem id", problem_id), ("tactic", tactic)):
        if not part or "|" in part:
            raise ValueError(f"availability {what} must be non-empty without '|', got {part!r}")
    return f"{backend}|{problem_id}|{tactic}"


def availability_value(ok: bool, reason: str = "") -> str:
    """``"ok"`` or ``"unsupported: <reason>"``."""
    if ok:
        return OK
    return f"{UNSUPPORTED}: {reason or 'no reason given'}"


def is_ok(value: str) -> bool:
    return value == OK


def make_section(
    fingerprint: Fingerprint,
    availability: dict[str, str] | None = None,
    sweep: dict[str, Any] | None = None,
    clean: bool | None = None,
    verdicts: dict[str, Any] | None = None,
    windows: dict[str, list[list[float]]] | None = None,
) -> dict[str, Any]:
    """The ``"fp4bench"`` object a run adds to its ``--benchmark-json`` output; ``windows``: the
    benchmarks measured in more than one window, ``{fullname: [[samples], ...]}``."""
    out = {
        "schema": SCHEMA,
        "fingerprint": fingerprint.to_dict(),
        "availability": dict(availability or {}),
        "sweep": dict(sweep or {}),
        "clean": clean,
        "verdicts": dict(verdicts or {}),
    }
    if windows:
        out["windows"] = {k: [list(w) for w in ws] for k, ws in windows.items()}
    return out


# --- reading ----------------------------------------------------------------------------------


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read and validate a baseline/candidate file in either format; ``BaselineError`` names the
    file and says what is wrong."""
    p = Path(path)
    if not p.is_file():
        what = "is not a file" if p.exists() else "does not exist"
        raise BaselineError(f"baseline file {p} {what}")
    try:
        data = json.loads(p.read_text(), object_pairs_hook=_unique_keys)
    except OSError as e:
        raise BaselineError(f"baseline file {p} cannot be read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BaselineError(f"baseline file {p} is not valid JSON (corrupt?): {e}") from e
    except _DuplicateKey as e:
        raise BaselineError(f"baseline file {p}: {e}") from None
    except RecursionError:
        raise BaselineError(f"baseline file {p} nests JSON too deeply to be a baseline") from None
    return parse_baseline(data, source=str(p))


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique: a benchmark line pasted twice (a merge) is an error,
    not silently the last one."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(f"key {k!r} appears twice in one object")
        out[k] = v
    return out


def parse_baseline(data: Any, source: str = "<memory>") -> Baseline:
    """Validate an already-decoded baseline: a slim file or a pytest-benchmark JSON file."""
    if not isinstance(data, dict):
        raise BaselineError(f"{source}: top level must be a JSON object, got {type(data).__name__}")
    if "format" in data:
        return _parse_slim(data, source)
    benches = data.get("benchmarks")
    if not isinstance(benches, list) or not benches:
        raise BaselineError(
            f"{source}: no 'benchmarks' list (or it is empty); is this a pytest-benchmark "
            "--benchmark-json file?"
        )
    records: dict[str, BenchmarkRecord] = {}
    for i, b in enumerate(benches):
        rec = _parse_benchmark(b, i, source)
        if rec.fullname in records:
            raise BaselineError(f"{source}: benchmark {rec.fullname!r} appears twice")
        records[rec.fullname] = rec
    sec = data.get(SECTION)
    if not isinstance(sec, dict):
        raise BaselineError(
            f"{source}: no '{SECTION}' section with a fingerprint; it was not written by an fp4bench "
            "run, so its GPU model cannot be checked"
        )
    windows = sec.get("windows") or {}
    if not isinstance(windows, dict):
        raise BaselineError(f"{source}: '{SECTION}.windows' must be an object of benchmark -> windows")
    for fullname, ws in windows.items():
        rec = records.get(fullname)
        if rec is None:
            raise BaselineError(f"{source}: '{SECTION}.windows' names {fullname!r}, which is not a benchmark "
                                "of the file")
        records[fullname] = _record(fullname, rec.name, ws, rec.extra_info, source, windowed=True)
    return _with_section(sec, records, source, f"{SECTION}.")


def _parse_slim(data: dict[str, Any], source: str) -> Baseline:
    if data.get("format") != SLIM_FORMAT:
        raise BaselineError(f"{source}: 'format' is {_short(data.get('format'))}, not {SLIM_FORMAT!r}")
    benches = data.get("benchmarks")
    if not isinstance(benches, dict) or not benches:
        raise BaselineError(f"{source}: no 'benchmarks' object (or it is empty): a slim baseline has one "
                            "benchmark per line under 'benchmarks'")
    records = {name: _parse_slim_benchmark(name, b, source) for name, b in benches.items()}
    return dataclasses.replace(_with_section(data, records, source, ""), slim=True)


def _with_section(sec: dict[str, Any], records: dict[str, BenchmarkRecord], source: str, where: str) -> Baseline:
    """The fp4bench fields (``where`` prefixes their names in errors) around parsed benchmarks."""
    schema = sec.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise BaselineError(f"{source}: '{where}schema' must be an integer, got {schema!r}")
    if schema < SCHEMA and schema not in SUPPORTED_SCHEMAS:
        raise BaselineError(f"{source}: '{where}schema' {schema} is not a schema fp4bench wrote "
                            f"(supported: {', '.join(map(str, SUPPORTED_SCHEMAS))})")
    if schema > SCHEMA:
        raise BaselineError(
            f"{source}: '{where.rstrip('.') or 'baseline'}' schema {schema} is newer than this fp4bench supports "
            f"({SCHEMA}); upgrade fp4bench"
        )
    if "fingerprint" not in sec:
        raise BaselineError(f"{source}: '{where.rstrip('.') or 'baseline'}' section has no fingerprint")
    try:
        fp = Fingerprint.from_dict(sec["fingerprint"])
    except (TypeError, ValueError) as e:
        raise BaselineError(f"{source}: bad fingerprint: {e}") from e
    avail = sec.get("availability") or {}
    if not isinstance(avail, dict):
        raise BaselineError(f"{source}: '{where}availability' must be an object")
    for k, v in avail.items():
        if not isinstance(v, str) or not (v == OK or v.startswith(UNSUPPORTED)):
            raise BaselineError(
                f"{source}: availability[{k!r}] must be 'ok' or 'unsupported: <reason>', got {v!r}"
            )
    sweep = _object(sec, "sweep", source, where)
    clean = sec.get("clean")
    if clean is not None and not isinstance(clean, bool):
        raise BaselineError(f"{source}: '{where}clean' must be true/false, got {clean!r}")
    verdicts = _object(sec, "verdicts", source, where)
    for k, v in verdicts.items():
        if not _is_number(v) or v < 0:
            raise BaselineError(f"{source}: '{where}verdicts[{k!r}]' must be a count, got {v!r}")
    approval = _object(sec, "approval", source, where)
    return Baseline(fp, records, dict(avail), dict(sweep), clean, dict(verdicts), source, dict(approval))


def _object(sec: dict[str, Any], key: str, source: str, where: str) -> dict[str, Any]:
    value = sec.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BaselineError(f"{source}: '{where}{key}' must be an object, got {type(value).__name__} "
                            f"{_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(x: Any) -> bool:
    """A JSON number (``true``/``false`` are not: Python would read them as 1/0)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _finite(x: Any) -> bool:
    """A JSON number that is a finite float: an integer beyond the float range is not (JSON
    integers have no size limit; ``float(10**400)`` raises ``OverflowError``)."""
    try:
        return _is_number(x) and math.isfinite(x)
    except OverflowError:
        return False


def _check_extra(extra: dict[str, Any], fullname: str, source: str) -> None:
    """The ``extra_info`` values the gate computes with must have the types it expects."""
    where = f"{source}: benchmark {fullname!r} extra_info"
    nf = extra.get("noise_floor")
    if nf is not None and not (_finite(nf) and nf >= 0):
        raise BaselineError(f"{where}['noise_floor'] must be a relative number >= 0 (0.02 = 2 %), "
                            f"got {_short(nf)}")
    clk = extra.get("sm_clock_mhz")
    if clk is not None:
        vals = clk if isinstance(clk, list) else [clk]
        if not all(_finite(v) for v in vals):
            raise BaselineError(f"{where}['sm_clock_mhz'] must be a number or a list of numbers (MHz), "
                                f"got {_short(clk)}")
    for key in ("kernels", "throttle_reasons"):
        v = extra.get(key)
        if v is not None and not (isinstance(v, list) or (key == "throttle_reasons" and isinstance(v, str))):
            raise BaselineError(f"{where}[{key!r}] must be a list of names, got {_short(v)}")


def check_samples(samples: Any, what: str) -> tuple[float, ...]:
    """Raw timings as seconds: numbers, finite and > 0, and possible for one call: between
    ``MIN_SAMPLE_S`` and ``MAX_SAMPLE_S`` (``ValueError`` naming ``what`` and the value otherwise).

    A time of 0 or below, NaN/Inf, or a boolean is a broken measurement, not a fast kernel; judged,
    it would make any slowdown look like a speed-up (or leave the ratio undefined)."""
    if not isinstance(samples, (list, tuple)) or not samples:
        raise ValueError(f"{what} has no raw samples")
    bad = [x for x in samples if not (_finite(x) and x > 0)]
    if bad:
        raise ValueError(f"{what} has {len(bad)} invalid sample(s) (times must be finite numbers of "
                         f"seconds > 0), e.g. [{', '.join(_short(x) for x in bad[:3])}]")
    impossible = [x for x in samples if not MIN_SAMPLE_S <= x <= MAX_SAMPLE_S]
    if impossible:
        raise ValueError(f"{what} has {len(impossible)} impossible sample(s), e.g. {impossible[0]:g} s: one call "
                         f"takes between {MIN_SAMPLE_S:g} s and {MAX_SAMPLE_S:g} s")
    return tuple(float(x) for x in samples)


def _parse_benchmark(b: Any, i: int, source: str) -> BenchmarkRecord:
    if not isinstance(b, dict):
        raise BaselineError(f"{source}: benchmarks[{i}] is not an object")
    fullname = b.get("fullname")
    if not isinstance(fullname, str) or not fullname:
        raise BaselineError(f"{source}: benchmarks[{i}] has no 'fullname'")
    stats = b.get("stats")
    data = stats.get("data") if isinstance(stats, dict) else None
    if not isinstance(data, list) or not data:
        raise BaselineError(f"{source}: benchmark {fullname!r} has no raw samples (stats.data); {_RESAVE}")
    return _record(fullname, str(b.get("name") or fullname), data, b.get("extra_info") or {}, source)


def _parse_slim_benchmark(fullname: str, b: Any, source: str) -> BenchmarkRecord:
    if not fullname:
        raise BaselineError(f"{source}: a benchmark with an empty name")
    if not isinstance(b, dict):
        raise BaselineError(f"{source}: benchmark {fullname!r} is not an object, got {_short(b)}")
    unknown = sorted(set(b) - {"samples", "windows", "extra_info"})
    if unknown:
        raise BaselineError(f"{source}: benchmark {fullname!r} has unknown keys {unknown}; a slim benchmark "
                            "holds 'windows' (or 'samples': one window) and 'extra_info'")
    key = "windows" if "windows" in b else "samples"
    if not isinstance(b.get(key), list) or not b[key]:
        raise BaselineError(f"{source}: benchmark {fullname!r} has no 'samples' list (nor 'windows')")
    return _record(fullname, fullname.rsplit("::", 1)[-1], b[key], b.get("extra_info") or {}, source,
                   windowed=key == "windows")


def _record(fullname: str, name: str, data: list, extra: Any, source: str, windowed: bool = False) -> BenchmarkRecord:
    """``data``: the samples, or with ``windowed`` a list of windows, each a list of samples."""
    windows = data if windowed else [data]
    if windowed and not (isinstance(data, list) and data and all(isinstance(w, list) for w in data)):
        raise BaselineError(f"{source}: benchmark {fullname!r} windows must be a non-empty list of sample lists, "
                            f"got {_short(data)}")
    try:
        ws = [check_samples(w, f"{source}: benchmark {fullname!r}"
                            + (f" window {i + 1}" if windowed else "")) for i, w in enumerate(windows)]
    except ValueError as e:
        raise BaselineError(str(e)) from None
    if not isinstance(extra, dict):
        raise BaselineError(f"{source}: benchmark {fullname!r} extra_info is not an object")
    _check_extra(extra, fullname, source)
    return with_windows(fullname, name, ws, extra)


# --- compatibility ----------------------------------------------------------------------------

#: ``sweep`` keys that say how the time was taken. Runs that differ in one measured different
#: things (a hot-L2 time is not a slower or faster cold-L2 time; a case averaged over 4
#: placements is not one placement), so they are never compared. ``case.measurement_of``
#: writes them.
MEASUREMENT_KEYS = ("l2", "timer", "min_copies", "copy_memory")
#: the note for a cold-L2 baseline recorded before ``min_copies`` was: its cases of a footprint
#: of 3 L2s or more were timed on one copy, one placement each
ONE_PLACEMENT = "baseline recorded with one placement per large case: re-record for full sensitivity"
#: ``sweep`` key naming the test-only backends a run measured (``{name: description}``): faults
#: or slowdown wrappers from ``fp4bench.testing``. Such a run tests the gate; it is never a baseline.
TEST_ONLY = "test_only"


def test_only_backends(sweep: dict[str, Any]) -> dict[str, Any]:
    """The run's test-only backends (``{}`` for a real run)."""
    v = sweep.get(TEST_ONLY) or {}
    return dict(v) if isinstance(v, dict) else {str(v): ""}


def describe_test_only(found: dict[str, Any]) -> str:
    """``name: description`` of each test-only backend, for messages."""
    return ", ".join(f"{k}: {v}" if v else k for k, v in sorted(found.items()))


def check_same_measurement(base_sweep: dict[str, Any], cur_sweep: dict[str, Any]) -> None:
    """Raise ``IncompatibleBaseline`` when the baseline was timed another way than this run, or
    is itself a run of test-only backends (a test of the gate, never a reference).

    A side that did not record a key (files written before it was recorded) is not checked."""
    found = test_only_backends(base_sweep)
    if found:
        raise IncompatibleBaseline(f"the baseline ran test-only backends ({describe_test_only(found)}); "
                                   "it is not a reference")
    for key in MEASUREMENT_KEYS:
        old, new = base_sweep.get(key), cur_sweep.get(key)
        if old is not None and new is not None and old != new:
            raise IncompatibleBaseline(f"the baseline was timed with {key}={old!r} but this run with "
                                       f"{key}={new!r}; times taken differently are not comparable "
                                       f"(re-run with the baseline's setting, or make a new baseline)")



def measurement_notes(base_sweep: dict[str, Any], cur_sweep: dict[str, Any]) -> list[str]:
    """What makes a comparable baseline less sensitive in how it was timed (one line each): a
    cold-L2 baseline without ``min_copies`` timed its large cases on one placement while this run
    averages several, so its windows carry a placement offset more windows do not remove."""
    old_cold = base_sweep.get("l2", "cold") == "cold"
    if old_cold and "min_copies" not in base_sweep and int(cur_sweep.get("min_copies", 1)) > 1:
        return [ONE_PLACEMENT]
    return []


def check_compatible(baseline_fp: Fingerprint, current_fp: Fingerprint) -> list[tuple[str, Any, Any]]:
    """Raise ``IncompatibleBaseline`` on a different GPU model; else what changed (key, old, new)."""
    if not baseline_fp.same_model(current_fp):
        raise IncompatibleBaseline(
            f"baseline is for {baseline_fp.model} but this run is on {current_fp.model}; "
            "timings are only comparable on the same GPU model"
        )
    return baseline_fp.differences(current_fp)


# --- writing ---------------------------------------------------------------------------------


def write_baseline(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``data`` as a baseline, then write it atomically (a crash leaves no half file)."""
    p = Path(path)
    parse_baseline(data, source=str(p))
    try:
        _atomic_write(p, json.dumps(data, indent=2, sort_keys=False) + "\n")
    except OSError as e:
        raise BaselineError(f"cannot write {p}: {e.strerror or e}") from None
    return p


def _atomic_write(path: Path, text: str) -> None:
    from fp4bench.outputs import write_atomic

    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, text)


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


def write_slim(baseline: Baseline, path: str | os.PathLike[str]) -> Path:
    """Write ``baseline`` to ``path`` in the slim format, atomically, after reading the text back
    (what is written is a valid baseline with the same samples)."""
    p = Path(path)
    text = slim_text(baseline)
    again = parse_baseline(json.loads(text, object_pairs_hook=_unique_keys), source=str(p))
    if {k: r.windows for k, r in again.benchmarks.items()} != {k: r.windows for k, r in baseline.benchmarks.items()}:
        raise BaselineError(f"{p}: the slim text does not read back to the same samples; nothing written")
    try:
        _atomic_write(p, text)
    except OSError as e:
        raise BaselineError(f"cannot write {p}: {e.strerror or e}") from None
    return p
