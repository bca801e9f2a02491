"""``fp4bench calibrate``: this unit's noise terms per benchmark class, measured through the run code.

``processes`` worker processes (``run.worker``: each builds its ``CaseRunner`` from the same
settings, as ``--fp4-isolate`` and ``fp4bench ab`` do), one after the other on this GPU. Each takes
``windows`` interleaved passes over a few benchmarks of each class (``pick``), every window one
``run`` of the case (check and time, ``CaseRunner.run``) after a release of its memory:

* pass 1 and pass 2 re-make the operands in the same placement (a release, nothing else): their
  difference is the **window** term;
* passes 3.. each take a fresh placement set (``CaseRunner.new_placement``, as every further
  window of a gated run does): the spread of passes 1, 3, 4, ... is the **placement** term;
* the spread of the process means over those windows, less the placement term they average, is
  the **process** term (what a run's windows share; the rule's ``run_sigma``);
* the samples of each window give the **within** term (standard error of its median);
* the mean change from the first pass to the last, per class, is the **drift** over a run.

Spreads pool the benchmarks of a class (sums of squares over their degrees of freedom) and are
stored as their 90 % upper confidence bound (chi-square): a short calibration does not claim a
spread smaller than it showed. The run stops taking passes when ``budget_s`` is spent (a class
needs 3 windows in 2 processes to be measured). ``gate.calibration`` turns the file into the rule's
terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from fp4bench import clock
from fp4bench.gate import rule
from fp4bench.gate.calibration import CLASSES, Calibration, class_of
from fp4bench.run.worker import protocol
from fp4bench.run.worker.pool import WorkerLost, WorkerSpec, spawn

#: windows (in one process) and processes a class needs to be measured
MIN_WINDOWS, MIN_PROCESSES = 3, 2


@dataclass
class Measured:
    """One benchmark's windows: ``log_medians[process][window]`` and the within-window errors."""

    name: str
    cls: str
    log_medians: list[list[float]] = field(default_factory=list)
    within: list[float] = field(default_factory=list)


def pick(cases: Sequence[Mapping[str, Any]], per_class: int) -> list[Mapping[str, Any]]:
    """Up to ``per_class`` listed cases of each class, spread evenly over the class's cases in
    sweep order (small and large problems alike); skipped cases are left out."""
    out = []
    for cls in CLASSES:
        mine = [c for c in cases if not c.get("skip_reason") and class_of({"kind": c["case"]["problem"]["kind"]}) == cls]
        if mine:
            idx = sorted({round(i * (len(mine) - 1) / max(1, per_class - 1)) for i in range(min(per_class, len(mine)))})
            out += [mine[i] for i in idx]
    return out


def _upper(ss: float, df: int) -> float:
    """The 90 % upper confidence bound of a spread from its sum of squares and degrees of freedom."""
    if df <= 0:
        return math.nan
    from scipy import stats

    return math.sqrt(ss / stats.chi2.ppf(0.10, df))


def _se_of_median(samples: Sequence[float]) -> float:
    x = np.log(np.asarray(samples, dtype=float))
    mad = float(np.median(np.abs(x - np.median(x))))
    return 1.2533 * 1.4826 * mad / math.sqrt(len(x))


def terms(measured: Sequence[Measured]) -> dict[str, dict[str, float]]:
    """Per class: within, window, placement, process, drift (sd of log time) and counts, from
    benchmarks measured in >= MIN_PROCESSES processes with >= MIN_WINDOWS windows each."""
    out = {}
    for cls in CLASSES:
        mine = [m for m in measured if m.cls == cls]
        ss = {"window": 0.0, "placement": 0.0, "process": 0.0}
        df = {"window": 0, "placement": 0, "process": 0}
        within, drift, used = [], [], 0
        n_place = []
        for m in mine:
            procs = [w for w in m.log_medians if len(w) >= MIN_WINDOWS]
            if len(procs) < MIN_PROCESSES:
                continue
            used += 1
            within += m.within
            means = []
            for w in procs:
                ss["window"] += (w[1] - w[0]) ** 2 / 2
                df["window"] += 1
                fresh = np.array([w[0], *w[2:]])  # pass 2 re-made pass 1's placement
                ss["placement"] += float(((fresh - fresh.mean()) ** 2).sum())
                df["placement"] += fresh.size - 1
                n_place.append(fresh.size)
                means.append(float(fresh.mean()))
                drift.append(w[-1] - w[0])
            means_a = np.array(means)
            ss["process"] += float(((means_a - means_a.mean()) ** 2).sum())
            df["process"] += means_a.size - 1
        if not used:
            continue
        window, placement = _upper(ss["window"], df["window"]), _upper(ss["placement"], df["placement"])
        between = ss["process"] / df["process"]  # variance of a process mean: process² + placement² / n
        process = math.sqrt(max(0.0, between - (ss["placement"] / df["placement"]) / float(np.mean(n_place))))
        process_upper = _upper(max(process, 1e-6) ** 2 * df["process"], df["process"])
        out[cls] = {"within": float(np.median(within)), "window": window, "placement": placement,
                    "process": process_upper, "process_estimate": process,
                    "drift": abs(float(np.mean(drift))) if drift else 0.0, "benchmarks": used,
                    "processes": max(len(m.log_medians) for m in mine)}
    return out


def smallest_fail(cal: Calibration, cls: str, floor: float, base_windows: int, max_windows: int) -> float:
    """The smallest slowdown the stored gate can FAIL on a benchmark of ``cls`` with this file,
    at the default budget (``base_windows`` baseline windows, up to ``max_windows`` new)."""
    from fp4bench.gate.policy import Policy

    policy = Policy(floor=floor, noise=cal.terms("this calibration"))
    s = policy.rule_settings(cls)
    return rule.smallest_fail(s, s.prior_sigma, base_windows, max_windows)


def calibrate(spec: WorkerSpec, sweep: Mapping[str, Any], *, processes: int = 3, windows: int = 4,
              per_class: int = 4, budget_s: float = 300.0,
              progress: Callable[[str], None] = lambda line: None,
              check_device: Callable[[Mapping[str, Any]], None] = lambda fingerprint: None) -> tuple[list[Measured], dict[str, Any]]:
    """Measure: ``processes`` workers of ``spec`` one after the other, ``windows`` passes each over
    the cases ``pick`` chooses from ``sweep`` (``SweepOptions.to_dict()``); each window is as many
    samples as ``spec``'s timing settings take. Returns what was
    measured and the run's facts (fingerprint, wall seconds, passes, processes, cases).
    ``check_device(fingerprint)`` is asked once the first worker is up; it raises ``ValueError``
    to refuse the device before anything is measured."""
    if processes < MIN_PROCESSES or windows < MIN_WINDOWS:
        raise ValueError(f"calibration needs at least {MIN_PROCESSES} processes and {MIN_WINDOWS} windows, got "
                         f"{processes} and {windows}")
    t0 = clock.now()
    measured: dict[str, Measured] = {}
    fingerprint: dict[str, Any] = {}
    chosen: list[Mapping[str, Any]] = []
    done = 0
    for p in range(processes):
        if p >= MIN_PROCESSES and clock.now() - t0 >= budget_s:
            break
        worker = spawn(spec, f"calibration process {p + 1}")
        try:
            ready = worker.start()
            if not fingerprint:
                fingerprint = dict(ready.get("fingerprint") or {})
                check_device(fingerprint)
            if not chosen:
                listed = worker.request({"op": "cases", "sweep": dict(sweep)}, "listing the sweep")
                chosen = pick(listed.get("cases") or [], per_class)
                if not chosen:
                    raise ValueError("the sweep has no case this device can run: nothing to calibrate")
                for c in chosen:
                    measured[c["id"]] = Measured(c["id"], class_of({"kind": c["case"]["problem"]["kind"]}))
            for m in measured.values():
                m.log_medians.append([])
            for w in range(windows):
                if w >= MIN_WINDOWS and clock.now() - t0 >= budget_s:
                    break
                for c in chosen:
                    progress(f"process {p + 1}/{processes}, pass {w + 1}/{windows}: {c['id']}")
                    worker.request({"op": "drop", "release": True, "placement": (p * 1000 + w) if w >= 2 else None},
                                   "release")
                    res = protocol.decode_result(worker.request({"op": "run", "case": c["case"], "measure": True},
                                                                c["id"]))
                    if res.timing is None:
                        raise ValueError(f"{c['id']}: {res.status}: {res.reason}")
                    m = measured[c["id"]]
                    m.log_medians[-1].append(math.log(res.timing.median_s))
                    m.within.append(_se_of_median(res.timing.samples_s))
            done += 1
        except WorkerLost as exc:
            raise RuntimeError(f"calibration process {p + 1}: {exc}") from None
        finally:
            worker.close()
    facts = {"processes": done, "windows": windows, "per_class": per_class, "wall_s": round(clock.now() - t0, 1),
             "budget_s": budget_s, "fingerprint": fingerprint, "cases": [c["id"] for c in chosen]}
    return list(measured.values()), facts


def to_calibration(measured: Sequence[Measured], facts: Mapping[str, Any], at: str, *, floor: float,
                   base_windows: int, max_windows: int) -> Calibration:
    """The calibration file of what ``calibrate`` measured, with each benchmark's median, class and
    the smallest slowdown the gate can FAIL on it."""
    fp = facts.get("fingerprint") or {}
    classes = terms(measured)
    cal = Calibration(str(fp.get("gpu_uuid")), str(fp.get("gpu_slug")), at, classes, {}, dict(facts))
    benchmarks = {}
    for m in measured:
        meds = [x for w in m.log_medians for x in w]
        if not meds:
            continue
        least = smallest_fail(cal, m.cls, floor, base_windows, max_windows) if m.cls in classes else None
        benchmarks[m.name] = {"class": m.cls, "median_s": math.exp(float(np.median(meds))),
                              "smallest_fail_pct": None if least is None else round(least * 100, 2)}
    return Calibration(cal.unit, cal.gpu_slug, at, classes, benchmarks, dict(facts))
