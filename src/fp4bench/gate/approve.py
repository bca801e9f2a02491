"""How a run becomes the approved baseline of its GPU model: ``fp4bench baseline approve``.

A candidate becomes the baseline only through ``approve`` (an explicit act), which refuses runs
that were not clean (FAIL verdicts / failed tests / broken CUDA context), runs that drop
benchmarks of the baseline they replace or were timed another way (L2 mode, timer) unless
forced, and a run that measured test-only backends (``fp4bench.testing``) always. It writes the
slim format (``gate.slim``) to ``approved.json`` and to the unit files (``gate.store``); earlier
approved baselines are in git's history of ``approved.json``.

An approval is one transaction (``gate.transaction``): every file it changes is written to a
temporary first and all are moved into place only when all are written; a failure restores what
was there, so on any failure nothing changed. Approvals of one GPU folder take turns on a lock.

A run spread over several GPUs records, per benchmark, the UUID of the GPU that measured it
(``extra_info.gpu_uuid``). ``approve`` then writes one unit file per UUID holding exactly that
unit's benchmarks of this candidate (fingerprint ``gpu_uuid`` set to that unit), besides the
model-level file of all of them. The rule is *replace*: a unit file is rewritten from the
candidate, never merged with what it held. A benchmark that unit measured under an earlier
approval but not in this candidate (the sweep changed, or the partition put it on another GPU)
is dropped from its file, so no unit file keeps a time of an older stack; the model-level file
and the unit that measured it now still gate it. Units not in the candidate keep their files,
as a one-GPU approval leaves the other units' files.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from fp4bench.gate.baseline import SECTION, Baseline, BaselineError, load_baseline
from fp4bench.gate.compatibility import (IncompatibleBaseline, check_same_measurement, describe_test_only,
                                         test_only_backends)
from fp4bench.gate.drift import DriftSettings, check_drift
from fp4bench.gate.record import INVALID_FLAGS
from fp4bench.gate.slim import slim_document
from fp4bench.gate.store import approved_path, unit_path, utc_stamp
from fp4bench.gate.transaction import approval_transaction


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


def _coverage_change(old: Baseline, new: Baseline) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(dropped, added) benchmark fullnames of ``new`` against ``old``."""
    return (tuple(sorted(set(old.benchmarks) - set(new.benchmarks))),
            tuple(sorted(set(new.benchmarks) - set(old.benchmarks))))


def _listing(names: tuple[str, ...], limit: int = 10) -> str:
    shown = "\n  ".join(names[:limit])
    more = f"\n  ... and {len(names) - limit} more" if len(names) > limit else ""
    return f"\n  {shown}{more}"


def approve(
    candidate: str | os.PathLike[str],
    root: str | os.PathLike[str],
    force: bool = False,
    now: datetime | None = None,
    drift: DriftSettings | None = None,
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
    GPU folder comes from the fingerprint's GPU name. With ``drift``: also refused (not bypassed
    by ``force``), a cumulative slowdown since the anchor approval beyond its floor, unless it
    accepts it, which the approval record then says (``gate.drift``).
    """
    cand = load_baseline(candidate)
    found = test_only_backends(cand.sweep)
    if found:
        raise BaselineError(f"{candidate}: its run measured test-only backends ({describe_test_only(found)}); "
                            "a test of the gate can never be approved, not even with --force")
    invalid = [n for n, r in cand.benchmarks.items() if any(r.extra_info.get(k) for k in INVALID_FLAGS)]
    if invalid and len(invalid) == len(cand.benchmarks):
        raise BaselineError(f"{candidate}: every one of its {len(invalid)} benchmarks is flagged "
                            f"{'/'.join(INVALID_FLAGS)}: a baseline of them would judge nothing (never approved, not even "
                            "with --force)")
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
    with approval_transaction(root, dest.parent) as transaction:  # one approval of this GPU folder at a time
        return _approve(candidate, cand, root, dest, force, now, transaction, drift)


def _approve(candidate, cand: Baseline, root, dest: Path, force: bool, now: datetime | None,
             transaction, drift: DriftSettings | None) -> Approval:
    """``approve`` once the candidate itself is accepted, holding the GPU folder's lock."""
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
    decided = check_drift(cand, dest, drift) if drift is not None else {}
    approved = dataclasses.replace(cand, source=str(dest),
                                   approval={"from": str(candidate), "at": utc_stamp(now), "forced": bool(force),
                                             **decided})
    shares = unit_shares(cand)
    paths = {uuid: unit_path(root, cand.fingerprint.gpu_slug, uuid) for uuid in shares}  # every UUID checked first
    transaction.add(dest, slim_document(approved, dest))
    units = []
    for uuid, names in shares.items():
        fp = dataclasses.replace(cand.fingerprint, gpu_uuid=uuid)
        own = dataclasses.replace(approved, fingerprint=fp, source=str(paths[uuid]),
                                  benchmarks={n: cand.benchmarks[n] for n in names})
        transaction.add(paths[uuid], slim_document(own, paths[uuid]))
        units.append((paths[uuid], len(names)))
    transaction.commit()  # every file or none
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


def migrate(path: str | os.PathLike[str], out: str | os.PathLike[str]) -> Path | None:
    """Write a baseline file (either format) in the slim format to ``out`` (``-``: standard output;
    None returned), never to ``path`` itself. Nothing is judged: the same samples, availability
    and approval record, without the keys no reader uses."""
    from fp4bench.outputs import write_document

    if Path(path).resolve() == Path(out).resolve():
        raise BaselineError(f"{path}: migrate never rewrites the file it reads; name a new file with --out")
    return write_document(out, slim_document(load_baseline(path), out))
