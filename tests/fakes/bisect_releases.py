"""Releases of a fake ``flashinfer-python`` for ``fp4bench bisect`` tests, and a fake ``ab`` step
that times each release's kernel on the simulated clock and judges it with the gate's rule.

``VERSIONS`` is the range an upgrade from 0.6.18.post1 to 0.7.4 crosses. ``call_s`` gives each
release's simulated kernel time: ``BASE_S``, times ``1 + slowdown`` from ``slower_from`` on, or a
per-release table. ``wheel_folder`` writes one wheel per release (the ``flashinfer`` module's
``CALL_S`` is that time; its last two are the releases the sim simulates,
``fakes.flashinfer_releases.RELEASES``), a pre-release and an unrelated file that listing must skip, and, for each
release in ``broken``, a wheel that requires a distribution the folder does not have (pip cannot
install it offline). ``sim_measure`` is the bisect's ``Measure``: ``REPLICATES`` processes per
side, each one window of calls on ``clock.SimClock`` with its own small offset (seeded), decided
by ``gate.rule`` as ``fp4bench ab`` decides.
"""

from __future__ import annotations

import math
import random
import zlib
from pathlib import Path

from fakes.dists import make_wheel
from fakes.flashinfer_releases import RELEASES
from fp4bench import clock
from fp4bench.bisect.step import Step
from fp4bench.gate import rule

VERSIONS = ("0.6.18.post1", "0.7.0", "0.7.0.post1", "0.7.1", "0.7.2", "0.7.2.post1", "0.7.4")
PACKAGE = "flashinfer-python"
BASE_S = 20e-6
REPLICATES = 4
CALLS = 30
#: each process's own offset (placement, clocks): a standard deviation of 0.3 % of its time
PROCESS_SIGMA = 0.003
assert set(RELEASES) <= set(VERSIONS)


def call_s(slower_from: str | None = None, slowdown: float = 0.0, steps: dict[str, float] | None = None
           ) -> dict[str, float]:
    """Each release's kernel time: ``steps`` (release -> its own relative change, compounded in
    order), or ``slowdown`` from ``slower_from`` on."""
    out, t = {}, BASE_S
    for v in VERSIONS:
        if steps is not None:
            t *= 1 + steps.get(v, 0.0)
        elif slower_from is not None and VERSIONS.index(v) >= VERSIONS.index(slower_from):
            t = BASE_S * (1 + slowdown)
        out[v] = t
    return out


def wheel_folder(out: Path, times: dict[str, float], broken: tuple[str, ...] = ()) -> Path:
    for v, t in times.items():
        requires = ("flashinfer-missing-dependency==1.0",) if v in broken else ()
        files = {"flashinfer/__init__.py": f"CALL_S = {t!r}\n"}
        make_wheel(out, PACKAGE, v, requires=requires, files=files)
    make_wheel(out, PACKAGE, "0.7.3rc1", files={"flashinfer/__init__.py": "CALL_S = 1.0\n"})
    make_wheel(out, "sgl-kernel", "0.3.21")
    (out / "README.txt").write_text("not a distribution\n")
    return out


def _replicates(t: float, side_seed: str) -> list[float]:
    """``REPLICATES`` processes, each timing ``CALLS`` calls of a ``t``-second kernel on the
    simulated clock with its own offset; each process's median time per call."""
    rng = random.Random(zlib.crc32(side_seed.encode()))
    out = []
    for _ in range(REPLICATES):
        own = t * (1 + rng.gauss(0.0, PROCESS_SIGMA))
        times = []
        for _ in range(CALLS):
            t0 = clock.now()
            clock.advance(own)
            times.append(clock.now() - t0)
        out.append(sorted(times)[CALLS // 2])
    return out


def sim_measure(times: dict[str, float], floor_pct: float, benchmark: str = "flashinfer-cutlass-default-glm5",
                log: list | None = None):
    """The fake ``ab`` step (``bisect.step.Measure``); ``log`` collects each pair it measured."""
    settings = rule.RuleSettings(floor=floor_pct / 100)

    def measure(a: str, a_venv: Path, b: str, b_venv: Path) -> Step:
        assert a_venv is not None and b_venv is not None, f"{a} -> {b}: measured without a venv"
        if log is not None:
            log.append((a, b))
        with clock.using(clock.SimClock()):
            base, new = _replicates(times[a], f"{a}>{b}:A"), _replicates(times[b], f"{a}>{b}:B")
        est = rule.estimate(base, new, settings)
        status = rule.decide(est, settings, budget_left=False).value
        lo, hi = est.interval_pct
        return Step(a, b, status, {benchmark: [est.pct, lo, hi, status]},
                    f"{benchmark}: {math.expm1(est.delta) * 100:+.1f}%")

    return measure
