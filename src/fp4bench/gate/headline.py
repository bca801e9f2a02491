"""The one time a benchmark is reported by: its **headline median**.

Every output that shows one time per benchmark shows this one: the results table, the terminal
and markdown verdicts, the verdict JSON (``base_median_s``, ``new_median_s``), the CSV,
``fp4bench report`` (its tables and plots) and the results JSON's ``extra_info["median_s"]``.

Definition (``gate.record.headline_median``, the one function that computes it): the geometric
mean of the medians of the windows the gate judges, each window one replicate of ``gate.rule``;
with one window, that window's median. The rule pools replicates as the mean of their log
medians, so this is the rule's own pooling in seconds, and a verdict's Δ is exactly
``headline(now) / headline(base) - 1``. The windows judged: in a pytest run, those its test
judged (``plugin.finish.judged_windows``); in a result file, every window it holds.

Other times are labelled as what they are: pytest-benchmark's own ``stats`` (its table and the
JSON's ``stats`` object) cover window 1 only; ``span_median_s`` is the graph replay's event span.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

#: the ``extra_info`` keys a run writes with the headline: the time, and what it is
MEDIAN_KEY = "median_s"
MEDIAN_IS_KEY = "median_is"


def median_is(windows: int) -> str:
    """What a headline median is, in words: ``"median of 1 window"``,
    ``"geometric mean of 3 window medians"``."""
    return "median of 1 window" if windows == 1 else f"geometric mean of {windows} window medians"


#: one line above a table whose benchmarks have more than one window
LEGEND = ("median: per benchmark, the geometric mean of its windows' medians (the windows the gate judges, the time a "
          "verdict compares); CI95 w1: window 1's")


def rescaled(extra: Mapping[str, Any], seconds: float, windows: int) -> dict[str, Any]:
    """The ``extra_info`` entries a run writes for a headline of ``seconds`` over ``windows``
    windows: ``median_s``, ``median_is``, and its rates (``tflops``, ``tbps``, the % of peak) at
    that time, from the ``flops`` and ``bytes`` the case recorded. Rates the case did not record
    stay out."""
    out: dict[str, Any] = {MEDIAN_KEY: seconds, MEDIAN_IS_KEY: median_is(windows)}
    flops, nbytes = extra.get("flops"), extra.get("bytes")
    if not (seconds > 0 and math.isfinite(seconds)):
        return out
    for rate, count, pct in (("tflops", flops, "pct_peak_compute"), ("tbps", nbytes, "pct_peak_bandwidth")):
        if not isinstance(count, (int, float)) or isinstance(count, bool):
            continue
        new = count / seconds / 1e12
        old = extra.get(rate)
        share = extra.get(pct)
        if isinstance(share, (int, float)) and isinstance(old, (int, float)) and old > 0:
            out[pct] = share * new / old  # a share of a fixed peak scales with the rate
        out[rate] = new
    return out

