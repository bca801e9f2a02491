"""A heavier-tailed noise model of stored-gate runs on an H200, for the simulation of the gate's
window loop (tests/gate/test_gate_simulation.py). Log time throughout (0.01 = 1 %).

One benchmark's window median, for a run (one process) and its window k (each window its own
fresh placement set: ``run.windows``)::

    log t = e_within + w + c + j + p_k + r + d          (+ u: another unit, + the effect)

* ``e_within``, ``c``, ``j``, ``d``: as ``fakes.noise_model`` (within-window standard error from
  the committed baseline's samples; pass 0.1 %; jumps of +-1-2.5 % in 2 % of windows; the
  torch-fp8 grouped rows' 1.3 % drift per window). ``w``: ``fakes.noise_model``'s 0.2 % window
  term, fitted to A/A runs of two processes, less the run term ``r`` now drawn apart:
  sqrt(0.2² - 0.18²) = 0.087 %.
* ``p_k``: the placement set of window k, drawn afresh per window, Student-t with 4 degrees of
  freedom scaled to a per-benchmark sd drawn once from the range measured between placement sets
  with >= 4 copies (docs/results-h200.md, runs 23-24): dense 0.16-0.71 %, grouped 0.04-0.42 %,
  MoE 0.20 %; plus, in ``TAIL_P`` = 0.1 % of placement sets, an odd placement of +-U(2, 4.5) %
  (run 23: a dense row's first re-make 4.5 % off the next seven; "clonepad" put 2 of 8 copies of a
  dense row 7.5 % slower, 1.9 % on their mean; more often than 0.1 % would put a 2-4.5 % change
  in most one-window A/A runs of 420 benchmarks, whose largest measured was 1.25 %, run 11).
  ``fakes.noise_model`` has no such tail: a shared
  placement offset there is Gaussian. The measured ranges hold the window noise of their
  relocations, which is taken out in quadrature.
* ``r``: the run term, shared by every window of one process, N(0, ``RUN_SIGMA``) with
  ``RUN_SIGMA`` = 0.18 %: the bound from the same-unit one-window A/A of run 11 (median |Δ| 0.17 %,
  so sd(Δ) 0.25 %, two run terms and two windows: at most 0.25 / sqrt(2)).
* ``u``: another unit (cross-unit runs only): a per-benchmark offset, Student-t, dense: 3 degrees
  of freedom, scale 0.5 % (a tail that reaches the 3.5-4.2 % of the µs dense rows between leases,
  runs 5-9, in about 1 of 100 dense rows); grouped and MoE: 10 degrees of freedom, scale 0.4 % and
  0.3 % (run 9, 418 benchmarks of which 400 MoE tactics on another lease: median |Δ| 0.55 %, max
  2.07 %).

``spread`` multiplies the placement and run terms (the acceptance's "per-process spread x2").
``test_the_model_is_within_the_measured_aa`` checks one-window A/A |Δ| against the measured runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import fakes.noise_model as nm

TAIL_P = 0.001
RUN_SIGMA = 0.0018
WINDOW_SIGMA = float(np.sqrt(nm.WINDOW_SIGMA ** 2 - RUN_SIGMA ** 2))
TAIL_LO, TAIL_HI = 0.02, 0.045
#: per-benchmark sd ranges between placement sets with >= 4 copies, by class, as measured: they
#: hold the window noise, which is taken out (``place_sd``)
PLACE_RANGE = {"dense": (0.0016, 0.0071), "grouped": (0.0004, 0.0042), "moe": (0.002, 0.002)}
UNIT_SCALE = {"dense": 0.005, "grouped": 0.004, "moe": 0.003}
UNIT_DF = {"dense": 3, "grouped": 10, "moe": 10}
PLACE_DF = 4


@dataclass(frozen=True)
class Bench:
    """The benchmarks of the committed baseline: name, class, within-window sd and drift."""

    names: tuple[str, ...]
    classes: np.ndarray
    sd: np.ndarray
    drift: np.ndarray

    @property
    def size(self) -> int:
        return len(self.names)


def h200_benchmarks() -> Bench:
    from fp4bench.gate.baseline import load_baseline
    from fp4bench.gate.calibration import class_of

    suite = nm.h200_suite()
    recs = list(load_baseline(nm.APPROVED).benchmarks.values())
    return Bench(tuple(r.fullname for r in recs), np.array([class_of(r.extra_info) for r in recs]),
                 suite.sd, suite.drift)


def _t(rng: np.random.Generator, df: int, shape) -> np.ndarray:
    """Student-t draws scaled to unit variance."""
    return rng.standard_t(df, shape) / np.sqrt(df / (df - 2.0))


def place_sd(rng: np.random.Generator, b: Bench) -> np.ndarray:
    """One placement sd per benchmark, drawn from its class's measured range, less the window
    noise those measurements already held (in quadrature)."""
    lo = np.array([PLACE_RANGE[c][0] for c in b.classes])
    hi = np.array([PLACE_RANGE[c][1] for c in b.classes])
    return np.sqrt(np.maximum(rng.uniform(lo, hi) ** 2 - nm.WINDOW_SIGMA ** 2, 0.0))


def run_windows(rng: np.random.Generator, b: Bench, runs: int, n: int, place: np.ndarray,
                spread: float = 1.0) -> np.ndarray:
    """(runs, benchmarks, n) log window medians of ``runs`` runs of one process each, every window
    its own placement set, the windows of a run taken in passes over the sweep."""
    shape = (runs, b.size, n)
    x = rng.normal(0.0, 1.0, shape) * b.sd[:, None] + rng.normal(0.0, WINDOW_SIGMA, shape)
    x += rng.normal(0.0, 1.0, shape) * b.drift[:, None]
    x += rng.normal(0.0, nm.PASS_SIGMA, (runs, 1, n))
    x += (rng.random(shape) < nm.JUMP_P) * rng.choice([-1.0, 1.0], shape) * rng.uniform(nm.JUMP_LO, nm.JUMP_HI, shape)
    x += spread * _t(rng, PLACE_DF, shape) * place[:, None]
    x += spread * (rng.random(shape) < TAIL_P) * rng.choice([-1.0, 1.0], shape) * rng.uniform(TAIL_LO, TAIL_HI,
                                                                                             shape)
    x += spread * rng.normal(0.0, RUN_SIGMA, (runs, b.size, 1))
    return x


def unit_offsets(rng: np.random.Generator, b: Bench, runs: int) -> np.ndarray:
    """(runs, benchmarks, 1): each run's unit against the baseline's, per benchmark."""
    scale = np.array([UNIT_SCALE[c] for c in b.classes])
    df = np.array([UNIT_DF[c] for c in b.classes])
    return (rng.standard_t(df, (runs, b.size)) * scale)[..., None]
