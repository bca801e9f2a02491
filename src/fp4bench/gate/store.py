"""Where baseline files live, and which one a run is judged against.

pytest-benchmark keys its storage by OS/Python and compares against "the latest" file, so a
regressed run silently becomes the next baseline; fp4bench does neither::

    baselines/<gpu_slug>/approved.json                 THE baseline for that GPU model (slim format)
    baselines/<gpu_slug>/units/<GPU UUID>.json         the same, recorded on that very GPU unit
    baselines/<gpu_slug>/candidates/<UTC time>.json    runs waiting for review (pytest-benchmark JSON)

A benchmark is judged by the baseline of its own unit when that unit's file holds it
(``select_baselines``, ``gate.choice``): another unit of the model offsets single benchmarks by
more than a unit's own window-to-window spread, so a model-level baseline from another unit is a
less sensitive fallback. A unit file that holds only part of the model-level benchmarks (a run
spread over several GPUs writes each unit its own share, ``gate.approve``) is not preferred as a
whole by ``select_baseline`` (it would leave the rest ungated).

``<gpu_slug>`` is derived from the GPU name and must be a plain ``a-z0-9-`` name, so nothing is
ever written outside the baselines root. Candidate names are reserved atomically (``O_EXCL``):
two runs started in the same second get two files, written through a visible
``<name>.partial-<pid>`` file moved into place.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import BaselineError, load_baseline
from fp4bench.outputs import OutputError, reserve as _reserve
from fp4bench.protected import GPU_UUID, protected

APPROVED = "approved.json"
CANDIDATES = "candidates"
UNITS = "units"
_UUID = GPU_UUID
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def utc_stamp(now: datetime | None = None) -> str:
    """``now`` (default: the current time) as ``YYYYmmddTHHMMSSZ`` in UTC: a candidate's name."""
    return (now or datetime.now(timezone.utc)).astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ")


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
    (``GPU-`` or a MIG instance's ``MIG-``, then hex digits), so it can never name a path outside
    the folder; a ``units`` folder that resolves outside the GPU folder (a symlink) is refused."""
    if not isinstance(uuid, str) or not _UUID.fullmatch(uuid):
        raise BaselineError(f"GPU UUID {uuid!r} is not of the form GPU-<hex digits> (or MIG-<hex digits>); "
                            "refusing to use it as a file name")
    d = gpu_dir(root, slug)
    units = d / UNITS
    if units.exists() and units.resolve().parent != d.resolve():
        raise BaselineError(f"{units} resolves to {units.resolve()}, outside the baseline folder {d}; refusing "
                            "to use it")
    return units / f"{uuid}.json"


def candidate_path(root: str | os.PathLike[str], slug: str, now: datetime | None = None) -> Path:
    """Reserve a fresh ``<root>/<slug>/candidates/<UTC time>[-i].json`` (created empty, so a
    second run started in the same second gets ``-1``); never the approved file."""
    return _unique(gpu_dir(root, slug) / CANDIDATES / f"{utc_stamp(now)}.json")


def reserve_path(path: str | os.PathLike[str], roots: Iterable[str | os.PathLike[str]] = ()) -> Path:
    """Reserve an explicitly named result file: it must end in ``.json``, must not exist (a run
    never overwrites a file: not a source file, not an earlier run) and must not be a protected
    file (``fp4bench.outputs.protected``: an ``approved.json``, a unit's baseline, anything under a
    baselines root ``roots`` but a new candidate; only ``approve`` writes those, keeping history)."""
    p = Path(path)
    try:
        guard = protected(p, roots)
    except OutputError as exc:
        raise BaselineError(str(exc)) from None
    if guard is not None and guard[1] != "candidate":
        raise BaselineError(f"{p}: is {guard[0]}; a run is never saved as one; save a candidate and use "
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
    if part.is_file() and part.stat().st_size > 0:
        os.replace(part, path)
        return True
    if part.is_file():
        part.unlink()  # pytest-benchmark failed before writing a byte
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
        f"no approved baseline for {fingerprint.model}: expected {p} (approved under {root}: {listing}); "
        "run the benchmarks to write a candidate, review it, approve it"
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
