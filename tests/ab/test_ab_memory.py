"""``fp4bench ab`` on a simulated card: an 80 GB GPU (79.2 GiB, as an H100 80GB HBM3 reports it)
and cases that need 48 GiB a process, on in-process fake workers and the simulated clock
(``fakes.gpu_memory``: a prepare that does not fit raises torch's ``OutOfMemoryError``).

One process fits at a time: the sides take turns one process at a time and no allocation ever
fails; a case that does not fit is a resource failure of its own kind (not judged, INCOMPLETE,
both sides' memory figures), never a wrong output, a FAIL, a PASS or "fixed on B"."""

from __future__ import annotations

import dataclasses
import sys

import pytest

from fp4bench.ab.config import AbConfig, Side
from fp4bench.ab.judge import judge, outcome
from fp4bench.ab.report import report
from fp4bench.ab.run import AbRunner
from fp4bench.cli.command import EXIT_INCOMPLETE
from fp4bench.gate.policy import Policy
from fp4bench.gate.rule import RuleSettings
from fp4bench.gate.verdict import Status
from fp4bench.run.case import OUT_OF_MEMORY
from fp4bench.run.sweep import SweepOptions
from fakes import gpu_memory
from fakes import inproc_worker as inproc
from fakes.gpu_memory import GIB, GpuMemory

CARD = int(79.2 * GIB)  # what torch.cuda.mem_get_info reports as total on an H100 80GB HBM3
SWEEP = SweepOptions(models=("glm-5",), batches=(1,), tps=(8,), kinds=("dense",), backends=(gpu_memory.BACKEND,))
A = Side(sys.executable, {inproc.SIDE_ENV: "A"})
B = Side(sys.executable, {inproc.SIDE_ENV: "B"})


def _run(gpu: GpuMemory, lines: list[str] | None = None, sweep: SweepOptions = SWEEP, select=None, **behaviour):
    cfg = AbConfig(sweep=sweep, device="cpu", replicates=3, rounds=4, max_rounds=8, round_samples=4,
                   plugins=(inproc.PLUGIN, gpu_memory.__name__), settings=RuleSettings(floor=0.03))
    sides = {s: gpu.behaviour(s, call_s=1e-3, process_sd=0.002, call_sd=0.002, **behaviour.get(s, {})) for s in "AB"}
    with inproc.workers(sides, seed=1):
        run = AbRunner(A, B, cfg, progress=(lines if lines is not None else []).append).run(select=select)
    return run, judge(run, Policy(floor=0.03))


def test_an_80gb_card_and_48gib_processes_take_turns_one_process_at_a_time_without_running_out():
    """The case of the H100 report: 48 GiB a process, 31 GiB free beside the first. The old plan
    put a slot (one process of each side) in each turn: two 48 GiB processes on an 80 GB card."""
    gpu = GpuMemory(CARD, {"A": 48 * GIB, "B": 48 * GIB})
    lines: list[str] = []
    run, result = _run(gpu, lines)
    assert gpu.out_of_memory == [] and gpu.most == 1
    assert len(run.pairs) == 2 and all(p.capacity == 1 for p in run.pairs)
    for p in run.pairs:
        assert all(len(t) == 1 for t in p.turns) and len(p.turns) == 6
        assert [t[0][0] for t in p.turns] in (list("ABBAAB"), list("BAABBA"))  # adjacent A and B of a slot
        assert p.estimate is not None and p.estimate.est.n_base == 3  # one log-ratio per slot
    assert any("6 turns of 1 process" in line for line in lines)
    assert [(v.status, v.kind) for v in result.verdicts] == [(Status.PASS, "timing")] * 2
    assert outcome(run, result)[0] == 0


def test_a_slower_b_in_turns_of_one_process_fails():
    gpu = GpuMemory(CARD, {"A": 48 * GIB, "B": 48 * GIB})
    run, result = _run(gpu, B={"slowdown": 0.10})
    assert gpu.out_of_memory == [] and [v.status for v in result.verdicts] == [Status.FAIL] * 2


def test_memory_another_process_still_holds_is_released_before_the_next_turn():
    """A1's allocator keeps its 48 GiB after its first release: the free memory read before the
    next turn shows it, the idle processes release again, and only then does B1 capture."""
    gpu = GpuMemory(CARD, {"A": 48 * GIB, "B": 48 * GIB})
    gpu.leak_once("A")
    lines: list[str] = []
    run, result = _run(gpu, lines)
    assert gpu._leak is None  # the leak happened
    assert gpu.out_of_memory == [] and gpu.most == 1
    assert all(v.kind == "timing" for v in result.verdicts)


@pytest.mark.parametrize("short", ["A", "B"])
def test_a_case_that_does_not_fit_on_one_side_is_out_of_memory_with_both_figures(short):
    """One side needs 90 GiB, more than the card: that side's processes raise OutOfMemoryError.
    Not judged (INCOMPLETE), never wrong output, FAIL, PASS or 'fixed on B'."""
    gpu = GpuMemory(CARD, {"A": 48 * GIB, "B": 48 * GIB, short: 90 * GIB})
    run, result = _run(gpu)
    assert gpu.out_of_memory
    for v in result.verdicts:
        assert (v.status, v.kind, v.undecided) == (Status.AMBIGUOUS, OUT_OF_MEMORY, True), v
        assert f"out of memory on {short}" in v.reason and "Tried to allocate 90.00 GiB" in v.reason
        other = "AB".replace(short, "")
        assert f"{other} peak 48.0 GiB a process" in v.reason and f"{short} peak 90.0 GiB" in v.reason, v.reason
        assert "wrong output" not in v.reason and "fixed" not in v.reason
    code, line = outcome(run, result)
    assert code == EXIT_INCOMPLETE and f"2 not judged: 2 {OUT_OF_MEMORY}" in line, line
    assert "out of memory" in report(run, result)


# --- the check step: what it needs beside what the other processes hold ----------------------------

#: two tactics of each problem: their benchmarks follow each other, the processes keep what they
#: cached of the first (the same operands) for the second; "tuned" checks like the autotuned MoE
#: row, whose autotuner needs profiling workspaces beyond what its capture holds
TWO = dataclasses.replace(SWEEP, tactics="all")
TACTICS = {"tactics": ("plain", "tuned")}


def _down(names, by_side):
    """The benchmarks of one problem (GLM-5's shared expert down projection, the cheaper check)."""
    return [n for n in names if "shared_down" in n]


def test_a_check_that_peaks_above_its_capture_beside_held_memory_is_retried_alone_and_sized_on_its_peak():
    """The H100 run: 6 processes hold 10 GiB each of the plain row (all at once), kept for the
    tuned row of the same problem, whose check needs 24 GiB more. The first process's check runs
    out beside them (19.2 GiB free); every other process releases and it checks alone. The plan
    is then sized on the check's 34 GiB, not the capture's 10 GiB: two processes a turn, and no
    check runs out again (sized on the capture, all six would check at once and the sixth would
    run out beside five captures)."""
    gpu = GpuMemory(CARD, {"A": 10 * GIB, "B": 10 * GIB}, check_extra={"tuned": 24 * GIB})
    lines: list[str] = []
    run, result = _run(gpu, lines, sweep=TWO, select=_down, A=TACTICS, B=TACTICS)
    tuned = [p for p in run.pairs if "tuned" in p.name]
    plain = [p for p in run.pairs if "plain" in p.name]
    assert len(tuned) == len(plain) == 1 and run.pairs == plain + tuned
    assert all(not p.turns and p.capacity == 7 and p.memory["peak"] == 10 * GIB for p in plain)  # all at once
    for p in tuned:
        assert p.memory["peak"] == 34 * GIB and p.capacity == 2, p.memory  # the check's peak sizes the turns
        assert len(p.turns) == 3 and all(len(t) == 2 for t in p.turns)
    # one out-of-memory: the tuned row's first check beside the plain row's memory, none after
    assert len(gpu.out_of_memory) == 1 and "Tried to allocate 24.00 GiB" in gpu.out_of_memory[0]
    assert sum("once more with every other process released (79.2 of 79.2 GiB free)" in x for x in lines) == 1
    assert [(v.status, v.kind) for v in result.verdicts] == [(Status.PASS, "timing")] * 2
    assert outcome(run, result)[0] == 0


def test_a_check_that_does_not_fit_alone_is_out_of_memory_naming_the_memory():
    """The tuned row's check needs 90 GiB: it runs out beside the others, again alone: the
    benchmark is out of memory (not judged, INCOMPLETE) with the memory named; the plain rows
    are judged."""
    gpu = GpuMemory(CARD, {"A": 10 * GIB, "B": 10 * GIB}, check_extra={"tuned": 80 * GIB})
    run, result = _run(gpu, sweep=TWO, select=_down, A=TACTICS, B=TACTICS)
    assert len(run.pairs) == 2
    by_name = {v.name: v for v in result.verdicts}
    for p in run.pairs:
        v = by_name[p.name]
        if "plain" in p.name:
            assert (v.status, v.kind) == (Status.PASS, "timing"), v
            continue
        assert (v.status, v.kind, v.undecided) == (Status.AMBIGUOUS, OUT_OF_MEMORY, True), v
        assert "Tried to allocate 90.00 GiB" in v.reason and "79.20 GiB" in v.reason, v.reason
        assert "also alone on the GPU: every other process released, 79.2 of 79.2 GiB free before" in v.reason
        assert "peak 90.0 GiB a process" in v.reason, v.reason
        assert "wrong output" not in v.reason
    code, line = outcome(run, result)
    assert code == EXIT_INCOMPLETE and f"1 PASS, 1 AMBIGUOUS; 1 not judged (1 {OUT_OF_MEMORY})" in line, line


def test_a_later_process_that_runs_out_beside_the_others_reruns_alone_and_the_benchmark_goes_on_in_turns():
    """A's processes need 10 GiB, B's 30 GiB, and A1 captures first: sized on its 10 GiB all six
    would fit, but A2 runs out beside A1, B1 and B2 (70 GiB held). Alone it fits; the plan did
    not hold, so the benchmark goes on in turns sized on the largest peak seen (B's 30 GiB) and
    never more processes at once than held it when A2 ran out: one slot a turn, the released
    processes capturing again in their turn. No other allocation fails, and it is judged."""
    gpu = GpuMemory(CARD, {"A": 10 * GIB, "B": 30 * GIB})
    lines: list[str] = []
    run, result = _run(gpu, lines, select=_down)
    (first,) = run.pairs
    assert len(gpu.out_of_memory) == 1 and "Tried to allocate 10.00 GiB" in gpu.out_of_memory[0]
    assert sum("out of memory in its check beside 3 processes holding memory; once more" in x for x in lines) == 1
    assert first.memory["peak"] == 30 * GIB and first.capacity == 3
    assert len(first.turns) == 3 and all(len(t) == 2 for t in first.turns)
    assert all(p.status == "measured" for p in first.parts) and len(first.parts) == 6
    assert [(v.status, v.kind) for v in result.verdicts] == [(Status.PASS, "timing")]
