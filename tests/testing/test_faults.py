"""The fault-injection backends through the real CaseRunner: each imitated upstream bug must be
caught and named by its own kind, and only where it is injected."""

from __future__ import annotations

import pytest
import torch

from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.run.case import FAILED, MEASURED, OUT_OF_MEMORY, CaseRunner
from fp4bench.measure.timing import TimingConfig
from fp4bench.measure.replays import COPY_MISMATCH, READS_PADDING, REPLAY_MISMATCH
from fp4bench.measure.verify import ALL_ZERO, MISMATCH, NAN_INF, UNWRITTEN
from fp4bench.workload.problems import GemmProblem
from fp4bench.testing import faults

CPU = torch.device("cpu")
FAST = TimingConfig(mode="cpu", warmup_calls=0, min_samples=3, max_samples=3, time_budget_s=0.0,
                    target_rel_ci=None)  # timing is not the subject here
BACKENDS = {b.name: b for b in faults.BACKENDS}


@pytest.fixture(scope="module")
def runner() -> CaseRunner:
    return CaseRunner(CPU, FAST)


def test_all_fault_backends_are_cpu_dense_nvfp4():
    assert {"fault-zero-band", "fault-unwritten", "fault-nan", "fault-bitflip"} <= set(BACKENDS)
    for b in BACKENDS.values():
        assert b.availability(CPU).ok and b.kinds == {"dense"} and b.act_format == "nvfp4"


@pytest.mark.parametrize("m", [1, 2, 16, 31, 32, 33, 64, 512, 1536, 1537, 2048])
def test_zero_band_is_all_zero_exactly_inside_32_to_1536(runner, m):
    res = runner.run(BACKENDS["fault-zero-band"], GemmProblem(m, 64, 128), DEFAULT_TACTIC)
    if 32 <= m <= 1536:
        assert res.status == FAILED and res.check.kind == ALL_ZERO
        assert res.reason.startswith(f"all-zero output: all {m * 64} outputs are 0 while max|ref| = ")
        assert res.timing is None
    else:
        assert res.status == MEASURED and res.check.kind == "ok", res.reason


@pytest.mark.parametrize(("m", "tiles"), [(100, "[0]"), (200, "[1]"), (300, "[2]")])
def test_unwritten_last_tile(runner, m, tiles):
    res = runner.run(BACKENDS["fault-unwritten"], GemmProblem(m, 64, 128), DEFAULT_TACTIC)
    assert res.status == FAILED and res.check.kind == UNWRITTEN
    rows = m - (m - 1) // 128 * 128
    assert res.reason == f"unwritten tiles: {rows * 64} elements in 1 row-tile(s) of 128 {tiles}"


def test_nan(runner):
    res = runner.run(BACKENDS["fault-nan"], GemmProblem(40, 64, 128), DEFAULT_TACTIC)
    assert res.status == FAILED and res.check.kind == NAN_INF
    assert res.reason == "NaN/Inf: 1 elements in 1 row-tile(s) of 128 [0]"


@pytest.mark.parametrize("m", [1, 40, 300])
def test_bitflip(runner, m):
    res = runner.run(BACKENDS["fault-bitflip"], GemmProblem(m, 64, 128), DEFAULT_TACTIC)
    assert res.status == FAILED and res.check.kind == MISMATCH
    assert res.reason.startswith(f"mismatch: 1/{m * 64} elements beyond the bound")


# -- later launches: replays, rotating copies, scale padding (measure.replays) ----------------

LATER = GemmProblem(16, 64, 128)


@pytest.mark.parametrize("name, first", [("fault-late", ALL_ZERO), ("fault-drift", MISMATCH)])
def test_a_backend_right_for_two_launches_and_wrong_after_fails_as_replay_mismatch(name, first):
    res = CaseRunner(CPU, FAST).run(BACKENDS[name], LATER, DEFAULT_TACTIC)
    assert res.status == FAILED and res.check.kind == REPLAY_MISMATCH, res.reason
    # every replay came after the two checked launches and the timed ones: all of them wrong
    assert res.reason.startswith(f"replay mismatch: 4 of 4 replays; first bad: replay 1 (operand set A): {first}")
    assert res.extra_info["check"] == "ok"  # its first two launches passed
    assert res.extra_info["replays_failed"] == res.extra_info["replays"] == 4


def test_drift_is_caught_even_when_only_the_replays_run():
    """measure=False (fp4bench ab's check step): the check's two launches, then the replays."""
    res = CaseRunner(CPU, FAST).run(BACKENDS["fault-drift"], LATER, DEFAULT_TACTIC, measure=False)
    assert res.status == FAILED and res.check.kind == REPLAY_MISMATCH
    # launches 3, 4, ... drift 0.5 %, 1 %, ...: the first replay is within the bound at K = 128,
    # the later ones are not
    assert "first bad: replay " in res.reason and res.extra_info["replays_failed"] >= 1


def test_a_backend_wrong_on_every_copy_but_the_first_fails_as_copy_mismatch_when_copies_are_made():
    backend = faults.CopyFault()
    assert CaseRunner(CPU, FAST).run(backend, LATER, DEFAULT_TACTIC).status == MEASURED  # one copy: unseen
    res = CaseRunner(CPU, FAST, min_copies=3).run(faults.CopyFault(), LATER, DEFAULT_TACTIC)
    assert res.status == FAILED and res.check.kind == COPY_MISMATCH
    assert res.reason.startswith("copy mismatch: rotating copy 2 of 3 (its own allocation, the same bytes) gave "
                                 "mismatch: ")
    assert res.timing is None


@pytest.mark.parametrize("m, k, padded", [(16, 128, True), (128, 64, False), (128, 96, True)])
def test_a_backend_reading_scale_padding_fails_as_reads_scale_padding_where_there_is_padding(m, k, padded):
    """Padding exists where M is not a multiple of 128 or K/16 not of 4 (K = 96: 6 columns -> 8)."""
    res = CaseRunner(CPU, FAST).run(faults.ReadsPadding(), GemmProblem(m, 64, k), DEFAULT_TACTIC)
    if not padded:
        assert res.status == MEASURED and res.extra_info["scale_padding_poisoned"] == 0
        return
    assert res.status == FAILED and res.check.kind == READS_PADDING, res.reason
    assert "with zeros there it passes" in res.reason and "NaN/Inf" in res.reason
    assert res.extra_info["scale_padding_poisoned"] > 0


@pytest.mark.parametrize("min_copies", [None, 2])
def test_the_clean_reference_passes_every_later_check(min_copies):
    from fp4bench.backends.builtin.torch_reference import TorchReference

    res = CaseRunner(CPU, FAST, min_copies=min_copies).run(TorchReference(), LATER, DEFAULT_TACTIC)
    assert res.status == MEASURED and res.extra_info["replays_failed"] == 0
    assert res.timing.rotating_copies == (min_copies or 1)


def test_out_of_memory_is_its_own_kind_and_the_runner_gives_its_memory_back(runner):
    """Not a wrong output: no check ran. The runner's caches are released for the next case."""
    runner.operands(GemmProblem(8, 64, 128), "bf16", "bf16")  # something cached before
    res = runner.run(BACKENDS["fault-oom"], GemmProblem(40, 64, 128), DEFAULT_TACTIC)
    assert res.status == OUT_OF_MEMORY and res.check is None and res.timing is None
    assert res.reason == f"OutOfMemoryError: {faults.OutOfMemory.MESSAGE} (also with every cached operand set released)"
    assert not runner._ops and not runner._refs


def test_a_case_out_of_memory_beside_the_runners_caches_runs_again_once_they_are_released(runner):
    """The H100 80GB sweep: a b64 MoE case ran out of memory beside what earlier cases left cached.
    A backend that fits only when nothing else is cached is measured after one release; with
    nothing cached the first out-of-memory is final (no second try that cannot differ)."""

    class FitsAlone(faults.OutOfMemory):
        name = "fits-alone"

        def prepare(self, problem, operands, device):
            if any(key[0] != problem.id for key in [*runner._ops, *runner._refs]):  # another problem's sets
                raise torch.OutOfMemoryError(self.MESSAGE)
            return TorchReference().prepare(problem, operands, device)

        def run(self, prepared, tactic):
            return TorchReference().run(prepared, tactic)

    from fp4bench.backends.builtin.torch_reference import TorchReference

    runner.run(TorchReference(), GemmProblem(8, 64, 128), DEFAULT_TACTIC)  # leaves its operands cached
    res = runner.run(FitsAlone(), GemmProblem(40, 64, 128), DEFAULT_TACTIC)
    assert res.status == MEASURED, res.reason
    empty = CaseRunner(torch.device("cpu"), runner.timing)
    res = empty.run(BACKENDS["fault-oom"], GemmProblem(40, 64, 128), DEFAULT_TACTIC)
    assert res.status == OUT_OF_MEMORY and res.reason == f"OutOfMemoryError: {faults.OutOfMemory.MESSAGE}"


def test_a_worker_answers_out_of_memory_with_its_memory_report(isolated_registry):
    """The worker protocol: status ``out of memory`` (off CUDA its memory report is None), never
    ``failed``; the worker stays usable."""
    from fp4bench.run.settings import RunnerSettings
    from fp4bench.run.worker import protocol
    from fp4bench.run.worker.child import answer, open_child

    child, hello = open_child(RunnerSettings(device="cpu", plugins=("fp4bench.testing.faults",)).to_init(), 1)
    assert hello["type"] == "ready"
    case = protocol.encode_case("fault-oom", GemmProblem(16, 64, 128), "default")
    reply = answer(child, {"op": "check", "case": case})
    assert reply["status"] == OUT_OF_MEMORY and "memory" in reply and "CUDA out of memory" in reply["reason"]
    ok = answer(child, {"op": "check", "case": protocol.encode_case("torch-bf16", GemmProblem(16, 64, 128), "default")})
    assert ok["status"] == MEASURED
