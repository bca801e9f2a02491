"""The benchmarks: backend × tactic × problem, parametrized by the fp4bench plugin.

Run `pytest bench` (quick selection), `pytest bench --fp4-full` (every tactic, dense M sweep),
`pytest bench --benchmark-compare` (gate against baselines/<this GPU>/approved.json).
"""

import pytest


@pytest.mark.fp4(kind="dense")
def test_dense(fp4_case, fp4_bench):
    fp4_bench(fp4_case)


@pytest.mark.fp4(kind="grouped")
def test_grouped(fp4_case, fp4_bench):
    fp4_bench(fp4_case)


@pytest.mark.fp4(kind="moe")
def test_moe(fp4_case, fp4_bench):
    fp4_bench(fp4_case)


@pytest.mark.fp4(kind="quant")
def test_quant(fp4_case, fp4_bench):
    fp4_bench(fp4_case)
