"""Replays with changing inputs and the kinds of later launches (``measure.replays``)."""

from __future__ import annotations

import pytest
import torch

from fp4bench.measure import replays as later
from fp4bench.measure.verify import ALL_ZERO, MISMATCH, OK, SENTINEL, UNWRITTEN
from fp4bench.reference.bulk import gemm_bulk

CPU = torch.device("cpu")


class Kernel:
    """``out = x * 2`` from whatever ``x`` holds, with a fault from launch ``bad_from`` on."""

    def __init__(self, fault: str = "", bad_from: int = 1):
        self.x, self.out = torch.zeros(4, 8), torch.empty(4, 8)
        self.fault, self.bad_from, self.launches = fault, bad_from, 0
        self.stale = None

    def __call__(self) -> torch.Tensor:
        self.launches += 1
        bad = self.launches >= self.bad_from
        if self.fault == "stale" and bad:  # replays the result of its first replay
            self.out.copy_(self.stale if self.stale is not None else self.x * 2)
            self.stale = self.out.clone() if self.stale is None else self.stale
        elif self.fault == "unwritten" and bad:
            self.out[:2].copy_(self.x[:2] * 2)
        elif self.fault == "zero" and bad:
            self.out.zero_()
        else:
            self.out.copy_(self.x * 2)
        return self.out


def _sets(k: Kernel) -> list[later.OperandSet]:
    a, b = torch.randn(4, 8), torch.randn(4, 8)

    def make(name, x):
        return later.OperandSet(name, lambda: k.x.copy_(x),
                                lambda got: later.check_output(got, x * 2, 1e-6, gemm_bulk(1), k.out))
    return [make("A", a), make("B", b)]


def _run(k: Kernel, n: int = 8) -> later.ReplayReport:
    return later.replay_check(k, lambda: k.out.fill_(SENTINEL), _sets(k), n, "eager calls")


def test_a_right_kernel_passes_every_replay_and_the_first_set_is_loaded_again():
    k = Kernel()
    sets = _sets(k)
    rep = later.replay_check(k, lambda: k.out.fill_(SENTINEL), sets, 6, "eager calls")
    assert rep.result.kind == OK and rep.replays == 6 and rep.failed == 0 and k.launches == 6
    sets[1].load()
    before = k.x.clone()
    sets[0].load()
    assert not torch.equal(before, k.x)
    assert rep.to_extra_info() == {"replays": 6, "replays_failed": 0, "replay_method": "eager calls",
                                   "replay_check": OK}


@pytest.mark.parametrize("fault, bad_from, failed, first, kind", [
    ("zero", 3, 6, 3, ALL_ZERO),          # wrong from the third launch on
    ("stale", 1, 4, 2, MISMATCH),         # the same output whatever the input: every B replay
    ("unwritten", 8, 1, 8, UNWRITTEN),    # only the last replay
])
def test_each_wrong_replay_is_counted_and_the_first_named_with_its_kind(fault, bad_from, failed, first, kind):
    rep = _run(Kernel(fault, bad_from))
    assert rep.result.kind == later.REPLAY_MISMATCH and rep.failed == failed
    set_name = "AB"[(first - 1) % 2]
    assert rep.result.detail.startswith(f"{failed} of 8 replays; first bad: replay {first} (operand set {set_name}): "
                                        f"{kind}")


def test_one_operand_set_cannot_show_a_stale_result():
    """Why the inputs change between replays: the stale kernel passes when they do not."""
    k = Kernel("stale")
    x = torch.randn(4, 8)
    one = later.OperandSet("A", lambda: k.x.copy_(x), lambda got: later.check_output(got, x * 2, 1e-6, gemm_bulk(1), k.out))
    assert later.replay_check(k, lambda: k.out.fill_(SENTINEL), [one], 8, "eager").result.ok
    assert _run(Kernel("stale")).result.kind == later.REPLAY_MISMATCH


def test_replays_for_caps_a_long_call_and_large_outputs_never_below_the_minimum():
    assert later.replays_for(16, 10e-6, 1.0, 1024) == 16
    assert later.replays_for(16, 0.01, 1.0, 1024) == 5        # 5 % of 1 s at 10 ms a call
    assert later.replays_for(16, 0.5, 1.0, 1024) == later.MIN_REPLAYS
    assert later.replays_for(16, None, 1.0, later.MAX_KEPT_BYTES // 8) == 8
    assert later.replays_for(2, 0.5, 1.0, 1024) == 2          # asked for fewer than the minimum
    assert later.replays_for(0, 1e-6, 1.0, 1024) == 0


def test_the_launcher_is_the_eager_call_off_cuda_and_bad_arguments_are_named():
    k = Kernel()
    launch, method, _ = later.launcher(k, CPU, None)
    assert launch is k and method == "eager calls"
    with pytest.raises(ValueError, match="n >= 1 and at least one operand set"):
        later.replay_check(k, lambda: None, [], 4, "eager")


def test_an_output_identical_to_one_that_passed_is_not_classified_again():
    k = Kernel()
    counted = []
    sets = _sets(k)
    for s in sets:
        check = s.check
        s.check = lambda got, check=check: counted.append(1) or check(got)
    assert later.replay_check(k, lambda: k.out.fill_(SENTINEL), sets, 8, "eager").result.ok
    assert len(counted) == 2  # deterministic: one classification per operand set
    counted.clear()
    noisy = Kernel()
    noisy_sets = _sets(noisy)
    for s in noisy_sets:
        check = s.check
        s.check = lambda got, check=check: counted.append(1) or check(got)
    calls = iter(range(100))
    launch = lambda: noisy().add_(next(calls) * 1e-7)  # noqa: E731 (bits differ, values within the bound)
    assert later.replay_check(launch, lambda: noisy.out.fill_(SENTINEL), noisy_sets, 8, "eager").result.ok
    assert len(counted) == 8
    assert later.identical(torch.tensor([float("nan")]), torch.tensor([float("nan")]))
    assert not later.identical(torch.zeros(2), torch.zeros(3))
