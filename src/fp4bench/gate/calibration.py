"""The noise terms the gate's rule uses, per benchmark class, and the per-unit file that holds them.

``fp4bench calibrate`` (``run.calibrate``) measures, on one GPU unit and through the run code
(``CaseRunner`` in this process and in fresh worker processes), how a benchmark's window median
moves (all sd of log time, 0.01 = 1 %):

* ``within``: the standard error of one window's median (samples of one window);
* ``window``: between windows re-made back to back in one placement (``CaseRunner.release``);
* ``placement``: between windows in fresh placement sets of one process (``run.windows``: every
  window of a run is one) — the spread the rule's windows show it;
* ``process``: what windows of one process share beyond that (its CUDA context, clock and memory
  state): the between-process spread of process means less the placement spread they average;
* ``drift``: the shift from the first to the last pass of the calibration, per window.

and stores them next to the unit's baseline: ``baselines/<gpu>/units/<UUID>.calibration.json``
(``calibration_path``). ``NoiseTerms`` turns them into the rule's terms per class (``dense`` µs
rows, ``grouped``, ``moe``): ``prior_sigma`` (between-window spread assumed before data: the
placement and drift terms), ``run_sigma`` (the process term, shared by every window of one run,
in the error of every stored-gate comparison) and ``unit_sigma`` (the offset of another unit, used
only against a baseline from another unit). Without a file the documented constants below judge
(``FALLBACK``), and the verdict header says which was used (``NoiseTerms.source``).

Another unit's offset (``unit_sigma``) comes from measured offsets between units: the per-unit
baseline files (``units/<UUID>.json``) and calibration files of two or more units of the model in
the folder (``unit_terms``), else from the constants.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

CLASSES = ("dense", "grouped", "moe")
FORMAT = "fp4bench-calibration"
SCHEMA = 1
SUFFIX = ".calibration.json"

#: the between-window spread assumed before data, per class. dense and grouped: 0.6 %
#: (``rule.RuleSettings.prior_sigma``; dense rows moved 0.16-0.71 % between placement sets with
#: 4-15 copies, grouped bf16 rows 0.04-0.42 %, runs 23-24; the torch-fp8 grouped rows' 1.3 % drift is
#: more, and their own windows show it). moe: 0.3 %, 1.5 times the 0.20 % the W4A16 MoE row
#: moved between relocations (run 23, re-made and cloned alike)
PRIOR_SIGMA = {"dense": 0.006, "grouped": 0.006, "moe": 0.003}
#: the process term when no calibration says it. Bounded by the same-unit one-window A/A of
#: docs/results-h200.md (run 11, 406 benchmarks, two processes minutes apart: median |Δ| 0.17 %,
#: so sd(Δ) = 0.17 / 0.674 = 0.25 %, which holds two process terms and two windows): at most
#: 0.25 / sqrt(2) = 0.18 %
RUN_SIGMA = 0.0018
#: another unit's offset per class when no two units were measured. dense: µs rows moved +3.5 %,
#: +3.7 %, +3.8 %, +4.2 % between leases (runs 5-9) while run 9 (418 benchmarks) had median |Δ|
#: 0.55 %: a spread of 2 % keeps a 4.2 % offset within about 2 sd. grouped: not measured apart
#: from the dense rows, half of it. moe: the 400 MoE tactics of run 9 (median Δ -0.02 %, max
#: |Δ| of the run 2.07 %): 0.6 %
UNIT_SIGMA = {"dense": 0.02, "grouped": 0.01, "moe": 0.006}


def class_of(extra_info: Mapping[str, Any] | None) -> str:
    """A benchmark's class from its ``extra_info['kind']``: ``grouped``, ``moe``, else ``dense``
    (dense, end-to-end and quantizer rows are µs single calls)."""
    kind = (extra_info or {}).get("kind")
    return kind if kind in ("grouped", "moe") else "dense"


@dataclass(frozen=True)
class ClassTerms:
    """The rule's terms of one class (sd of log time)."""

    prior_sigma: float = PRIOR_SIGMA["dense"]
    run_sigma: float = RUN_SIGMA
    unit_sigma: float = UNIT_SIGMA["dense"]

    def __post_init__(self) -> None:
        for name in ("prior_sigma", "run_sigma", "unit_sigma"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
                raise ValueError(f"noise term {name} must be a finite sd of log time in [0, 1), got {v!r}")


@dataclass(frozen=True)
class NoiseTerms:
    """The terms per class and where they came from (said in the verdict header)."""

    classes: tuple[tuple[str, ClassTerms], ...]
    source: str = "built-in constants (no calibration of this unit: fp4bench calibrate)"
    unit_source: str = "built-in constants (no offsets between units measured)"
    calibrated: bool = False

    def of(self, cls: str) -> ClassTerms:
        for name, terms in self.classes:
            if name == cls:
                return terms
        raise KeyError(f"no noise terms for benchmark class {cls!r} (classes: {', '.join(CLASSES)})")

    def with_units(self, units: Mapping[str, float], source: str) -> NoiseTerms:
        """These terms with the measured unit offsets of the classes in ``units``."""
        classes = tuple((c, replace(t, unit_sigma=units[c]) if c in units else t) for c, t in self.classes)
        return replace(self, classes=classes, unit_source=source)

    def header(self) -> str:
        return f"noise terms: {self.source}; unit offsets: {self.unit_source}"


FALLBACK = NoiseTerms(tuple((c, ClassTerms(prior_sigma=PRIOR_SIGMA[c], unit_sigma=UNIT_SIGMA[c])) for c in CLASSES))


@dataclass(frozen=True)
class Calibration:
    """One unit's calibration file: the measured terms per class and per benchmark."""

    unit: str
    gpu_slug: str
    at: str
    #: class -> {"within", "window", "placement", "process", "drift", "benchmarks"}
    classes: Mapping[str, Mapping[str, float]]
    #: benchmark -> {"class", "median_s", the terms, "smallest_fail_pct"}
    benchmarks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    #: how it was measured: processes, windows, wall seconds, budget, fingerprint
    run: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "schema": SCHEMA, "unit": self.unit, "gpu_slug": self.gpu_slug, "at": self.at,
                "run": dict(self.run), "classes": {c: dict(v) for c, v in self.classes.items()},
                "benchmarks": {n: dict(v) for n, v in sorted(self.benchmarks.items())}}

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"

    def terms(self, label: str) -> NoiseTerms:
        """The rule's terms: a measured class replaces the constants of that class (prior: the
        placement and drift spread of a window, at least the window spread; run: the process
        term); an unmeasured class keeps them."""
        out = []
        for c in CLASSES:
            t = FALLBACK.of(c)
            m = self.classes.get(c)
            if m:
                prior = math.hypot(max(m["placement"], m["window"]), m.get("drift", 0.0))
                t = replace(t, prior_sigma=max(prior, 1e-4), run_sigma=m["process"])
            out.append((c, t))
        return NoiseTerms(tuple(out), source=f"{label} ({self.at}; classes {', '.join(sorted(self.classes))})",
                          calibrated=True)


def calibration_path(gpu_dir: str | Path, uuid: str) -> Path:
    """``<gpu_dir>/units/<uuid>.calibration.json`` (next to the unit's baseline)."""
    return Path(gpu_dir) / "units" / f"{uuid}{SUFFIX}"


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration file; ``ValueError`` naming the file and what is wrong."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"calibration file {p}: cannot read it: {exc}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"calibration file {p}: not an fp4bench calibration (format {FORMAT!r} expected)")
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"calibration file {p}: schema {doc.get('schema')!r}, this fp4bench reads {SCHEMA}: "
                         "upgrade fp4bench or calibrate again")
    classes = doc.get("classes")
    if not isinstance(classes, dict) or not set(classes) <= set(CLASSES):
        raise ValueError(f"calibration file {p}: 'classes' must map some of {', '.join(CLASSES)} to terms")
    for c, m in classes.items():
        for key in ("within", "window", "placement", "process", "drift"):
            v = m.get(key) if isinstance(m, dict) else None
            if not (isinstance(v, (int, float)) and math.isfinite(v) and 0 <= v < 1):
                raise ValueError(f"calibration file {p}: classes.{c}.{key} must be a sd of log time in [0, 1), "
                                 f"got {v!r}")
    return Calibration(str(doc.get("unit")), str(doc.get("gpu_slug")), str(doc.get("at")), classes,
                       doc.get("benchmarks") or {}, doc.get("run") or {})


def gpu_dir_of(baseline_path: str | Path) -> Path:
    """The GPU model's folder of a baseline file: ``<dir>`` for ``<dir>/approved.json`` and any
    other file, ``<dir>`` for ``<dir>/units/<UUID>.json``."""
    p = Path(baseline_path).resolve().parent
    return p.parent if p.name == "units" else p


def unit_medians(gpu_dir: str | Path) -> dict[str, dict[str, tuple[str, float]]]:
    """Per unit of the folder: benchmark -> (class, median seconds), from its per-unit baseline
    (``units/<UUID>.json``) and its calibration file (the baseline wins where both hold one)."""
    from fp4bench.gate.baseline import BaselineError, load_baseline

    out: dict[str, dict[str, tuple[str, float]]] = {}
    units = Path(gpu_dir) / "units"
    if not units.is_dir():
        return out
    for f in sorted(units.glob(f"*{SUFFIX}")):
        try:
            cal = load_calibration(f)
        except ValueError:
            continue
        out.setdefault(f.name[: -len(SUFFIX)], {}).update(
            {n: (b["class"], float(b["median_s"])) for n, b in cal.benchmarks.items() if b.get("median_s")})
    for f in sorted(units.glob("*.json")):
        if f.name.endswith(SUFFIX):
            continue
        try:
            base = load_baseline(f)
        except (BaselineError, ValueError):
            continue
        out.setdefault(f.stem, {}).update({n: (class_of(r.extra_info), r.median) for n, r in base.benchmarks.items()})
    return out


#: benchmarks of a class two units must share for their offsets to stand for that class
MIN_SHARED = 5


def unit_terms(medians: Mapping[str, Mapping[str, tuple[str, float]]]) -> dict[str, float]:
    """Another unit's offset per class from the medians of two or more units: for every pair of
    units and every benchmark both hold, d = log(median of one / median of the other), which is
    the difference of two unit offsets (variance 2 sd²). The sd is the larger of the rms and the
    95th percentile of |d| / 1.96 (heavy tails: a few µs rows move 4 % while most move 0.5 %),
    over sqrt(2). A class with fewer than ``MIN_SHARED`` shared benchmarks is left out."""
    units = sorted(medians)
    by_class: dict[str, list[float]] = {}
    for i, a in enumerate(units):
        for b in units[i + 1:]:
            for name in sorted(set(medians[a]) & set(medians[b])):
                cls, ma = medians[a][name]
                mb = medians[b][name][1]
                if ma > 0 and mb > 0:
                    by_class.setdefault(cls, []).append(math.log(ma / mb))
    out = {}
    for cls, d in by_class.items():
        if len(d) < MIN_SHARED:
            continue
        x = np.abs(np.asarray(d))
        out[cls] = float(max(np.sqrt(np.mean(x ** 2)), np.percentile(x, 95) / 1.96) / math.sqrt(2))
    return out


def noise_for(gpu_dir: str | Path | None, uuid: str | None) -> NoiseTerms:
    """The terms for a run on unit ``uuid`` judged against baselines of ``gpu_dir``: the unit's
    calibration file when there is one (else the constants), with unit offsets measured between
    the folder's units when two or more have files. An unreadable calibration file is an error."""
    terms = FALLBACK
    if gpu_dir is None:
        return terms
    if uuid:
        p = calibration_path(gpu_dir, uuid)
        if p.is_file():
            terms = load_calibration(p).terms(f"units/{p.name}")
    medians = unit_medians(gpu_dir)
    measured = unit_terms(medians)
    if measured:
        terms = terms.with_units(measured, f"measured between {len(medians)} units ({', '.join(sorted(measured))}); "
                                           "other classes: built-in constants")
    return terms


def describe_classes(terms: NoiseTerms) -> Iterable[str]:
    for c, t in terms.classes:
        yield (f"{c}: window ±{t.prior_sigma * 100:.2f}%, run ±{t.run_sigma * 100:.2f}%, "
               f"another unit ±{t.unit_sigma * 100:.2f}%")
