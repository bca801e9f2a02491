"""Result and baseline files as the gate reads them: the two formats, validated, as a ``Baseline``.

A run's result is a pytest-benchmark ``--benchmark-json`` file (raw samples in ``stats.data``)
plus a top-level ``"fp4bench"`` section (``make_section``)::

    {"schema": 2, "fingerprint": {...}, "availability": {"<backend>|<problem>|<tactic>": "ok" |
     "unsupported: <reason>"}, "sweep": {...}, "clean": true, "verdicts": {"PASS": 40, ...},
     "windows": {"<fullname>": [[samples of window 1...], [window 2...], ...]}}

``stats.data`` holds a benchmark's first window (what pytest-benchmark's own tools read);
``windows`` holds every window of every benchmark that had more than one (``gate.record``).

The approved baseline is a *slim* file (``{"format": "fp4bench-baseline", ...}``, written by
``gate.slim``): the same section as a header, then one availability entry and one benchmark per
line. ``load_baseline`` reads both formats, schema 1 files (one ``samples`` list per benchmark:
one window) and schema 2 (``windows``), and says what is wrong with a file that is neither.
What may be compared with what is ``gate.compatibility``; where files live and how a run becomes
the approved baseline is ``gate.store``.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fp4bench.env import Fingerprint
from fp4bench.gate.record import BenchmarkRecord, check_extra, check_samples, is_number, short, with_windows

SCHEMA = 2
#: the schema numbers this fp4bench reads (the written one included)
SUPPORTED_SCHEMAS = (1, 2)
SECTION = "fp4bench"
#: the ``format`` value that marks a slim baseline file
SLIM_FORMAT = "fp4bench-baseline"
OK = "ok"
UNSUPPORTED = "unsupported"
_RESAVE = "re-save with --benchmark-json (raw samples are required for the statistical gate)"


class BaselineError(ValueError):
    """A baseline file that cannot be used, with the reason in words."""


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
        text = p.read_text()
    except OSError as e:
        raise BaselineError(f"baseline file {p} cannot be read: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise _not_json(str(p), e) from e
    return parse_text(text, source=str(p))


def _not_json(source: str, e: ValueError) -> BaselineError:
    return BaselineError(f"baseline file {source} is not valid JSON (corrupt?): {e}")


def parse_text(text: str, source: str) -> Baseline:
    """Decode and validate the text of a baseline file (``source`` names it in errors): a key
    twice in one object is an error, not silently the last one."""
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError as e:
        raise _not_json(source, e) from e
    except _DuplicateKey as e:
        raise BaselineError(f"baseline file {source}: {e}") from None
    except RecursionError:
        raise BaselineError(f"baseline file {source} nests JSON too deeply to be a baseline") from None
    except ValueError as e:  # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise BaselineError(f"baseline file {source}: a number with too many digits to be a sample or a "
                            f"count ({str(e).split(':')[0]})") from None
    return parse_baseline(data, source=source)


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
        raise BaselineError(f"{source}: 'format' is {short(data.get('format'))}, not {SLIM_FORMAT!r}")
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
        if not is_number(v) or v < 0:
            raise BaselineError(f"{source}: '{where}verdicts[{k!r}]' must be a count, got {v!r}")
    approval = _object(sec, "approval", source, where)
    return Baseline(fp, records, dict(avail), dict(sweep), clean, dict(verdicts), source, dict(approval))


def _object(sec: dict[str, Any], key: str, source: str, where: str) -> dict[str, Any]:
    value = sec.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BaselineError(f"{source}: '{where}{key}' must be an object, got {type(value).__name__} "
                            f"{short(value)}")
    return value


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
        raise BaselineError(f"{source}: benchmark {fullname!r} is not an object, got {short(b)}")
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
                            f"got {short(data)}")
    try:
        ws = [check_samples(w, f"{source}: benchmark {fullname!r}"
                            + (f" window {i + 1}" if windowed else "")) for i, w in enumerate(windows)]
        if not isinstance(extra, dict):
            raise ValueError(f"{source}: benchmark {fullname!r} extra_info is not an object")
        check_extra(extra, f"{source}: benchmark {fullname!r} extra_info")
    except ValueError as e:
        raise BaselineError(str(e)) from None
    return with_windows(fullname, name, ws, extra)


# --- writing ---------------------------------------------------------------------------------


def write_baseline(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``data`` as a baseline, then write it atomically (a crash leaves no half file)."""
    p = Path(path)
    parse_baseline(data, source=str(p))
    write_text(p, json.dumps(data, indent=2, sort_keys=False) + "\n")
    return p


def write_text(path: Path, text: str) -> None:
    """Write a result file atomically (``fp4bench.outputs.write_atomic``), creating its folder;
    ``BaselineError`` names the file when it cannot be written."""
    from fp4bench.outputs import WriteError, write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text)
    except OSError as e:  # a WriteError names the file already
        raise BaselineError(str(e) if isinstance(e, WriteError) else f"cannot write {path}: {e.strerror or e}") from None
