"""The paired samples through the existing gate; the report and its JSON.

Side A is the baseline, side B the candidate: ``fp4bench.gate.verdict.compare`` judges every
benchmark measured on both sides (floor, noise, Holm, dispatch change from the kernel names)
and the availability maps give lost / new tactics. What the gate has no sample-based rule for is
added as named verdicts here: a wrong output or a lost worker on B is a FAIL, operand bytes
that differ between the sides make the timing INVALID (the two sides did not compute the same
thing).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from fp4bench.ab.run import AbRun, Paired, SideResult
from fp4bench.env import Fingerprint
from fp4bench.gate.baseline import Baseline, BenchmarkRecord, availability_value
from fp4bench.gate.verdict import CompareResult, Policy, Status, Verdict, compare
from fp4bench.report import _render, delta_spread, describe_changes, verdict_table

WRONG_OUTPUT = "wrong output"
LOST_WORKER = "worker lost"


def _availability(side: SideResult, name: str) -> dict[str, str]:
    if side.status == "measured":
        return {name: availability_value(True)}
    if side.status == "unsupported":
        return {name: availability_value(False, side.reason)}
    return {}


def judge(run: AbRun, policy: Policy) -> CompareResult:
    fa, fb = (Fingerprint.from_dict(run.fingerprints[s]) for s in ("A", "B"))
    records, current, extra_verdicts = {}, {}, []
    avail_a: dict[str, str] = {}
    avail_b: dict[str, str] = {}
    for p in run.pairs:
        avail_a.update(_availability(p.a, p.name))
        avail_b.update(_availability(p.b, p.name))
        if p.a.samples and p.b.samples:
            extra_b = dict(p.b.extra_info)
            if p.a.digest != p.b.digest:
                extra_b["invalid"] = "operand bytes differ between A and B (different RNG/quantizer?)"
            records[p.name] = BenchmarkRecord(p.name, p.name, tuple(p.a.samples), dict(p.a.extra_info))
            current[p.name] = (p.b.samples, extra_b)
        else:
            v = _named(p)
            if v is not None:
                extra_verdicts.append(v)
    base = Baseline(fa, records, avail_a, {}, None, {}, "side A")
    result = compare(base, current, avail_b, policy, fb)
    result.verdicts += extra_verdicts
    return result


def _named(p: Paired) -> Verdict | None:
    """A benchmark that was not timed on both sides, as a verdict (None: skipped on both)."""
    a, b = p.a, p.b
    if b.status == "failed":
        kind = LOST_WORKER if any(w in b.reason for w in ("died", "hang:", "poisoned")) else WRONG_OUTPUT
        was = "also failed on A" if a.status == "failed" else f"A: {a.status}"
        return Verdict(p.name, Status.FAIL, kind=kind, reason=f"B: {b.reason} ({was})")
    if a.status == "failed" and b.status == "measured":
        return Verdict(p.name, Status.PASS, kind=WRONG_OUTPUT, improved=True, reason=f"fixed on B; A: {a.reason}")
    if a.status == "measured" and b.status == "skipped":
        return Verdict(p.name, Status.FAIL, kind="skipped on B", reason=f"B: {b.reason}")
    return None  # skipped / unsupported on both, or a tactic change (availability verdicts)


def version_changes(run: AbRun, result: CompareResult) -> list[tuple[str, str, str]]:
    """(benchmark, version on A, version on B) where the backend's version differs."""
    out = []
    for p in run.pairs:
        va, vb = p.a.extra_info.get("backend_version"), p.b.extra_info.get("backend_version")
        if va != vb and (va or vb):
            out.append((p.name, str(va or "-"), str(vb or "-")))
    return out


def report(run: AbRun, result: CompareResult) -> str:
    lines = [f"A: {run.fingerprints['A'].get('gpu_name')} {run.fingerprints['A'].get('gpu_uuid') or ''}".rstrip(),
             f"stack A → B: {describe_changes(result.changes)}",
             "prepare + check (JIT build/load included, never timed): "
             + ", ".join(f"{s} {run.check_seconds[s]:.1f} s" for s in ("A", "B"))]
    for side, found in sorted(run.test_only.items()):
        if found:
            lines.append(f"side {side} ran TEST-ONLY backends: " + "; ".join(found.values()))
    lines.append("")
    changed = version_changes(run, result)
    if changed:
        lines.append("backend versions that differ, per benchmark:")
        lines += _render(["benchmark", "A", "B"], [list(c) for c in changed], [False, False, False])
        lines.append("")
    lines.append(verdict_table(result))
    if run.not_reached:
        lines.append(f"INCOMPLETE: interrupted, {len(run.not_reached)} benchmarks not reached (not judged): "
                     + ", ".join(run.not_reached[:5]) + (" ..." if len(run.not_reached) > 5 else ""))
    return "\n".join(lines)


def to_json(run: AbRun, result: CompareResult) -> dict[str, Any]:
    spread = delta_spread(result)
    pairs = {p.name: p for p in run.pairs}
    rows = []
    for v in result.sorted():
        p = pairs.get(v.name)
        rows.append({
            "name": v.name, "status": v.status.value, "kind": v.kind, "delta_pct": v.pct, "p_adj": v.p_adjusted,
            "a_median_s": v.base_median, "b_median_s": v.new_median, "n_a": v.n_base, "n_b": v.n_new,
            "reason": v.reason, "round_order": "".join(p.order) if p else None,
            "a_version": p.a.extra_info.get("backend_version") if p else None,
            "b_version": p.b.extra_info.get("backend_version") if p else None,
        })
    return {
        "fingerprints": run.fingerprints, "changes": [list(c) for c in result.changes],
        "policy": dataclasses.asdict(result.policy), "check_seconds": run.check_seconds, "test_only": run.test_only,
        "counts": result.counts(), "exit_code": result.exit_code,
        "delta_abs": None if spread is None else dict(zip(("n", "median", "p95", "max"), spread)),
        "benchmarks": rows, "not_reached": list(run.not_reached),
    }
