"""The TRT-LLM-gen fused-MoE rows on a simulated B200 (SM100), end to end on CPU.

``pytest bench`` runs in this process (``fakes.sim_bench.bench``) with the fake FlashInfer
(``tests/fakes/sim``, release 0.7.4), whose ``trtllm_fp4_block_scale_routed_moe`` asks the simulated autotuner for its ``[tile_n, config]``.
With ``--fp4-tactics all`` every listed pair is a row of ``flashinfer-trtllm-moe-nvfp4``, and the planted
``tuned_wrong`` fault makes one pair compute without its output scales and the tuner pick it: that
explicit row and the tuned row must each fail their check by name, the tuned one naming the library's
choice, while the default and the other pairs pass.

The b12x fused MoE runs on a simulated RTX PRO 6000 (SM120) the same way: the fake's static kernel
passes, its planted wrong dynamic kernel fails by name.
"""

from __future__ import annotations

import re


from fakes.flashinfer_mm_fp4 import WRONG_TACTIC
from fakes.flashinfer_trtllm_moe import CONFIGS
from fakes.sim_bench import bench, case_outcomes
from fakes.wrapped import unwrapped


def test_each_trtllm_moe_row_runs_and_is_checked_and_a_wrong_tactic_is_named(tmp_path):
    res = bench(tmp_path, "--fp4-batches", "1", "-k", "moe", "--fp4-kinds", "moe", "--fp4-tactics", "all",
                "--fp4-backends", "flashinfer-trtllm-moe-nvfp4,flashinfer-trtllm-moe-nvfp4-tuned",
                "--benchmark-disable", gpu="B200", flashinfer="0.7.4", fault="tuned_wrong")
    got = {re.sub(r"-sim-tiny-.*", "", k): v for k, v in case_outcomes(res).items()}
    wrong = "tile%d-cfg%d" % tuple(CONFIGS[WRONG_TACTIC])
    labels = ["default"] + ["tile%d-cfg%d" % tuple(c) for c in CONFIGS]
    assert got == {**{f"flashinfer-trtllm-moe-nvfp4-{t}": "FAILED" if t == wrong else "PASSED" for t in labels},
                   "flashinfer-trtllm-moe-nvfp4-tuned-default": "FAILED"}, res.stdout[-3000:]
    out = unwrapped(res.stdout)
    assert re.search(rf"flashinfer-trtllm-moe-nvfp4 \[{wrong}\] on \S+: mismatch: ", out), out[-3000:]
    chosen = re.escape(str(list(CONFIGS[WRONG_TACTIC])))
    assert re.search(rf"flashinfer-trtllm-moe-nvfp4-tuned \[default\] on \S+: mismatch: .*\(the library chose "
                     rf"trtllm-gen tactic {chosen} \(tuned\)\)", out), out[-3000:]
    assert res.returncode == 1


def test_the_b12x_moe_row_is_checked_on_sm120_and_its_wrong_dynamic_kernel_is_named(tmp_path):
    """The static kernel (batch 1: 2 routed rows) passes its check; the dynamic one (batch 512: 1024
    routed rows, past the 640-row cutover) drops its alphas and fails by name. nvcc 13.0: b12x MoE
    needs CUDA 13."""
    res = bench(tmp_path, "--fp4-batches", "1,512", "-k", "moe", "--fp4-kinds", "moe",
                "--fp4-backends", "flashinfer-b12x-moe-nvfp4", "--benchmark-disable", gpu="RTX PRO 6000",
                flashinfer="0.7.4", fault="b12x_dynamic_wrong", env={"FP4SIM_NVCC": "13.0"})
    out = unwrapped(res.stdout)
    got = case_outcomes(res)
    assert sorted(got.values()) == ["FAILED", "PASSED"], out[-3000:]
    passed, failed = (next(k for k, v in got.items() if v == s) for s in ("PASSED", "FAILED"))
    assert passed.startswith("flashinfer-b12x-moe-nvfp4-default") and "512" not in passed, got
    assert re.search(r"flashinfer-b12x-moe-nvfp4 \[default\] on \S+: mismatch: ", out), out[-3000:]
    assert "512" in failed, got
    assert res.returncode == 1
