"""The library's own choices on a simulated B200 (SM100) and RTX PRO 6000 (SM120), end to end on CPU.

``pytest bench`` runs with the fake FlashInfer (``tests/fakes/sim``): ``mm_fp4``
with ``auto`` dispatch and an autotuner, ``cutlass_fused_moe`` asking the same tuner. Each planted
fault must end in its own named outcome: an autotuner pick twice as slow as the default
(``mispick``: "autotuner mis-pick", FlashInfer #3537), a tuned tactic that computes wrongly
(``tuned_wrong``: a mismatch naming the library's choice, #3197), and a candidate release whose
``auto`` runs another backend (``auto_switch``: "choice changed", FAIL as it is slower).

Each is a whole ``pytest bench`` session (the plugin, the sweep, the checks) run inside this process as
if it were a fresh one (``fakes/sim/fp4sim_session.py``); the timed ones on the simulated clock
(``fakes.sim_bench.TIMED``), so the simulated device time alone decides every comparison, whatever
this machine's load.
"""

from __future__ import annotations

import json
import re

import pytest

from fakes.sim_bench import TIMED, bench, case_outcomes
from fakes.wrapped import unwrapped

#: per simulated GPU: the environment (nvcc 13 on SM120: b12x is auto's first) and the rows
MACHINES = {
    "B200": ({}, "flashinfer-cutlass,flashinfer-auto-tuned,flashinfer-cutlass-moe-nvfp4,"
                 "flashinfer-cutlass-moe-nvfp4-tuned", "dense,moe"),
    "RTX PRO 6000": ({"FP4SIM_NVCC": "13.0"}, "flashinfer-b12x,flashinfer-auto-tuned", "dense"),
}
ONE_PROBLEM = ("--fp4-batches", "1", "-k", "shared_down or moe")


@pytest.mark.parametrize("gpu", list(MACHINES))
def test_an_autotuner_pick_twice_as_slow_as_the_default_is_named_a_mispick(tmp_path, gpu):
    env, backends, kinds = MACHINES[gpu]
    res = bench(tmp_path, *ONE_PROBLEM, "--fp4-backends", backends, "--fp4-kinds", kinds, gpu=gpu,
                fault="mispick", env={**env, **TIMED})
    got = case_outcomes(res)
    tuned = {k for k in got if "-tuned-" in k}
    assert tuned and all(got[k] == "FAILED" for k in tuned), res.stdout[-3000:]
    assert all(s == "PASSED" for k, s in got.items() if k not in tuned), got
    out = unwrapped(res.stdout)
    explicit = "flashinfer-b12x" if gpu == "RTX PRO 6000" else "flashinfer-cutlass"
    first = "b12x" if gpu == "RTX PRO 6000" else "cutlass"
    # exactly twice: both rows are timed on the simulated clock
    assert re.search(rf"autotuner mis-pick: the autotuner chose {first} tactic 1 \(tuned\), [\d.]+ ms; {explicit} tactic "
                     r"default of the same run takes [\d.]+ ms \(\+100%", out), out[-3000:]
    assert len(re.findall(r"^AUTOTUNER MIS-PICK \S+-tuned on ", out, re.M)) == len(tuned), out[-3000:]
    assert res.returncode == 1


@pytest.mark.parametrize("gpu", list(MACHINES))
def test_a_wrong_tuned_tactic_fails_its_check_naming_the_librarys_choice(tmp_path, gpu):
    env, backends, kinds = MACHINES[gpu]
    res = bench(tmp_path, *ONE_PROBLEM, "--fp4-backends", backends, "--fp4-kinds", kinds, "--benchmark-disable",
                gpu=gpu, fault="tuned_wrong", env=env)
    got = case_outcomes(res)
    tuned = {k for k in got if "-tuned-" in k}
    assert tuned and all(got[k] == "FAILED" for k in tuned), res.stdout[-3000:]
    assert all(s == "PASSED" for k, s in got.items() if k not in tuned), got
    # each failure's reason once: pytest's short summary repeats it untruncated where $CI is set
    named = sorted(set(re.findall(r"-tuned \[default\] on \S+: mismatch: .*?\(the library chose (\S+) tactic (.+?) "
                                  r"\(tuned\)\)", unwrapped(res.stdout))))
    # dense: the wrong tactic; the fused MoE: the wrong GEMM1 tactic with the tuner's GEMM2 tactic
    assert len(named) == len(tuned) and all(t == "2" or t.startswith("[2, ") for _, t in named), (named, res.stdout[-3000:])


@pytest.mark.parametrize("gpu, env, was, now", [
    ("B200", {}, "cutlass", "cudnn"),
    ("RTX PRO 6000", {"FP4SIM_NVCC": "13.0"}, "b12x", "cudnn"),
])
def test_a_candidate_release_whose_auto_runs_another_backend_is_a_changed_choice(tmp_path, gpu, env, was, now):
    """Baseline under 0.7.2.post1, candidate 0.7.4 whose ``auto`` puts cuDNN first (planted): the
    ``flashinfer-auto`` row FAILs (cuDNN is 1.5x CUTLASS's simulated time) and says what changed."""
    args = ("--fp4-batches", "1", "-k", "shared_down", "--fp4-backends", "flashinfer-auto", "--fp4-kinds", "dense")
    base = tmp_path / "base.json"
    res = bench(tmp_path, *args, "--fp4-save-baseline", str(base), gpu=gpu, fault="auto_switch", env={**env, **TIMED})
    assert res.returncode == 0, res.stdout[-3000:]
    (row,) = json.loads(base.read_text())["benchmarks"]
    assert row["extra_info"]["choice"]["backend"] == was
    res = bench(tmp_path, *args, "--fp4-baseline-file", str(base), gpu=gpu, flashinfer="0.7.4", fault="auto_switch",
                env={**env, **TIMED})
    out = unwrapped(res.stdout)
    assert res.returncode == 1 and "what changed: flashinfer 0.7.2.post1 → 0.7.4" in out, out[-3000:]
    assert re.search(rf"choice changed: {was} tactic -1 → {now} tactic -1 \([\d.]+ ms → [\d.]+ ms\)", out), out[-3000:]
    assert re.search(r"^FAIL\s+\S+flashinfer-auto-default-", out, re.M), out[-3000:]

