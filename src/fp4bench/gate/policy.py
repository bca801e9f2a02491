"""The gate's settings (``Policy``) and which verdicts fail the gate under them (``is_failure``).

Noise only widens a benchmark's interval (it needs more windows to be decided); it never moves
the threshold. By default throttling is *reported* next to the verdict but the timing is judged:
on an H200 the 700 W power cap (SwPowerCap) is the steady state of any heavy decode GEMM (seen in
both runs of an unchanged A/A pair), so invalidating it would leave those kernels ungated, and a
stack change that throttles more is itself a regression users want to see.
"""

from __future__ import annotations

from dataclasses import dataclass

from fp4bench.gate import rule
from fp4bench.gate.calibration import FALLBACK, NoiseTerms
from fp4bench.gate.verdict import Status, Verdict

THROTTLE_POLICIES = ("report", "invalid")
DISPATCH_POLICIES = ("report", "fail")


@dataclass(frozen=True)
class Policy:
    """Gate settings. ``floor`` is relative (0.05 = 5 %): the slowdown that must FAIL; ``floor``
    5 % matches common practice (sgl-kernel's ``benchmark/kernel_bench_regression`` gates per
    SKU at ±5 %). The decision rule's other settings (``margin``, ``confidence``, ``prior_sigma``,
    ``min_new_for_fail``) default to ``rule.RuleSettings``'s. ``noise``: the noise terms per
    benchmark class (``gate.calibration``: the unit's calibration file, else the documented
    constants): a calibrated unit's between-window prior, the run term every comparison carries,
    and the offset of another unit, which enters only when ``other_unit`` (set by
    ``unit.for_changes`` for a baseline from another or an unknown GPU unit); ``unit_sigma`` > 0
    overrides that offset for every class. ``min_samples``: fewer samples on either side is no
    measurement (AMBIGUOUS, undecided)."""

    floor: float = 0.05
    margin: float = rule.RuleSettings.margin
    #: of the lower bound a FAIL needs: 0.99 for the stored gate, where a FAIL also rests on two
    #: windows in fresh placement sets (``run.windows``): with it and 6 windows at most, +5 % on one
    #: benchmark FAILs in >= 99 % and <= 1 % of unchanged 420-benchmark runs FAIL, also with twice
    #: the placement and run spread (tests/gate/test_gate_simulation.py)
    confidence: float = 0.99
    pass_confidence: float = rule.RuleSettings.pass_confidence
    #: the between-window spread assumed before data; None: the noise terms' of each class
    prior_sigma: float | None = None
    min_new_for_fail: int = rule.RuleSettings.min_new_for_fail
    unit_sigma: float = 0.0
    other_unit: bool = False
    noise: NoiseTerms = FALLBACK
    min_samples: int = 5
    allow_missing: bool = False
    fail_on_ambiguous: bool = False
    #: INVALID verdicts and too few samples (no timing judgement possible) do not fail the gate
    allow_ambiguous: bool = False
    dispatch: str = "report"  # "report": flag only; "fail": a kernel-set change is a FAIL
    throttle: str = "report"  # "report": judge timing, show throttle state; "invalid": INVALID
    #: why the rule is less sensitive than on the baseline's own unit (``unit.for_changes``); shown
    #: in the report header
    drift_note: str = ""

    def rule_settings(self, cls: str = "dense") -> rule.RuleSettings:
        """The decision rule's settings for a benchmark of class ``cls`` (``calibration.class_of``)."""
        terms = self.noise.of(cls)
        unit = self.unit_sigma if self.unit_sigma > 0 else (terms.unit_sigma if self.other_unit else 0.0)
        return rule.RuleSettings(floor=self.floor, margin=self.margin, confidence=self.confidence,
                                 pass_confidence=self.pass_confidence,
                                 prior_sigma=terms.prior_sigma if self.prior_sigma is None else self.prior_sigma,
                                 min_new_for_fail=self.min_new_for_fail, unit_sigma=unit,
                                 run_sigma=terms.run_sigma)

    @property
    def less_sensitive(self) -> bool:
        """Judged with another unit's offset in the error term."""
        return self.other_unit or self.unit_sigma > 0

    def __post_init__(self) -> None:
        if not (0 < self.floor < 10):
            raise ValueError(f"Policy.floor is a relative change (0.05 = 5 %), got {self.floor}")
        if self.min_samples < 2:
            raise ValueError(f"Policy.min_samples must be >= 2, got {self.min_samples}")
        if self.throttle not in THROTTLE_POLICIES:
            raise ValueError(f"Policy.throttle must be one of {THROTTLE_POLICIES}, got {self.throttle!r}")
        if self.dispatch not in DISPATCH_POLICIES:
            raise ValueError(f"Policy.dispatch must be one of {DISPATCH_POLICIES}, got {self.dispatch!r}")
        self.rule_settings()  # RuleSettings validates margin, confidence, prior_sigma, ...


def is_failure(v: Verdict, policy: Policy) -> bool:
    """Whether ``v`` fails the gate: FAIL; MISSING unless allowed; AMBIGUOUS with
    ``fail_on_ambiguous``; and a verdict that could not be reached (INVALID, too few samples)
    unless ``allow_ambiguous`` — a run that measured nothing judgeable must not pass."""
    if v.status is Status.FAIL:
        return True
    if v.status is Status.MISSING:
        return not policy.allow_missing
    if v.undecided:
        return not policy.allow_ambiguous
    return v.status is Status.AMBIGUOUS and policy.fail_on_ambiguous
