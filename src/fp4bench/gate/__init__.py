"""The regression gate: per-GPU baseline storage/selection and noise-aware verdicts.

``baseline`` reads/writes pytest-benchmark JSON files carrying an ``"fp4bench"`` section;
``verdict`` decides PASS / FAIL / AMBIGUOUS / NEW / MISSING / INVALID from raw samples.
"""

from fp4bench.gate.baseline import (
    Approval,
    Baseline,
    BaselineError,
    BenchmarkRecord,
    IncompatibleBaseline,
    approve,
    check_compatible,
    load_baseline,
    select_baseline,
)
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
