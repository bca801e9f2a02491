"""``fp4bench ab`` and buffer placement: every capture rotates over ``--min-copies`` operand
copies, each its own allocation, so one placement set per process (``--placement process``, the
default) already averages several placements; ``--placement round`` also times every round
after a process's first in fresh device memory (on an H200 a memory-bound grouped bf16 row moved
by +-4-6 % between allocations of one process, 0.2 % within one: docs/results-h200.md, run 19)."""

from __future__ import annotations

import sys
from dataclasses import asdict

import pytest

from fp4bench.ab.config import AbConfig, Side

from fp4bench.ab.run import AbRunner
from fp4bench.gate.rule import RuleSettings
from fp4bench.measure.timing import TimingConfig
from fp4bench.run.sweep import SweepOptions
from fp4bench.run.worker.child import Child, operand_digest
from fakes.paths import FAKES as FAKES_PATH

FAKES = str(FAKES_PATH)
#: every worker is an in-process fake on a simulated clock (tests/conftest.py); the ab_env
#: backend reads each fake process's own environment, so a side's variables act as in a real worker
pytestmark = pytest.mark.usefixtures("sim_workers")
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=("ab-spin",),
                     tactics="all")


def test_a_place_round_times_the_same_bytes_in_new_memory():
    ch = Child({"device": "cpu", "plugins": [], "timing": asdict(TimingConfig(calls_per_sample=1, warmup_calls=1)),
                "cold_l2": True, "seed": 0})
    # the smallest GLM-5 dense shapes (TP 8): what is tested is where the operands live, not their size
    sweep = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=("torch-bf16",))
    case = [c for c in ch.cases({"sweep": sweep.to_dict()})["cases"] if not c["skip_reason"]][0]["case"]
    assert ch.time({"case": case, "samples": 3})["status"] == "measured"
    (ops,) = ch.runner._ops.values()
    digest = operand_digest(ops)
    assert ch.time({"case": case, "samples": 3})["status"] == "measured"
    assert next(iter(ch.runner._ops.values())) is ops  # a plain round reuses the capture
    assert ch.time({"case": case, "samples": 3, "place": True})["status"] == "measured"
    (again,) = ch.runner._ops.values()
    assert again is not ops and operand_digest(again) == digest  # new memory, the same bytes


@pytest.mark.parametrize("placement", ["round", "process"])
def test_rounds_after_the_first_are_placed_afresh_only_with_round_placement(monkeypatch, placement):
    sent: list[tuple[str, dict]] = []
    ask = AbRunner._ask

    def recording(self, pid, msg, what):
        sent.append((pid, dict(msg)))
        return ask(self, pid, msg, what)

    monkeypatch.setattr(AbRunner, "_ask", recording)
    a = Side(sys.executable, {"PYTHONPATH": FAKES, "FAKE_TACTICS": "t0"})
    cfg = AbConfig(sweep=SWEEP, device="cpu", replicates=2, rounds=3, max_rounds=3, round_samples=3, timeout_s=60,
                   plugins=("ab_env",), settings=RuleSettings(floor=5.0), placement=placement, extra_pairs=0)
    run = AbRunner(a, a, cfg).run()
    assert run.pairs and all(p.a.status == p.b.status == "measured" for p in run.pairs)
    for pid in ("A1", "A2", "B1", "B2"):
        rounds = [m for p, m in sent if p == pid and m.get("op") == "time" and m["samples"] == 3 and "place" in m]
        assert len(rounds) == 3 * len(run.pairs)
        per_benchmark = [[m["place"] for m in rounds[i:i + 3]] for i in range(0, len(rounds), 3)]
        want = [False, True, True] if placement == "round" else [False, False, False]
        assert per_benchmark == [want] * len(run.pairs), pid


def test_placement_must_be_round_or_process():
    with pytest.raises(ValueError, match="--placement"):
        AbConfig(sweep=SWEEP, placement="window")


def test_by_default_a_process_keeps_its_placement_set_and_the_workers_get_the_copy_rule():
    from fp4bench.ab.run import _init
    from fp4bench.cli.ab import build_parser

    cfg = AbConfig(sweep=SWEEP)
    args = build_parser().parse_args(["--a", "python3", "--b", "python3"])
    # left out, the runner's rule: MIN_COPIES (4) on a GPU, one copy on a CPU
    assert cfg.placement == args.placement == "process" and cfg.min_copies is None and args.min_copies is None
    default = Child({**_init(Side(sys.executable), cfg), "device": "cpu"}).runner
    assert default.min_copies == 4 and default.cpu_copies == 1
    init = _init(Side(sys.executable), AbConfig(sweep=SWEEP, min_copies=6))
    assert init["min_copies"] == 6 and Child({**init, "device": "cpu"}).runner.min_copies == 6
