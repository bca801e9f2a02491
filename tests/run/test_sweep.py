"""Which cases a run measures: problem-major order, skip reasons, quick vs full tactics."""

from __future__ import annotations

import itertools

import pytest
import torch

from fp4bench.backends.base import Availability, Tactic
from fp4bench.backends.builtin.torch_reference import TorchReference
from fp4bench.workload.problems import GemmProblem
from fp4bench.run.sweep import (CPU_OPERAND_LIMIT_BYTES, FULL_DENSE_M, CaseSpec, SweepOptions, cases_for,
                            operand_bytes, problems_for, quick_tactics)
from fp4bench.workload.decode import decode_problems

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # only its .type is read by cases_for; no CUDA needed


class Fake(TorchReference):
    named_only_on = frozenset()

    def __init__(self, name, kinds=("dense", "grouped"), ok=True, tactics=None, unsupported=None):
        self.name, self.kinds, self.ok = name, frozenset(kinds), ok
        self._tactics = tactics or [Tactic(None, "default")]
        self._unsupported = unsupported
        self.availability_calls = 0

    def availability(self, device):
        self.availability_calls += 1
        return Availability.yes("1") if self.ok else Availability.no(f"{self.name} needs SM100 (this is {device.type})")

    def unsupported_reason(self, problem):
        return self._unsupported(problem) if self._unsupported else super().unsupported_reason(problem)

    def tactics(self, problem, device):
        if isinstance(self._tactics, Exception):
            raise self._tactics
        return list(self._tactics)


def test_problems_follow_the_options_and_are_unique():
    opts = SweepOptions(batches=(1, 16), kinds=("dense", "grouped"))
    ps = problems_for(opts)
    expected = [p for b in (1, 16) for p in decode_problems("glm-5", b) if p.kind != "moe"]
    assert [p.id for p in ps] == [p.id for p in expected]
    assert len({p.id for p in ps}) == len(ps) == 8
    assert problems_for(SweepOptions(batches=(1, 1, 16))) == problems_for(SweepOptions(batches=(1, 16)))
    assert {p.kind for p in problems_for(SweepOptions(batches=(1,), kinds=("moe",)))} == {"moe"}


def test_cases_are_problem_major():
    a, b = Fake("a"), Fake("b", tactics=[Tactic(None, "default"), Tactic(1, "t1")])
    opts = SweepOptions(batches=(1, 16), kinds=("dense",), full=False)
    specs = cases_for(opts, [a, b], CUDA)
    problems = [s.problem.id for s in specs]
    # each problem's cases are contiguous, in the order problems_for gives
    order = [k for k, _ in itertools.groupby(problems)]
    assert order == [p.id for p in problems_for(opts)]
    assert [s.backend for s in specs[:2]] == ["a", "b"]
    assert specs[0].id == f"a-default-{specs[0].problem.id}"
    # availability is asked once per backend, not once per case
    assert a.availability_calls == 1 and b.availability_calls == 1


def test_unavailable_backend_gives_one_skipped_spec_per_problem():
    gone = Fake("gone", kinds=("dense",), ok=False, tactics=[Tactic(None, "default"), Tactic(1, "t1")])
    opts = SweepOptions(batches=(1, 16), kinds=("dense", "grouped"))
    specs = cases_for(opts, [gone], CPU)
    dense = [p for p in problems_for(opts) if p.kind == "dense"]
    assert [s.problem.id for s in specs] == [p.id for p in dense]  # grouped: not its kind, no spec
    assert {s.skip_reason for s in specs} == {"gone: gone needs SM100 (this is cpu)"}


def test_a_named_only_backend_is_skipped_with_its_reason_unless_named():
    """torch-reference runs on a CPU by default, and on a GPU only when named."""
    ref, other = TorchReference(), Fake("other", kinds=("dense",))
    opts = SweepOptions(batches=(1,), kinds=("dense",))
    on_gpu = cases_for(opts, [ref, other], CUDA)
    mine = [s for s in on_gpu if s.backend == "torch-reference"]
    assert mine and all("timed only when named" in s.skip_reason and s.skip_reason.startswith("torch-reference: ")
                        for s in mine)
    assert all(not s.skip_reason for s in on_gpu if s.backend == "other")
    named = SweepOptions(batches=(1,), kinds=("dense",), backends=("torch-reference",))
    assert [s.skip_reason for s in cases_for(named, [ref, other], CUDA)] == ["", ""]
    assert all(not s.skip_reason for s in cases_for(opts, [ref], CPU))


def test_cpu_size_limit_skip_reason():
    big = Fake("big", kinds=("dense", "grouped"))
    opts = SweepOptions(batches=(1,), kinds=("dense", "grouped"))
    specs = {s.problem.kind + s.problem.origin.role: s for s in cases_for(opts, [big], CPU)}
    assert specs["denseshared_gate_up"].skip_reason == ""
    grouped = specs["groupedgate_up"]
    gib = operand_bytes(grouped.problem) / 2 ** 30
    assert gib > CPU_OPERAND_LIMIT_BYTES / 2 ** 30
    assert grouped.skip_reason == (f"grouped operands need {gib:.1f} GiB; not drawn on a CPU-only machine "
                                   "(limit 2 GiB)")
    # the limit is about this machine's memory: a GPU run draws them
    assert all(not s.skip_reason for s in cases_for(opts, [big], CUDA))


def test_operand_bytes():
    p = GemmProblem(3, 5, 16)
    assert operand_bytes(p) == (3 * 16 + 5 * 16) * 6


def test_unsupported_shape_is_a_skipped_spec():
    picky = Fake("picky", kinds=("dense",), unsupported=lambda p: "needs N % 4096 == 0" if p.n % 4096 else None)
    specs = cases_for(SweepOptions(batches=(1,), kinds=("dense",)), [picky], CUDA)
    by_role = {s.problem.origin.role: s for s in specs}
    assert by_role["shared_gate_up"].skip_reason == ""  # N = 4096
    assert by_role["shared_down"].skip_reason == "picky: needs N % 4096 == 0"  # N = 6144


def test_tactic_enumeration_error_is_a_skipped_spec_not_a_collection_crash():
    # FlashInfer's MoE module missing from the JIT cache with JIT disabled raised
    # inside tactics() and took the whole collection down (39 MISSING instead of one backend skipped)
    broken = Fake("broken", kinds=("dense",), tactics=RuntimeError("module fused_moe_90 not in the JIT cache"))
    fine = Fake("fine", kinds=("dense",))
    specs = cases_for(SweepOptions(batches=(1,), kinds=("dense",)), [broken, fine], CUDA)
    assert [s.backend for s in specs] == ["broken", "fine"] * 2
    assert {s.skip_reason for s in specs if s.backend == "broken"} == {
        "broken: could not list its tactics for this problem (RuntimeError: module fused_moe_90 not in the JIT cache)"}
    assert all(not s.skip_reason for s in specs if s.backend == "fine")


def test_backend_filter():
    a, b = Fake("a"), Fake("b")
    specs = cases_for(SweepOptions(batches=(1,), kinds=("dense",), backends=("b",)), [a, b], CUDA)
    assert {s.backend for s in specs} == {"b"} and a.availability_calls == 0


def test_quick_vs_full_tactics():
    tactics = [Tactic(0, "tile128x64"), Tactic(None, "default"), Tactic(1, "tile256x128")]
    t = Fake("t", kinds=("dense",), tactics=tactics)
    quick = cases_for(SweepOptions(batches=(1,), kinds=("dense",)), [t], CUDA)
    assert [s.tactic.label for s in quick] == ["default", "default"]
    full = [s for s in cases_for(SweepOptions(batches=(1,), kinds=("dense",), full=True), [t], CUDA)
            if s.problem.origin.routing != "dense-sweep"]
    assert [s.tactic.label for s in full] == ["tile128x64", "default", "tile256x128"] * 2
    # every tactic without the dense M sweep
    every = cases_for(SweepOptions(batches=(1,), kinds=("dense",), tactics="all"), [t], CUDA)
    assert [s.tactic.label for s in every] == ["tile128x64", "default", "tile256x128"] * 2


@pytest.mark.parametrize(
    ("labels", "picked"),
    [
        ([(3, "t3"), (None, "default")], "default"),
        ([(3, "t3"), (7, "auto")], "auto"),
        ([(3, "t3"), (7, "auto-tuned")], "auto-tuned"),
        ([(3, "t3"), (4, "t4")], "t3"),  # no default: the first one
    ],
)
def test_quick_tactics_picks_the_library_default(labels, picked):
    assert [t.label for t in quick_tactics([Tactic(v, lab) for v, lab in labels])] == [picked]
    assert quick_tactics([]) == []


def test_full_dense_m_sweep():
    assert FULL_DENSE_M == sorted(set(FULL_DENSE_M))
    assert {2 ** i for i in range(15)} <= set(FULL_DENSE_M)  # powers of two 1..16384
    assert min(FULL_DENSE_M) == 1 and max(FULL_DENSE_M) == 16384
    band = [m for m in FULL_DENSE_M if 32 <= m <= 1536]
    assert band == [32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536]  # both band edges in
    assert 2048 in FULL_DENSE_M and 16 in FULL_DENSE_M  # and a point outside on each side


def test_full_adds_the_dense_m_sweep_with_gate_up_shapes():
    opts = SweepOptions(batches=(1,), kinds=("dense",), full=True)
    sweep = [p for p in problems_for(opts) if p.origin.routing == "dense-sweep"]
    assert [p.m for p in sweep] == FULL_DENSE_M
    assert {(p.n, p.k) for p in sweep} == {(4096, 6144)}  # GLM-5 routed gate_up: N = 2I, K = H
    assert problems_for(SweepOptions(batches=(1,), kinds=("grouped",), full=True)) == \
        problems_for(SweepOptions(batches=(1,), kinds=("grouped",)))


def test_options_to_dict_and_spec_defaults():
    d = SweepOptions().to_dict()
    assert d["models"] == ["glm-5"] and d["batches"] == [1, 64, 512] and d["backends"] is None
    s = CaseSpec("x", GemmProblem(1, 2, 16))
    assert s.tactic.label == "default" and s.skip_reason == ""
