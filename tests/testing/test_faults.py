"""The fault-injection backends through the real CaseRunner: each imitated upstream bug must be
caught and named by its own kind, and only where it is injected."""

from __future__ import annotations

import pytest
import torch

from fp4bench.backends.base import DEFAULT_TACTIC
from fp4bench.run.case import FAILED, MEASURED, OUT_OF_MEMORY, CaseRunner
from fp4bench.measure.timing import TimingConfig
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


def test_out_of_memory_is_its_own_kind_and_the_runner_gives_its_memory_back(runner):
    """Not a wrong output: no check ran. The runner's caches are released for the next case."""
    runner.operands(GemmProblem(8, 64, 128), "bf16", "bf16")  # something cached before
    res = runner.run(BACKENDS["fault-oom"], GemmProblem(40, 64, 128), DEFAULT_TACTIC)
    assert res.status == OUT_OF_MEMORY and res.check is None and res.timing is None
    assert res.reason == f"OutOfMemoryError: {faults.OutOfMemory.MESSAGE}"
    assert not runner._ops and not runner._refs


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
