"""The headline median (``gate.record.headline_median``): the one time a benchmark is reported by,
on every kind of verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from fakes.benchjson import H200
from fp4bench.gate.baseline import Baseline
from fp4bench.gate.compare import compare
from fp4bench.gate.record import headline_median, with_windows
from fp4bench.gate.verdict import Status


def test_headline_is_the_geometric_mean_of_the_window_medians():
    rng = np.random.default_rng(3)
    ws = [list(m * np.exp(rng.normal(0, 0.01, 9))) for m in (10e-6, 11e-6, 13e-6)]
    meds = [float(np.median(w)) for w in ws]
    assert headline_median(ws) == pytest.approx(math.exp(sum(map(math.log, meds)) / 3), rel=1e-12)
    assert headline_median(ws[:1]) == meds[0] == headline_median(ws[0])  # one window, or a flat list: its median
    # neither the pooled median nor the first window's
    assert headline_median(ws) not in (pytest.approx(float(np.median(sum(ws, [])))), pytest.approx(meds[0]))
    with pytest.raises(ValueError, match="at least one sample"):
        headline_median([])


def test_new_and_missing_verdicts_carry_the_headline_too():
    ws = [[10e-6] * 6, [12e-6] * 6, [15e-6] * 6]
    base = Baseline(fingerprint=H200, benchmarks={"gone": with_windows("gone", "gone", ws, {})}, availability={},
                    sweep={}, clean=True, verdicts={}, source="base.json")
    res = compare(base, {"added": (ws, {})})
    by = {v.name: v for v in res.verdicts}
    assert by["gone"].status is Status.MISSING and by["gone"].base_median == pytest.approx((10 * 12 * 15) ** (1 / 3) * 1e-6)
    assert by["added"].status is Status.NEW and by["added"].new_median == by["gone"].base_median
    assert (by["gone"].windows_base, by["added"].windows_new) == (3, 3)
