"""A noise model of H200 timings, for simulating the gate's decision rule (tests/gate/test_rule_simulation.py).

Everything is in log time (a shift of 0.01 is a 1 % change). One benchmark's window median is

    log t = mu_b + e_within + w + c + j + p + d

* ``e_within`` ~ N(0, sd_b): how well one window knows its own median. ``sd_b`` = 1.2533 * s_b /
  sqrt(n_b), the standard error of a median of ``n_b`` samples of spread ``s_b``, with ``s_b`` =
  1.4826 * MAD of the benchmark's log samples and ``n_b`` its sample count, both from the
  committed H200 baseline (``baselines/nvidia-h200/approved.json``, 420 benchmarks, run 10 of
  docs/results-h200.md). Median over the 420: sd_b 0.04 %, largest 0.4 %.
* ``w`` ~ N(0, WINDOW_SIGMA) per benchmark and window: a window's own allocation, capture and
  clock state.
* ``c`` ~ N(0, PASS_SIGMA) per pass over the sweep, shared by every benchmark of the pass (clock
  and thermal state of the minute); windows a suspect takes back to back in its test share it.
* ``j``: with probability JUMP_P per benchmark and window a power-state jump of +-U(JUMP_LO,
  JUMP_HI).
* ``p``: a placement offset per benchmark and run (in ``fp4bench ab``: per process), shared by
  the run's windows, sd ``PLACE_SIGMA`` by kind of row. A memory-bound call's time depends on
  where its buffers landed, and operands made again in one process land on nearly the same
  placement (docs/results-h200.md, run 23), so more windows of one run do not average it; what
  does is each window's >= 4 rotating copies (measure.copies). Measured between placement sets
  with >= 4 copies (runs 23-24): grouped bf16 b1 0.04 % (down) and 0.42 % (gate_up), dense rows
  with 4-15 copies 0.16-0.71 %, the W4A16 MoE b1 row 0.2 % (2 copies): dense 0.7 %, grouped
  0.42 %, MoE 0.2 %, the largest of each kind.
* ``d``: the torch-fp8 grouped rows' 1.3 % (``FP8_GROUPED_DRIFT``) that 4 copies did not shrink
  (1.29 % with one copy, 1.37 % with four; the values drifted 52.2 -> 54.1 µs over the six
  placements: clock or power, not placement), per window.

The placement and drift terms are added on top of the calibrated window noise below: the
measured A/A runs already contain the one-copy placement spread of their time, so the model
with them is noisier than measured (the conservative side).

Calibrated to the measured same-unit A/A numbers (one window a side, |Δ| of the medians):
run 11 (406 benchmarks, one unit, minutes apart): median 0.17 %, p95 0.69 %, max 1.25 %; run 8
(39): median 0.08 %, p95 0.62 %, max 2.29 %; the sequential pytest A/A of the ab investigation
(one unit): median 0.23 %, p95 1.47 %; the largest back-to-back A/A change ever measured on one
unit: 2.37 % (run 4). ``test_the_noise_model_reproduces_the_measured_aa`` checks the model
against these: WINDOW_SIGMA 0.25 % sets the median |Δ|, the jumps (2 % of windows, 1-2.5 %)
set the p95/max tail.

Another unit (``UNIT_SIGMA``): a fixed per-benchmark offset N(0, 0.6 %) between two units, from
the cross-unit A/A numbers of docs/results-h200.md: run 9 (418 benchmarks against a baseline of
another lease): median |Δ| 0.55 %, p95 1.02 %, max 2.07 %; runs 5 vs 7: median 0.28 %, p95 3.39 %,
max 4.22 %. With the same-unit window noise (sd of a one-window Δ ~0.4 %), a median |Δ| of 0.55 %
needs a total sd of 0.55 / 0.674 = 0.8 %, so the unit offset is sqrt(0.8² - 0.4²) ~ 0.7 %;
0.6 % with the jump tail included.

``fp4bench ab`` (processes): a side's replicate is one worker process; its value is the mean over
rounds of its round-centred log time (each round's log medians centred across all 2R processes,
which removes ``c``). A process adds a fixed offset N(0, PROCESS_SIGMA) and its placement offset
``p`` (``--placement process``: one placement set per process and benchmark). After the ab fix the
per-process offset is an assumption, PROCESS_SIGMA = 0.5 %: the acceptance target of the fix
(A/A p95 |Δ| <= 1 % with 3 processes a side) allows at most sqrt(3/2) * 1 % / 1.96 = 0.62 %.
Before the fix (measured on the H200: the two memory-bound grouped b1 rows B-faster
by 3.1-5.5 % in 8 of 8 runs, 11 benchmarks affected) the offset was a per-*side* bias of that size
on those rows; ``PRE_FIX`` models it as a side bias of -U(3.1, 5.5) % on 2 rows and a per-process
offset N(0, 2 %) on 9 more.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
APPROVED = ROOT / "baselines" / "nvidia-h200" / "approved.json"

WINDOW_SIGMA = 0.002
PASS_SIGMA = 0.001
JUMP_P = 0.02
JUMP_LO, JUMP_HI = 0.010, 0.025
UNIT_SIGMA = 0.006
PROCESS_SIGMA = 0.005
#: placement offset of a run or process with >= 4 rotating copies, per kind of row (sd of log time)
PLACE_SIGMA = {"dense": 0.007, "grouped": 0.0042, "moe": 0.002}
#: a dense row's placement offset inside an ab process. Run 17 (12 dense rows, 3 processes a side,
#: every dense row already rotating 6-16 copies) measured median |Δ| 0.32 %: a Δ sd of
#: 0.32 / 0.674 = 0.47 %, a per-process total of 0.47 / sqrt(2/3) = 0.58 %, placement included;
#: beyond PROCESS_SIGMA that leaves sqrt(0.58² - 0.5²) = 0.29 % for placement
AB_PLACE_DENSE = 0.0029
#: the torch-fp8 grouped rows' spread that 4 copies did not shrink (clock/power): per window
FP8_GROUPED_DRIFT = 0.013


@dataclass(frozen=True)
class Suite:
    """Per benchmark: ``sd`` the standard error of one window's log median; ``place`` the sd of
    the placement offset a run carries, ``ab_place`` the one an ab process carries; ``drift`` an
    extra per-window sd."""

    sd: np.ndarray
    place: np.ndarray
    drift: np.ndarray
    ab_place: np.ndarray

    @property
    def size(self) -> int:
        return self.sd.size

    def pick(self, index) -> Suite:
        """The benchmarks at ``index`` (any numpy index; shapes follow it)."""
        return Suite(self.sd[index], self.place[index], self.drift[index], self.ab_place[index])


def h200_suite() -> Suite:
    from fp4bench.gate.baseline import load_baseline

    sds, place, drift, ab_place = [], [], [], []
    for rec in load_baseline(APPROVED).benchmarks.values():
        x = np.log(np.asarray(rec.samples))
        s = 1.4826 * np.median(np.abs(x - np.median(x)))
        sds.append(1.2533 * s / np.sqrt(x.size))
        kind = rec.extra_info.get("kind", "dense")
        place.append(PLACE_SIGMA.get(kind, PLACE_SIGMA["dense"]))
        ab_place.append(AB_PLACE_DENSE if kind == "dense" else place[-1])
        fp8_grouped = kind == "grouped" and rec.extra_info.get("backend") == "torch-fp8"
        drift.append(FP8_GROUPED_DRIFT if fp8_grouped else 0.0)
    return Suite(np.asarray(sds), np.asarray(place), np.asarray(drift), np.asarray(ab_place))


def placement(rng: np.random.Generator, place: np.ndarray) -> np.ndarray:
    """One run's (or process's) placement offset per benchmark of ``place`` (shape (..., 1):
    shared by the run's windows)."""
    return rng.normal(0.0, 1.0, place.shape + (1,)) * place[..., None]


def windows(rng: np.random.Generator, sd: np.ndarray, n: int, *, common: np.ndarray | None = None,
            jump_p: float = JUMP_P, drift: np.ndarray | float = 0.0) -> np.ndarray:
    """``n`` windows of each benchmark of ``sd`` (shape (..., n)): log-median noise of the model.
    ``common``: the pass shift each window shares with its pass (shape broadcastable to (..., n)),
    drawn per window when None. ``drift``: an extra per-window sd per benchmark. A run's placement
    offset (``placement``) is added by the caller: it is shared by the run's windows."""
    shape = sd.shape + (n,)
    x = rng.normal(0.0, 1.0, shape) * sd[..., None] + rng.normal(0.0, WINDOW_SIGMA, shape)
    x += rng.normal(0.0, 1.0, shape) * np.broadcast_to(np.asarray(drift, dtype=float), sd.shape)[..., None]
    x += rng.normal(0.0, PASS_SIGMA, shape) if common is None else common
    jump = rng.random(shape) < jump_p
    x += jump * rng.choice([-1.0, 1.0], shape) * rng.uniform(JUMP_LO, JUMP_HI, shape)
    return x
