"""Which baseline file judges each benchmark of a run, and with which policy.

A run that picks its baseline itself (``--benchmark-compare``) reads the GPU model's folder
``baselines/<gpu>/``: the model file ``approved.json`` and the unit file ``units/<UUID>.json`` of
each GPU the run measures on (``gate.store.select_baselines``). Every benchmark is judged with the
noise terms of the GPU it ran on (``gate.calibration``: its calibration file beside its unit
baseline, else the documented constants). A benchmark is judged against the
unit file of the GPU it ran on when that file holds it: the baseline of that very unit, at full
sensitivity. Otherwise it is judged against the *lead* file (the model file; the unit file when
the model has none), and ``unit.for_changes`` adds the unit-to-unit offset to the error term
when that file is from another or an unknown unit. An explicit ``--fp4-baseline-file FILE`` is the
only file.

The test that measures a benchmark (the only process, or an xdist worker) and the run's final
table (the same process, or the xdist controller) both ask ``Baselines.judging`` with the
benchmark's name and the fingerprint of the GPU it ran on: one function, so the in-test verdict
and the table judge the same windows against the same record with the same policy.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import Baseline
from fp4bench.gate.calibration import NoiseTerms, gpu_dir_of, noise_for
from fp4bench.gate.compatibility import check_compatible
from fp4bench.gate.policy import Policy
from fp4bench.gate.record import BenchmarkRecord
from fp4bench.gate.unit import for_changes


@dataclass(frozen=True)
class BaselineFile:
    """One baseline file of the run; ``unit``: the GPU UUID of a ``units/<UUID>.json`` file."""

    path: Path
    baseline: Baseline
    unit: str | None = None

    def label(self) -> str:
        return f"units/{self.path.name}" if self.unit else self.path.name


@dataclass(frozen=True)
class Judging:
    """What judges one benchmark: its baseline record (None: NEW), policy and file."""

    record: BenchmarkRecord | None
    policy: Policy
    file: BaselineFile


@dataclass(frozen=True)
class Baselines:
    """The run's baseline files: ``lead`` (sweep, availability, what is expected) and the unit
    files by GPU UUID."""

    lead: BaselineFile
    units: Mapping[str, BaselineFile] = field(default_factory=dict)
    #: the noise terms of each GPU of the run (``gate.calibration.noise_for``), read once
    _noise: dict = field(default_factory=dict, compare=False, repr=False)

    def noise(self, gpu_uuid: str | None) -> NoiseTerms:
        """The noise terms for a benchmark measured on ``gpu_uuid``: that unit's calibration
        file in the lead file's GPU folder, unit offsets measured between its units, else the
        constants."""
        if gpu_uuid not in self._noise:
            self._noise[gpu_uuid] = noise_for(gpu_dir_of(self.lead.path), gpu_uuid)
        return self._noise[gpu_uuid]

    @property
    def files(self) -> list[BaselineFile]:
        return [self.lead] + [f for f in self.units.values() if f.path != self.lead.path]

    def file_for(self, name: str, gpu_uuid: str | None) -> BaselineFile:
        unit = self.units.get(gpu_uuid) if gpu_uuid else None
        return unit if unit is not None and name in unit.baseline.benchmarks else self.lead

    def judging(self, name: str, current: Fingerprint, policy: Policy) -> Judging:
        """The record and policy that judge benchmark ``name`` measured on ``current``'s GPU.
        Raises ``IncompatibleBaseline`` when the file is of another GPU model."""
        f = self.file_for(name, current.gpu_uuid)
        base = f.baseline.fingerprint
        policy = dataclasses.replace(policy, noise=self.noise(current.gpu_uuid))
        return Judging(f.baseline.benchmarks.get(name),
                       for_changes(policy, check_compatible(base, current), base, current), f)

    def merged(self, ran_on: Mapping[str, Fingerprint], policy: Policy) -> tuple[Baseline, dict[str, Policy],
                                                                                  list[str]]:
        """What the run is judged against as a whole: one ``Baseline`` holding each benchmark's
        record (the measured ones as ``judging`` chooses them, the others from the lead file or,
        when only a unit file of the run has them, from it), the policy of each measured
        benchmark, and one header line per file used (``count`` benchmarks vs file)."""
        records = dict(self.lead.baseline.benchmarks)
        availability = dict(self.lead.baseline.availability)
        for f in self.units.values():
            for name, rec in f.baseline.benchmarks.items():
                records.setdefault(name, rec)
            availability.update(f.baseline.availability)
        policies: dict[str, Policy] = {}
        used: dict[Path, int] = {}
        on: dict[Path, set] = {}
        for name, fp in ran_on.items():
            j = self.judging(name, fp, policy)
            if j.record is not None:
                records[name] = j.record
                used[j.file.path] = used.get(j.file.path, 0) + 1
                on.setdefault(j.file.path, set()).add(fp.gpu_uuid)
            policies[name] = j.policy
        base = dataclasses.replace(self.lead.baseline, benchmarks=records, availability=availability)
        return base, policies, self.describe(used, ran_on, on)

    def describe(self, used: Mapping[Path, int], ran_on: Mapping[str, Fingerprint],
                 on: Mapping[Path, set] | None = None) -> list[str]:
        """``baselines: 12 benchmarks vs units/GPU-….json (that unit), 3 vs approved.json (...)``:
        "that unit" only when every benchmark a file judged ran on the unit that recorded it
        (``on``: the GPUs of the benchmarks each file judged)."""
        uuids = {fp.gpu_uuid for fp in ran_on.values()}
        if not used or (len(used) == 1 and not self.units and len(uuids) < 2):
            return []
        parts = []
        for f in self.files:
            n = used.get(f.path, 0)
            if not n:
                continue
            own = f.unit or f.baseline.fingerprint.gpu_uuid
            ran = (on or {}).get(f.path, uuids)
            why = "that unit" if own is not None and ran == {own} else "another or unknown unit: less sensitive"
            parts.append(f"{n} vs {f.label()} ({why})")
        return [f"baselines: {'; '.join(parts)}"]
