"""Where baseline files live, and how a run becomes the approved baseline of its GPU model.

pytest-benchmark keys its storage by OS/Python and compares against "the latest" file, so a
regressed run silently becomes the next baseline; fp4bench does neither::

    baselines/<gpu_slug>/approved.json                 THE baseline for that GPU model (slim format)
    baselines/<gpu_slug>/units/<GPU UUID>.json         the same, recorded on that very GPU unit
    baselines/<gpu_slug>/candidates/<UTC time>.json    runs waiting for review (pytest-benchmark JSON)

A benchmark is judged by the baseline of its own unit when that unit's file holds it
(``select_baselines``, ``gate.choice``): another unit of the model offsets single benchmarks by
more than a unit's own window-to-window spread, so a model-level baseline from another unit is a
less sensitive fallback. ``approve`` writes both files when the run recorded its GPU UUID.

A run spread over several GPUs records, per benchmark, the UUID of the GPU that measured it
(``extra_info.gpu_uuid``). ``approve`` then writes one unit file per UUID holding exactly that
unit's benchmarks of this candidate (fingerprint ``gpu_uuid`` set to that unit), besides the
model-level file of all of them. The rule is *replace*: a unit file is rewritten from the
candidate, never merged with what it held. A benchmark that unit measured under an earlier
approval but not in this candidate (the sweep changed, or the partition put it on another GPU)
is dropped from its file, so no unit file keeps a time of an older stack; the model-level file
and the unit that measured it now still gate it. Units not in the candidate keep their files,
as a one-GPU approval leaves the other units' files. A unit file that holds only part of the
model-level benchmarks is not preferred as a whole by ``select_baseline`` (it would leave the
rest ungated).

Earlier approved baselines are in git's history of ``approved.json``. A candidate becomes the
baseline only through ``approve`` (an explicit act), which refuses runs that were not clean (FAIL
verdicts / failed tests / broken CUDA context), runs that drop benchmarks of the baseline they
replace or were timed another way (L2 mode, timer) unless forced, and a run that measured
test-only backends (``fp4bench.testing``) always. ``<gpu_slug>`` is derived from the GPU name and
must be a plain ``a-z0-9-`` name, so nothing is ever written outside the baselines root.
Candidate names are reserved atomically (``O_EXCL``): two runs started in the same second get two
files, written through a visible ``<name>.partial-<pid>`` file moved into place.
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import (SECTION, Baseline, BaselineError, IncompatibleBaseline, check_same_measurement,
                                    describe_test_only, load_baseline, test_only_backends, write_slim)
from fp4bench.gate.verdict import INVALID_FLAGS

APPROVED = "approved.json"
CANDIDATES = "candidates"
UNITS = "units"
_UUID = re.compile(r"GPU-[0-9A-Fa-f-]{8,64}")


@dataclass(frozen=True)
class Approval:
    """Result of ``approve``: the new approved file, how coverage changed against the file it
    replaced (benchmark fullnames), and the unit's own copy (None when the run recorded no GPU
    UUID)."""

    approved: Path
    dropped: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    #: an approved file was there before (False: the model's first approval)
    replaced: bool = False
    unit: Path | None = None
    #: every unit file written, with its benchmark count (one for a one-GPU run)
    units: tuple[tuple[Path, int], ...] = ()


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


def unit_path(root: str | os.PathLike[str], slug: str, uuid: str) -> Path:
    """``<root>/<slug>/units/<uuid>.json``; ``uuid`` must look like an NVML GPU UUID
    (``GPU-`` and hex digits), so it can never name a path outside the folder."""
    if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
        raise BaselineError(f"GPU UUID {uuid!r} is not of the form GPU-<hex digits>; refusing to use it as a "
                            "file name")
    return gpu_dir(root, slug) / UNITS / f"{uuid}.json"


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
                            "'fp4bench baseline approve'")
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
    from fp4bench.outputs import temp_path

    return temp_path(path)


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


def _covers(unit: Path, approved: Path) -> bool:
    """The unit file holds every benchmark of the model-level file (a multi-GPU approval writes
    each unit only its own share); an unreadable file does not cover (the model file is read)."""
    if not approved.is_file():
        return True
    try:
        return set(load_baseline(approved).benchmarks) <= set(load_baseline(unit).benchmarks)
    except BaselineError:
        return False


def select_baseline(root: str | os.PathLike[str], fingerprint: Fingerprint) -> Path:
    """The approved baseline of this very GPU unit when there is one holding every benchmark of
    the model's approved baseline, else the approved baseline of this GPU model — never "the
    newest file"."""
    p = approved_path(root, fingerprint.gpu_slug)
    if fingerprint.gpu_uuid and _UUID.fullmatch(fingerprint.gpu_uuid):
        own = unit_path(root, fingerprint.gpu_slug, fingerprint.gpu_uuid)
        if own.is_file() and _covers(own, p):
            return own
    if p.is_file():
        return p
    have = available_models(root)
    listing = ", ".join(have) if have else "none"
    raise BaselineError(
        f"no approved baseline for {fingerprint.model}: expected {p}. "
        f"GPU models with an approved baseline under {root}: {listing}. "
        "Run the benchmarks to write a candidate, review it, then approve it."
    )


def select_baselines(root: str | os.PathLike[str], fingerprint: Fingerprint, uuids: Iterable[str | None] = ()):
    """The run's baseline files (``gate.choice.Baselines``): the GPU model's ``approved.json``
    leads, and each GPU of ``uuids`` (and ``fingerprint.gpu_uuid``) with a unit file judges the
    benchmarks that ran on it. Without ``approved.json`` the first unit file leads; with neither,
    ``BaselineError`` as ``select_baseline``."""
    from fp4bench.gate.choice import BaselineFile, Baselines

    units: dict[str, BaselineFile] = {}
    for uuid in [*uuids, fingerprint.gpu_uuid]:  # the run's GPUs in order: every process picks one lead
        if uuid and uuid not in units and _UUID.fullmatch(uuid):
            p = unit_path(root, fingerprint.gpu_slug, uuid)
            if p.is_file():
                units[uuid] = BaselineFile(p, load_baseline(p), unit=uuid)
    model = approved_path(root, fingerprint.gpu_slug)
    if model.is_file():
        return Baselines(BaselineFile(model, load_baseline(model)), units)
    if units:
        return Baselines(next(iter(units.values())), units)
    return Baselines(BaselineFile(model, load_baseline(select_baseline(root, fingerprint))), units)


def approve(
    candidate: str | os.PathLike[str],
    root: str | os.PathLike[str],
    force: bool = False,
    now: datetime | None = None,
) -> Approval:
    """Make ``candidate`` (a run's pytest-benchmark JSON, or a slim file) the approved baseline of its
    GPU model, written in the slim format; the file it replaces is what git has.

    Refuses (``BaselineError``) a candidate whose run was not clean — FAIL verdicts, failed tests,
    or no record of either — unless ``force``: a regressed run must never silently become the
    reference it is judged against. Also unless ``force``: a candidate with fewer benchmarks than
    the baseline it replaces (a ``-k`` subset would silently shrink what is gated; the error lists
    them), timed another way (L2 mode, timer), of another compute capability than the baseline
    it replaces (the same GPU name on another architecture), or with benchmarks whose timing the
    gate calls INVALID (``clock_anomaly``/``invalid``: every later comparison of them is INVALID,
    so they would stay ungated). Never, even forced: a run that measured test-only backends (a test
    of the gate), or one whose every benchmark is INVALID (a baseline that judges nothing). The
    GPU folder comes from the fingerprint's GPU name.
    """
    cand = load_baseline(candidate)
    found = test_only_backends(cand.sweep)
    if found:
        raise BaselineError(f"{candidate}: its run measured test-only backends ({describe_test_only(found)}); "
                            "a test of the gate can never be approved, not even with --force")
    invalid = [n for n, r in cand.benchmarks.items() if any(r.extra_info.get(k) for k in INVALID_FLAGS)]
    if invalid and len(invalid) == len(cand.benchmarks):
        raise BaselineError(f"{candidate}: every one of its {len(invalid)} benchmarks is flagged "
                            f"{'/'.join(INVALID_FLAGS)} (timings the gate does not judge); a baseline of them "
                            "would judge nothing, so it can never be approved, not even with --force")
    fails = cand.verdicts.get("FAIL", 0)
    if not force:
        if invalid:
            raise BaselineError(f"{candidate}: {len(invalid)} of its {len(cand.benchmarks)} benchmarks are flagged "
                                f"{'/'.join(INVALID_FLAGS)}; the gate would never judge them against this "
                                f"baseline (re-measure, or --force to approve the rest):{_listing(tuple(invalid))}")
        if cand.clean is None:
            raise BaselineError(
                f"{candidate}: does not record whether its run was clean ('{SECTION}.clean'); "
                "refusing to approve (--force to override)"
            )
        if cand.clean is False or fails:
            raise BaselineError(
                f"{candidate}: its run was not clean (verdicts {cand.verdicts or 'n/a'}, "
                f"clean={cand.clean}); refusing to approve a regressed or failing run "
                "(--force to override)"
            )
    dest = approved_path(root, cand.fingerprint.gpu_slug)
    if dest.exists() and dest.resolve() == Path(candidate).resolve():
        raise BaselineError(f"{candidate} is already the approved baseline")
    dropped: tuple[str, ...] = ()
    added: tuple[str, ...] = ()
    replaced = dest.exists()
    if dest.exists():
        try:
            old = load_baseline(dest)
        except BaselineError as e:
            if not force:
                raise BaselineError(f"the approved baseline it would replace is unusable ({e}); "
                                    "--force to replace it") from None
        else:
            dropped, added = _coverage_change(old, cand)
            if not force:
                if dropped:
                    raise BaselineError(
                        f"{candidate}: has {len(cand.benchmarks)} benchmarks, {len(dropped)} of the "
                        f"{len(old.benchmarks)} in {dest} are not in it; approving would stop gating "
                        f"them (--force to shrink the baseline):{_listing(dropped)}")
                try:
                    check_same_measurement(old.sweep, cand.sweep)
                except IncompatibleBaseline as e:
                    raise BaselineError(f"{candidate}: replacing {dest}: {e} (--force to override)") from None
                cc_old, cc_new = old.fingerprint.compute_capability, cand.fingerprint.compute_capability
                if cc_old != cc_new:
                    raise BaselineError(f"{candidate}: replacing {dest}: its run is compute capability {cc_new}, "
                                        f"the approved baseline {cc_old} (same GPU name, another architecture); "
                                        "--force to override")
    approved = dataclasses.replace(cand, source=str(dest),
                                   approval={"from": str(candidate), "at": _utc_stamp(now), "forced": bool(force)})
    shares = unit_shares(cand)
    paths = {uuid: unit_path(root, cand.fingerprint.gpu_slug, uuid) for uuid in shares}  # every UUID checked first
    write_slim(approved, dest)
    units = []
    for uuid, names in shares.items():
        fp = dataclasses.replace(cand.fingerprint, gpu_uuid=uuid)
        own = dataclasses.replace(approved, fingerprint=fp, source=str(paths[uuid]),
                                  benchmarks={n: cand.benchmarks[n] for n in names})
        write_slim(own, paths[uuid])
        units.append((paths[uuid], len(names)))
    unit = units[0][0] if len(units) == 1 else None
    return Approval(dest, dropped, added, replaced, unit, tuple(units))


def unit_shares(cand: Baseline) -> dict[str, list[str]]:
    """``{GPU UUID: benchmark fullnames}``: each benchmark under the ``extra_info.gpu_uuid`` it was
    measured on, else the run's own ``fingerprint.gpu_uuid`` (a one-GPU run: every benchmark under
    it); a benchmark with neither is in no unit's file."""
    out: dict[str, list[str]] = {}
    for name, rec in sorted(cand.benchmarks.items()):
        uuid = rec.extra_info.get("gpu_uuid") or cand.fingerprint.gpu_uuid
        if uuid:
            out.setdefault(str(uuid), []).append(name)
    return out


def migrate(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Rewrite a baseline file (either format) in the slim format at ``out`` (default: in place).
    Nothing is judged: the same samples, availability and approval record, without the keys no
    reader uses."""
    return write_slim(load_baseline(path), out if out is not None else path)
