"""Baseline files: reading, validating, per-GPU storage, selection and approval.

A baseline is a pytest-benchmark ``--benchmark-json`` file (raw samples in ``stats.data``) plus a
top-level ``"fp4bench"`` section::

    {"schema": 1, "fingerprint": {...}, "availability": {"<backend>|<problem>|<tactic>": "ok" |
     "unsupported: <reason>"}, "sweep": {...}, "clean": true, "verdicts": {"PASS": 40, ...}}

Storage (pytest-benchmark keys its storage by OS/Python and compares against
"the latest" file, so a regressed run silently becomes the next baseline — we do neither)::

    baselines/<gpu_slug>/approved.json                 THE baseline for that GPU model
    baselines/<gpu_slug>/candidates/<UTC time>.json    runs waiting for review
    baselines/<gpu_slug>/history/approved-<UTC>.json   earlier approved baselines

A candidate becomes the baseline only through ``approve`` (an explicit act), which refuses runs
that were not clean (FAIL verdicts / failed tests) unless forced.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from fp4bench.env import Fingerprint

SCHEMA = 1
SECTION = "fp4bench"
APPROVED = "approved.json"
CANDIDATES = "candidates"
HISTORY = "history"
OK = "ok"
UNSUPPORTED = "unsupported"

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
    stats: dict[str, Any] = field(default_factory=dict)
    params: dict[str, Any] | None = None

    @property
    def median(self) -> float:
        return float(np.median(self.samples))


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
    raw: dict[str, Any]

    def as_current(self) -> dict[str, tuple[tuple[float, ...], dict[str, Any]]]:
        """``{fullname: (samples, extra_info)}``: this file as the *new* side of a comparison."""
        return {k: (r.samples, r.extra_info) for k, r in self.benchmarks.items()}


@dataclass(frozen=True)
class Approval:
    """Result of ``approve``: the new approved file and where the previous one was kept."""

    approved: Path
    previous: Path | None


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
) -> dict[str, Any]:
    """The ``"fp4bench"`` object a run adds to its ``--benchmark-json`` output."""
    return {
        "schema": SCHEMA,
        "fingerprint": fingerprint.to_dict(),
        "availability": dict(availability or {}),
        "sweep": dict(sweep or {}),
        "clean": clean,
        "verdicts": dict(verdicts or {}),
    }


# --- reading ----------------------------------------------------------------------------------


def load_baseline(path: str | os.PathLike[str]) -> Baseline:
    """Read and validate a baseline/candidate file; ``BaselineError`` says what is wrong."""
    p = Path(path)
    if not p.is_file():
        raise BaselineError(f"baseline file {p} does not exist")
    try:
        data = json.loads(p.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BaselineError(f"baseline file {p} is not valid JSON (corrupt?): {e}") from e
    return parse_baseline(data, source=str(p))


def parse_baseline(data: Any, source: str = "<memory>") -> Baseline:
    """Validate an already-decoded baseline JSON object."""
    if not isinstance(data, dict):
        raise BaselineError(f"{source}: top level must be a JSON object, got {type(data).__name__}")
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
    schema = sec.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool):
        raise BaselineError(f"{source}: '{SECTION}.schema' must be an integer, got {schema!r}")
    if schema > SCHEMA:
        raise BaselineError(
            f"{source}: '{SECTION}' schema {schema} is newer than this fp4bench supports "
            f"({SCHEMA}); upgrade fp4bench"
        )
    if "fingerprint" not in sec:
        raise BaselineError(f"{source}: '{SECTION}' section has no fingerprint")
    try:
        fp = Fingerprint.from_dict(sec["fingerprint"])
    except (TypeError, ValueError) as e:
        raise BaselineError(f"{source}: bad fingerprint: {e}") from e
    avail = sec.get("availability") or {}
    if not isinstance(avail, dict):
        raise BaselineError(f"{source}: '{SECTION}.availability' must be an object")
    for k, v in avail.items():
        if not isinstance(v, str) or not (v == OK or v.startswith(UNSUPPORTED)):
            raise BaselineError(
                f"{source}: availability[{k!r}] must be 'ok' or 'unsupported: <reason>', got {v!r}"
            )
    sweep = sec.get("sweep") or {}
    clean = sec.get("clean")
    if clean is not None and not isinstance(clean, bool):
        raise BaselineError(f"{source}: '{SECTION}.clean' must be true/false, got {clean!r}")
    verdicts = sec.get("verdicts") or {}
    return Baseline(fp, records, dict(avail), dict(sweep), clean, dict(verdicts), source, data)


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
    try:
        samples = tuple(float(x) for x in data)
    except (TypeError, ValueError) as e:
        raise BaselineError(f"{source}: benchmark {fullname!r} has non-numeric samples: {e}") from e
    bad = [x for x in samples if not math.isfinite(x) or x < 0]
    if bad:
        raise BaselineError(f"{source}: benchmark {fullname!r} has invalid sample(s) {bad[:3]}")
    extra = b.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise BaselineError(f"{source}: benchmark {fullname!r} extra_info is not an object")
    return BenchmarkRecord(
        fullname=fullname,
        name=str(b.get("name") or fullname),
        samples=samples,
        extra_info=extra,
        stats={k: v for k, v in stats.items() if k != "data"},
        params=b.get("params"),
    )


# --- compatibility ----------------------------------------------------------------------------


def check_compatible(baseline_fp: Fingerprint, current_fp: Fingerprint) -> list[tuple[str, Any, Any]]:
    """Raise ``IncompatibleBaseline`` on a different GPU model; else what changed (key, old, new)."""
    if not baseline_fp.same_model(current_fp):
        raise IncompatibleBaseline(
            f"baseline is for {baseline_fp.model} but this run is on {current_fp.model}; "
            "timings are only comparable on the same GPU model"
        )
    return baseline_fp.differences(current_fp)


# --- storage ----------------------------------------------------------------------------------


def _utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _unique(path: Path) -> Path:
    if not path.exists():
        return path
    for i in range(1, 10_000):
        cand = path.with_name(f"{path.stem}-{i}{path.suffix}")
        if not cand.exists():
            return cand
    raise BaselineError(f"cannot find a free file name next to {path}")


def approved_path(root: str | os.PathLike[str], slug: str) -> Path:
    return Path(root) / slug / APPROVED


def candidate_path(root: str | os.PathLike[str], slug: str, now: datetime | None = None) -> Path:
    """A fresh ``<root>/<slug>/candidates/<UTC time>.json`` (never the approved file)."""
    return _unique(Path(root) / slug / CANDIDATES / f"{_utc_stamp(now)}.json")


def write_baseline(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Validate ``data`` as a baseline, then write it atomically (a crash leaves no half file)."""
    p = Path(path)
    parse_baseline(data, source=str(p))
    _atomic_write(p, json.dumps(data, indent=2, sort_keys=False) + "\n")
    return p


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a baseline is a shared, committed file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def available_models(root: str | os.PathLike[str]) -> list[str]:
    """GPU slugs that have an approved baseline under ``root``."""
    r = Path(root)
    if not r.is_dir():
        return []
    return sorted(d.name for d in r.iterdir() if (d / APPROVED).is_file())


def select_baseline(root: str | os.PathLike[str], fingerprint: Fingerprint) -> Path:
    """The approved baseline for this GPU model — never "the newest file"."""
    p = approved_path(root, fingerprint.gpu_slug)
    if p.is_file():
        return p
    have = available_models(root)
    listing = ", ".join(have) if have else "none"
    raise BaselineError(
        f"no approved baseline for {fingerprint.model}: expected {p}. "
        f"GPU models with an approved baseline under {root}: {listing}. "
        "Run the benchmarks to write a candidate, review it, then approve it."
    )


def approve(
    candidate: str | os.PathLike[str],
    root: str | os.PathLike[str],
    force: bool = False,
    now: datetime | None = None,
) -> Approval:
    """Make ``candidate`` the approved baseline of its GPU model; keep the previous one in history/.

    Refuses (``BaselineError``) a candidate whose run was not clean — FAIL verdicts, failed tests,
    or no record of either — unless ``force``: a regressed run must never silently become the
    reference it is judged against.
    """
    cand = load_baseline(candidate)
    fails = cand.verdicts.get("FAIL", 0)
    if not force:
        if cand.clean is None:
            raise BaselineError(
                f"{candidate}: does not record whether its run was clean ('{SECTION}.clean'); "
                "refusing to approve (use force to override)"
            )
        if cand.clean is False or fails:
            raise BaselineError(
                f"{candidate}: its run was not clean (verdicts {cand.verdicts or 'n/a'}, "
                f"clean={cand.clean}); refusing to approve a regressed or failing run "
                "(use force to override)"
            )
    dest = approved_path(root, cand.fingerprint.gpu_slug)
    if dest.exists() and dest.resolve() == Path(candidate).resolve():
        raise BaselineError(f"{candidate} is already the approved baseline")
    stamp = _utc_stamp(now)
    previous = None
    if dest.exists():
        previous = _unique(dest.parent / HISTORY / f"approved-{stamp}.json")
        previous.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(dest, previous)  # copy, not move: dest stays valid until replaced atomically
    data = dict(cand.raw)
    section = dict(data[SECTION])
    section["approval"] = {"from": str(candidate), "at": stamp, "forced": bool(force)}
    data[SECTION] = section
    write_baseline(data, dest)
    return Approval(dest, previous)
