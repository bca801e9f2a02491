"""The regression gate: baseline files, where they live, and noise-aware verdicts.

``baseline`` reads pytest-benchmark JSON files carrying an ``"fp4bench"`` section and slim
baseline files, and writes the slim format; ``store`` keeps one approved baseline per GPU model
and approves candidates; ``verdict`` decides PASS / FAIL / AMBIGUOUS / NEW / MISSING / INVALID
from raw samples.
"""

from fp4bench.gate.baseline import (
    Baseline,
    BaselineError,
    BenchmarkRecord,
    IncompatibleBaseline,
    check_compatible,
    load_baseline,
)
from fp4bench.gate.store import Approval, approve, select_baseline
from fp4bench.gate.verdict import CompareResult, Policy, Status, Verdict, compare, judge

__all__ = [
    "Approval",
    "Baseline",
    "BaselineError",
    "BenchmarkRecord",
    "IncompatibleBaseline",
    "approve",
    "check_compatible",
    "load_baseline",
    "select_baseline",
    "CompareResult",
    "Policy",
    "Status",
    "Verdict",
    "compare",
    "judge",
]
