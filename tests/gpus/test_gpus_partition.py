"""``fp4bench.gpus.partition`` (families over GPUs, longest-first) and ``gpus.select`` (``--gpus``)."""

from __future__ import annotations

import pytest

from fp4bench.gpus.devices import Gpu
from fp4bench.gpus.partition import assign, family_cost, partition
from fp4bench.gpus.select import one_model, select_gpus
from fp4bench.workload.problems import GemmProblem, GroupedProblem


def test_longest_first_onto_the_least_loaded_gpu():
    costs = {"a": 7.0, "b": 5.0, "c": 4.0, "d": 3.0, "e": 1.0}
    # a -> 0; b -> 1; c -> 1 (5 < 7); d -> 0 (7 < 9); e -> 1 (9 < 10)
    assert partition(costs, 2) == [["a", "d"], ["b", "c", "e"]]
    assert partition(costs, 1) == [["a", "b", "c", "d", "e"]]
    assert partition(costs, 6)[5] == []  # more GPUs than families: some get none


def test_the_result_depends_only_on_the_costs_not_their_order():
    costs = {("x", f"p{i}"): float(i % 3) for i in range(12)}
    shuffled = dict(reversed(list(costs.items())))
    assert partition(costs, 3) == partition(shuffled, 3)
    # equal costs: ties broken by key, so identical families always land the same way
    assert partition({"b": 1.0, "a": 1.0}, 2) == [["a"], ["b"]]


def test_assign_keeps_a_family_together_and_adds_its_costs():
    where = assign([("f", 1.0), ("g", 1.5), ("f", 1.0)], 2)
    assert where == {"f": 0, "g": 1}


def test_family_cost_ranks_a_grouped_layer_above_a_dense_one():
    dense = GemmProblem(1, 4096, 6144)
    grouped = GroupedProblem((1,) * 256, 4096, 6144)
    assert family_cost(grouped, 1) > 2 * family_cost(dense, 1) > 0
    assert family_cost(dense, 0) == 0 and family_cost(dense, 3) == pytest.approx(3 * family_cost(dense, 1))


@pytest.mark.parametrize("costs, n, match", [({"a": 1.0}, 0, "at least one GPU"), ({"a": -1.0}, 1, "cost"),
                                             ({"a": float("nan")}, 1, "cost")])
def test_bad_partition_inputs(costs, n, match):
    with pytest.raises(ValueError, match=match):
        partition(costs, n)


VISIBLE = [Gpu(0, "GPU-aa11", "H200"), Gpu(1, "GPU-bb22", "H200"), Gpu(2, "GPU-cc33", "H200")]


def test_select_by_index_uuid_or_prefix_in_the_order_given():
    assert select_gpus("all", VISIBLE) == VISIBLE
    assert [g.uuid for g in select_gpus("2,GPU-aa", VISIBLE)] == ["GPU-cc33", "GPU-aa11"]
    assert select_gpus(" GPU-bb22 ", VISIBLE) == [VISIBLE[1]]


@pytest.mark.parametrize("spec, match", [
    ("3", "GPU 3 is not visible (3 visible: 0 GPU-aa11, 1 GPU-bb22, 2 GPU-cc33)"),
    ("-1", "GPU -1 is not visible"),
    ("0,1,2,0", "asks for 4 GPUs, 3 are visible"),
    ("0,GPU-aa11", "names GPU 0 (GPU-aa11) twice"),
    ("GPU-", "matches 3 GPUs"),
    ("GPU-ff", "GPU 'GPU-ff' is not visible"),
    ("", "expected all or comma-separated"),
    ("1,", "expected all or comma-separated"),
])
def test_select_errors_name_the_value_and_the_visible_gpus(spec, match):
    with pytest.raises(ValueError, match=match.replace("(", r"\(").replace(")", r"\)")):
        select_gpus(spec, VISIBLE)


def test_no_visible_gpu_and_mixed_models_are_refused():
    with pytest.raises(ValueError, match="no GPU is visible"):
        select_gpus("all", [])
    one_model(VISIBLE)
    with pytest.raises(ValueError, match="different models"):
        one_model([*VISIBLE, Gpu(3, "GPU-dd44", "L40S")])
