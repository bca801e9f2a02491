"""pytest-benchmark conventions around fp4bench cases.

fp4bench hands pytest-benchmark samples it timed itself (CUDA-graph replay, CUPTI kernel time),
so some of pytest-benchmark's behaviour does not apply to its cases, and this module says so
instead of letting it fail silently:

* calibration flags (``--benchmark-min-rounds``, ``--benchmark-max-time``, ...) do nothing for
  an fp4bench case: one warning per flag set to a non-default value, naming the fp4bench option
  that controls the same thing;
* pytest-benchmark's own results table repeats fp4bench's results table (with pytest-benchmark's
  min/max/mean of the same samples): fp4bench's cases are left out of it, other benchmarks of
  the session stay (``--fp4-benchmark-table`` keeps them all).
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest

#: pytest-benchmark option dest -> what controls that for an fp4bench case instead
CALIBRATION: dict[str, str] = {
    "benchmark_min_rounds": "use --fp4-min-samples (the fewest samples per case)",
    "benchmark_max_time": "use --fp4-time-budget (seconds of sampling per case)",
    "benchmark_min_time": "no such setting: a sample is as many back-to-back calls as take ~1 ms (one graph replay)",
    "benchmark_precision": "use --fp4-target-ci (sampling stops once the 95% CI of the median is this narrow)",
    "benchmark_confidence": "use --fp4-target-ci (always a 95% CI of the median)",
    "benchmark_timer": "set by --fp4-device: CUPTI kernel time of CUDA-graph replays on a GPU, perf_counter on CPU",
    "benchmark_calibration_precision": "no such setting: calls per sample come from a timed estimate of one call",
    "benchmark_warmup": "no such setting: every case runs its correctness check and warm-up calls before timing",
    "benchmark_warmup_iterations": "no such setting: every case runs its correctness check and warm-up calls first",
    "benchmark_disable_gc": "no such setting: the garbage collector stays on (GPU time is measured on the GPU)",
    "benchmark_cprofile": "no such setting: fp4bench cases never run under pytest-benchmark's profiler (use nsys or ncu)",
}




def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def option_defaults(parser: Any) -> dict[str, Any]:
    """pytest-benchmark's defaults as parsing an empty command line gives them (argparse puts a
    string default through the option's type)."""
    out: dict[str, Any] = {}
    for arg in parser.getgroup("benchmark").options if parser is not None else []:
        default, kind = getattr(arg, "default", None), getattr(arg, "type", None)
        if isinstance(default, str) and callable(kind):
            try:
                default = kind(default)
            except Exception:  # a default its own type rejects: compare as given
                pass
        out[arg.dest] = default
    return out


def ignored_calibration(config: pytest.Config, defaults: dict[str, Any]) -> list[tuple[str, Any]]:
    """(flag, value) of each calibration option set to something other than its default."""
    out = []
    for dest in CALIBRATION:
        if dest not in defaults:
            continue  # an option this pytest-benchmark version does not have
        value = config.getoption(dest, default=None)
        if value != defaults[dest] and str(value) != str(defaults[dest]):
            out.append((dest, value))
    return out


class CompatPlugin:
    """The per-run hooks (one instance per ``pytest.Config``, registered by ``fp4bench.plugin``)."""

    def __init__(self, config: pytest.Config, parser: Any) -> None:
        self.config = config
        self.parser = parser
        self.fp4_names: set[str] = set()

    # -- calibration flags ----------------------------------------------------------------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        from fp4bench.plugin.console import case_of

        cases = [i for i in session.items if case_of(i) is not None]
        self.fp4_names = {i.nodeid for i in cases}
        if not cases:
            return  # a plain pytest-benchmark session: its flags do what they say
        for dest, value in ignored_calibration(self.config, option_defaults(self.parser)):
            given = _flag(dest) if value is None or value is True else f"{_flag(dest)}={value}"
            _warn(f"{given} is ignored by fp4bench's {len(cases)} cases (fp4bench times them itself): "
                  f"{CALIBRATION[dest]}")
        marked = sorted({k for i in cases if (m := i.get_closest_marker("benchmark")) for k in m.kwargs})
        if marked:
            _warn(f"@pytest.mark.benchmark({', '.join(marked)}) is ignored on fp4bench cases (fp4bench times them "
                  f"itself; see --fp4-min-samples, --fp4-time-budget, --fp4-target-ci)")

    # -- pytest-benchmark's table ---------------------------------------------------------------
    @pytest.hookimpl(wrapper=True)
    def pytest_benchmark_group_stats(self, config: pytest.Config, benchmarks, group_by):
        groups = yield
        if not self.fp4_names or config.getoption("fp4_benchmark_table", default=False) or not groups:
            return groups
        kept = [(name, [b for b in group if b.get("fullname") not in self.fp4_names]) for name, group in groups]
        return [(name, group) for name, group in kept if group]


def _warn(text: str) -> None:
    """A PytestConfigWarning located at "fp4bench options" (an option, not a source line, is
    what to fix; pytest shows each distinct warning once in its warnings summary)."""
    warnings.warn_explicit(pytest.PytestConfigWarning(text), pytest.PytestConfigWarning, "fp4bench options", 0)
