"""Placement of cases on the GPUs of a run (``fp4bench.gpus.plan``): whole (backend, problem)
families, longest first onto the least loaded GPU, the same placement whatever the order."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from fp4bench.gpus.plan import SKIPPED_COST, case_cost, place, share


def spec(backend: str, problem: str, tactic: str = "default", elements: int = 0, skip: str = ""):
    return SimpleNamespace(backend=backend, problem=SimpleNamespace(id=problem, operand_elements=elements),
                           tactic=SimpleNamespace(label=tactic), skip_reason=skip)


def cases() -> list[tuple[str, object]]:
    out = []
    for b in ("flashinfer-cutlass", "torch-bf16", "cublaslt"):
        for p, elements in (("moe-big", 2 ** 31), ("dense-a", 2 ** 24), ("dense-b", 2 ** 24), ("dense-c", 2 ** 20)):
            for t in ("default", "t01", "t02"):
                out.append((f"bench/t.py::test[{b}-{t}-{p}]", spec(b, p, t, elements)))
    out.append(("bench/t.py::test_quant[none]", None))
    return out


def test_every_case_of_a_family_runs_on_one_gpu():
    cs = cases()
    slots = share(cs, 3)
    by_family: dict[tuple, set] = {}
    for (nodeid, s), slot in zip(cs, slots):
        key = (s.backend, s.problem.id) if s is not None else nodeid
        by_family.setdefault(key, set()).add(slot)
    assert all(len(v) == 1 for v in by_family.values())
    assert set(slots) == {0, 1, 2}  # every GPU gets work


def test_the_placement_is_the_same_in_every_run_whatever_the_collection_order():
    cs = cases()
    first = dict(zip([n for n, _ in cs], share(cs, 4)))
    for seed in range(5):
        shuffled = cs[:]
        random.Random(seed).shuffle(shuffled)
        assert dict(zip([n for n, _ in shuffled], share(shuffled, 4))) == first


def test_longest_first_onto_the_least_loaded_gpu():
    assert place({"a": 10.0, "b": 9.0, "c": 2.0, "d": 2.0, "e": 1.0}, 2) == {"a": 0, "b": 1, "c": 1, "d": 0, "e": 1}
    # the three heavy MoE families land on three different GPUs
    cs = cases()
    slots = dict(zip([n for n, _ in cs], share(cs, 3)))
    assert len({slots[f"bench/t.py::test[{b}-default-moe-big]"]
                for b in ("flashinfer-cutlass", "torch-bf16", "cublaslt")}) == 3


def test_cost_estimate_and_bad_slot_counts():
    assert case_cost(spec("x", "p", elements=2 ** 30)) == pytest.approx(3.0)  # 1 + 2 bytes per bf16 element
    assert case_cost(spec("x", "p", skip="not on this GPU")) == SKIPPED_COST == case_cost(None)
    with pytest.raises(ValueError, match="at least one GPU"):
        place({"a": 1.0}, 0)
