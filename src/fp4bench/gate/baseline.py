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
that were not clean (FAIL verdicts / failed tests / broken CUDA context), runs that drop benchmarks
of the baseline they replace or were timed another way (L2 mode, timer) unless forced, and a run
that measured test-only backends (``fp4bench.testing``) always. ``<gpu_slug>`` is derived from the GPU name and must be a plain
``a-z0-9-`` name, so nothing is ever written outside the baselines root. Candidate names are
reserved atomically (``O_EXCL``): two runs started in the same second get two files.
"""

from __future__ import annotations

import json
import math
import os
import re
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
    """Result of ``approve``: the new approved file, where the previous one was kept, and how
    coverage changed against it (benchmark fullnames)."""

    approved: Path
    previous: Path | None
    dropped: tuple[str, ...] = ()
    added: tuple[str, ...] = ()


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
        what = "is not a file" if p.exists() else "does not exist"
        raise BaselineError(f"baseline file {p} {what}")
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise BaselineError(f"baseline file {p} cannot be read: {e.strerror or e}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BaselineError(f"baseline file {p} is not valid JSON (corrupt?): {e}") from e
    except RecursionError:
        raise BaselineError(f"baseline file {p} nests JSON too deeply to be a baseline") from None
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
    sweep = _object(sec, "sweep", source)
    clean = sec.get("clean")
    if clean is not None and not isinstance(clean, bool):
        raise BaselineError(f"{source}: '{SECTION}.clean' must be true/false, got {clean!r}")
    verdicts = _object(sec, "verdicts", source)
    for k, v in verdicts.items():
        if not _is_number(v) or v < 0:
            raise BaselineError(f"{source}: '{SECTION}.verdicts[{k!r}]' must be a count, got {v!r}")
    return Baseline(fp, records, dict(avail), dict(sweep), clean, dict(verdicts), source, data)


def _object(sec: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    value = sec.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BaselineError(f"{source}: '{SECTION}.{key}' must be an object, got {type(value).__name__} "
                            f"{_short(value)}")
    return value


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(x: Any) -> bool:
    """A JSON number (``true``/``false`` are not: Python would read them as 1/0)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_extra(extra: dict[str, Any], fullname: str, source: str) -> None:
    """The ``extra_info`` values the gate computes with must have the types it expects."""
    where = f"{source}: benchmark {fullname!r} extra_info"
    nf = extra.get("noise_floor")
    if nf is not None and not (_is_number(nf) and math.isfinite(nf) and nf >= 0):
        raise BaselineError(f"{where}['noise_floor'] must be a relative number >= 0 (0.02 = 2 %), "
                            f"got {_short(nf)}")
    clk = extra.get("sm_clock_mhz")
    if clk is not None:
        vals = clk if isinstance(clk, list) else [clk]
        if not all(_is_number(v) and math.isfinite(v) for v in vals):
            raise BaselineError(f"{where}['sm_clock_mhz'] must be a number or a list of numbers (MHz), "
                                f"got {_short(clk)}")
    for key in ("kernels", "throttle_reasons"):
        v = extra.get(key)
        if v is not None and not (isinstance(v, list) or (key == "throttle_reasons" and isinstance(v, str))):
            raise BaselineError(f"{where}[{key!r}] must be a list of names, got {_short(v)}")


def check_samples(samples: Any, what: str) -> tuple[float, ...]:
    """Raw timings as seconds: numbers, finite and > 0 (``ValueError`` naming ``what`` otherwise).

    A time of 0 or below, NaN/Inf, or a boolean is a broken measurement, not a fast kernel; judged,
    it would make any slowdown look like a speed-up (or leave the ratio undefined)."""
    if not isinstance(samples, (list, tuple)) or not samples:
        raise ValueError(f"{what} has no raw samples")
    bad = [x for x in samples if not (_is_number(x) and math.isfinite(x) and x > 0)]
    if bad:
        raise ValueError(f"{what} has {len(bad)} invalid sample(s) (times must be finite numbers of "
                         f"seconds > 0), e.g. {bad[:3]}")
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
    try:
        samples = check_samples(data, f"{source}: benchmark {fullname!r}")
    except ValueError as e:
        raise BaselineError(str(e)) from None
    extra = b.get("extra_info") or {}
    if not isinstance(extra, dict):
        raise BaselineError(f"{source}: benchmark {fullname!r} extra_info is not an object")
    _check_extra(extra, fullname, source)
    return BenchmarkRecord(
        fullname=fullname,
        name=str(b.get("name") or fullname),
        samples=samples,
        extra_info=extra,
        stats={k: v for k, v in stats.items() if k != "data"},
        params=b.get("params"),
    )


# --- compatibility ----------------------------------------------------------------------------

#: ``sweep`` keys that say how the time was taken. Runs that differ in one measured different
#: things (a hot-L2 time is not a slower or faster cold-L2 time), so they are never compared.
MEASUREMENT_KEYS = ("l2", "timer")
#: ``sweep`` key naming the test-only backends a run measured (``{name: description}``): faults
#: or slowdown wrappers from ``fp4bench.testing``. Such a run tests the gate; it is never a baseline.
TEST_ONLY = "test_only"


def test_only_backends(sweep: dict[str, Any]) -> dict[str, Any]:
    """The run's test-only backends (``{}`` for a real run)."""
    v = sweep.get(TEST_ONLY) or {}
    return dict(v) if isinstance(v, dict) else {str(v): ""}


def _test_only_text(found: dict[str, Any]) -> str:
    return ", ".join(f"{k}: {v}" if v else k for k, v in sorted(found.items()))


def check_same_measurement(base_sweep: dict[str, Any], cur_sweep: dict[str, Any]) -> None:
    """Raise ``IncompatibleBaseline`` when the baseline was timed another way than this run, or
    is itself a run of test-only backends (a test of the gate, never a reference).

    A side that did not record a key (files written before it was recorded) is not checked."""
    found = test_only_backends(base_sweep)
    if found:
        raise IncompatibleBaseline(f"the baseline ran test-only backends ({_test_only_text(found)}); "
                                   "it is not a reference")
    for key in MEASUREMENT_KEYS:
        old, new = base_sweep.get(key), cur_sweep.get(key)
        if old is not None and new is not None and old != new:
            raise IncompatibleBaseline(f"the baseline was timed with {key}={old!r} but this run with "
                                       f"{key}={new!r}; times taken differently are not comparable "
                                       f"(re-run with the baseline's setting, or make a new baseline)")



def check_compatible(baseline_fp: Fingerprint, current_fp: Fingerprint) -> list[tuple[str, Any, Any]]:
    """Raise ``IncompatibleBaseline`` on a different GPU model; else what changed (key, old, new)."""
    if not baseline_fp.same_model(current_fp):
        raise IncompatibleBaseline(
            f"baseline is for {baseline_fp.model} but this run is on {current_fp.model}; "
            "timings are only comparable on the same GPU model"
        )
    return baseline_fp.differences(current_fp)


# --- storage ----------------------------------------------------------------------------------


_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def _utc_stamp(now: datetime | None = None) -> str:
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def _reserve(path: Path) -> bool:
    """Create ``path`` empty if no file has that name; atomic, so two runs never get one name."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _unique(path: Path) -> Path:
    """Reserve ``path`` or the first free ``<stem>-<i><suffix>`` next to it (created empty)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        for i in range(10_000):
            cand = path if i == 0 else path.with_name(f"{path.stem}-{i}{path.suffix}")
            if _reserve(cand):
                return cand
    except OSError as e:
        raise BaselineError(f"cannot create a file in {path.parent}: {e.strerror or e}") from None
    raise BaselineError(f"cannot find a free file name next to {path}")


def gpu_dir(root: str | os.PathLike[str], slug: str) -> Path:
    """``<root>/<slug>``, refusing a slug that is not a plain ``a-z0-9-`` name or a folder that
    resolves outside ``root`` (a symlink): baselines are only ever written under the root."""
    if not isinstance(slug, str) or not _SLUG.fullmatch(slug):
        raise BaselineError(f"GPU slug {slug!r} is not a plain name (a-z, 0-9, '-'); refusing to use it "
                            "as a baseline folder")
    d = Path(root) / slug
    if d.resolve().parent != Path(root).resolve():
        raise BaselineError(f"baseline folder {d} resolves to {d.resolve()}, outside the baseline root {root}")
    return d


def approved_path(root: str | os.PathLike[str], slug: str) -> Path:
    return gpu_dir(root, slug) / APPROVED


def candidate_path(root: str | os.PathLike[str], slug: str, now: datetime | None = None) -> Path:
    """Reserve a fresh ``<root>/<slug>/candidates/<UTC time>[-i].json`` (created empty, so a
    second run started in the same second gets ``-1``); never the approved file."""
    return _unique(gpu_dir(root, slug) / CANDIDATES / f"{_utc_stamp(now)}.json")


def reserve_path(path: str | os.PathLike[str]) -> Path:
    """Reserve an explicitly named result file: it must end in ``.json``, must not exist (a run
    never overwrites a file: not a source file, not an earlier run) and must not be named
    ``approved.json`` (only ``approve`` writes that, keeping history)."""
    p = Path(path)
    if p.name == APPROVED:
        raise BaselineError(f"{p}: a run is never saved as {APPROVED}; save a candidate and use "
                            "'fp4bench baseline approve' (it keeps the previous one in history/)")
    if p.suffix != ".json":
        raise BaselineError(f"{p}: a result file name must end in .json")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fresh = _reserve(p)
    except OSError as e:
        raise BaselineError(f"{p}: cannot create it: {e.strerror or e}") from None
    if not fresh:
        raise BaselineError(f"{p} already exists; a run never overwrites a file, choose a new name")
    return p


def partial_path(path: Path) -> Path:
    """Where a result is written before it is moved onto ``path`` in one ``os.replace``."""
    return path.with_name(f".{path.name}.partial")


def publish(path: Path) -> bool:
    """Move the finished ``partial_path(path)`` onto ``path`` (atomic); when nothing was written
    (no benchmark ran) remove the empty reservation. True when ``path`` now holds a result."""
    part = partial_path(path)
    if part.is_file():
        os.replace(part, path)
        return True
    if path.is_file() and path.stat().st_size > 0:  # written directly (beside a user's --benchmark-json)
        return True
    if path.is_file():
        path.unlink()
    return False


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


def _coverage_change(old: Baseline, new: Baseline) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(dropped, added) benchmark fullnames of ``new`` against ``old``."""
    return (tuple(sorted(set(old.benchmarks) - set(new.benchmarks))),
            tuple(sorted(set(new.benchmarks) - set(old.benchmarks))))


def _listing(names: tuple[str, ...], limit: int = 10) -> str:
    shown = "\n  ".join(names[:limit])
    more = f"\n  ... and {len(names) - limit} more" if len(names) > limit else ""
    return f"\n  {shown}{more}"


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
    reference it is judged against. Also unless ``force``: a candidate with fewer benchmarks than
    the baseline it replaces (a ``-k`` subset would silently shrink what is gated; the error lists
    them) or timed another way (L2 mode, timer). Never, even forced: a run that measured
    test-only backends (a test of the gate). The GPU folder comes from the fingerprint's GPU name.
    """
    cand = load_baseline(candidate)
    found = test_only_backends(cand.sweep)
    if found:
        raise BaselineError(f"{candidate}: its run measured test-only backends ({_test_only_text(found)}); "
                            "a test of the gate can never be approved, not even with force")
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
    dropped: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    if dest.exists():
        try:
            old = load_baseline(dest)
        except BaselineError as e:
            if not force:
                raise BaselineError(f"the approved baseline it would replace is unusable ({e}); "
                                    "use force to replace it") from None
        else:
            dropped, added = _coverage_change(old, cand)
            if not force:
                if dropped:
                    raise BaselineError(
                        f"{candidate}: has {len(cand.benchmarks)} benchmarks, {len(dropped)} of the "
                        f"{len(old.benchmarks)} in {dest} are not in it; approving would stop gating "
                        f"them (use force to shrink the baseline):{_listing(dropped)}")
                try:
                    check_same_measurement(old.sweep, cand.sweep)
                except IncompatibleBaseline as e:
                    raise BaselineError(f"{candidate}: replacing {dest}: {e} (use force)") from None
    stamp = _utc_stamp(now)
    previous = None
    if dest.exists():
        previous = _unique(dest.parent / HISTORY / f"approved-{stamp}.json")
        try:
            shutil.copy2(dest, previous)  # copy, not move: dest stays valid until replaced atomically
        except OSError as e:
            raise BaselineError(f"cannot keep the previous baseline in {previous}: {e.strerror or e}") from None
    data = dict(cand.raw)
    section = dict(data[SECTION])
    section["approval"] = {"from": str(candidate), "at": stamp, "forced": bool(force)}
    data[SECTION] = section
    write_baseline(data, dest)
    return Approval(dest, previous, dropped, added)
