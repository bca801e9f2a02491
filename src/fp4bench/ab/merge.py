"""The GPUs' parts of an ``fp4bench ab`` run (``ab.multi``) as one run, judged and reported once.

The merged run holds every GPU's benchmarks in the listing's order, each with the UUID of the
GPU that measured it (``AbRun.gpu_of``), every process (named by GPU: ``g1.A2``) and crash, and
the GPUs' parts themselves (``AbRun.gpus``: the report's per-GPU lines and telemetry). Nothing
measured is lost: a GPU whose run raised keeps the benchmarks it finished, and the rest of its
share becomes benchmarks that were not judged (side status ``crashed``: the run is incomplete,
exit 3), named with the GPU and the error. A GPU interrupted by Ctrl-C leaves its rest not
reached, as a one-GPU run does. A benchmark that some GPU listed but no GPU's share held (GPUs
that listed different sweeps) is not judged either, never silently dropped.
"""

from __future__ import annotations

from fp4bench.ab.records import AbRun, GpuPart, Paired, SideResult
from fp4bench.gate.rule import RuleSettings

#: the side status of a benchmark whose GPU's run ended before measuring it
CRASHED = "crashed"


def _unjudged(name: str, reason: str) -> Paired:
    return Paired(name, SideResult(CRASHED, reason=reason), SideResult(CRASHED, reason=reason))


def merge(parts: list[GpuPart], settings: RuleSettings) -> AbRun:
    """One run of every GPU's part. ``RuntimeError`` when no GPU listed the sweep (a side that
    cannot start anywhere: the usage error a one-GPU run gives)."""
    ran = [p for p in parts if p.run is not None]
    if not ran:
        raise RuntimeError("no GPU could run: " + "; ".join(
            f"GPU {p.index} ({p.uuid}): {p.error or 'interrupted before it listed the sweep'}" for p in parts))
    ref = ran[0]
    pairs: list[Paired] = []
    gpu_of: dict[str, str] = {}
    not_reached: list[str] = []
    for i, part in enumerate(parts):
        if part.run is None:
            part.benchmarks = list(ref.planned[i])
        left = part.run.not_reached if part.run is not None else part.benchmarks
        for p in part.run.pairs if part.run is not None else ():
            pairs.append(p)
            gpu_of[p.name] = part.uuid
        if part.error:
            why = f"not judged: GPU {part.index} ({part.uuid}) run crashed before it: {part.error}"
            pairs += [_unjudged(name, why) for name in left]
        else:
            not_reached += left
        gpu_of.update({name: part.uuid for name in left})
    order = {name: k for k, name in enumerate(ref.listed)}
    for part in ran:  # a name only another GPU listed: the GPUs listed different sweeps
        for name in part.listed:
            if name not in gpu_of:
                pairs.append(_unjudged(name, f"not judged: GPU {part.index} lists it, GPU {ref.index} does not "
                                             "(the GPUs listed different sweeps)"))
                gpu_of[name] = ""
                order.setdefault(name, len(order))
    pairs.sort(key=lambda p: order.get(p.name, len(order)))
    runs = [p.run for p in ran]
    sides = ("A", "B")
    return AbRun(dict(ref.run.fingerprints), ref.run.versions, pairs,
                 {s: sum(r.check_seconds.get(s, 0.0) for r in runs) for s in sides},
                 {s: {k: v for r in runs for k, v in (r.test_only.get(s) or {}).items()} for s in sides},
                 not_reached=sorted(not_reached, key=lambda n: order.get(n, len(order))),
                 processes=[x for r in runs for x in r.processes], crashes=[c for r in runs for c in r.crashes],
                 settings=settings, wall_s=max(r.wall_s for r in runs),
                 known_backends={s: sorted({n for r in runs for n in r.known_backends.get(s, [])}) for s in sides},
                 gpus=list(parts), gpu_of=gpu_of)
