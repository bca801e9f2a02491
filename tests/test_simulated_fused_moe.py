"""The TRT-LLM-gen fused-MoE rows on a simulated B200 (SM100), end to end on CPU.

``pytest bench`` runs in a child process with the fake FlashInfer (``tests/fakes/sim``, release 0.7.4),
whose ``trtllm_fp4_block_scale_routed_moe`` asks the simulated autotuner for its ``[tile_n, config]``.
With ``--fp4-tactics all`` every listed pair is a row of ``flashinfer-trtllm-moe-nvfp4``, and the planted
``tuned_wrong`` fault makes one pair compute without its output scales and the tuner pick it: that
explicit row and the tuned row must each fail their check by name, the tuned one naming the library's
choice, while the default and the other pairs pass. One child process (seconds: the plugin, the sweep
and the checks of six rows).
"""

from __future__ import annotations

import re

from fakes.flashinfer_mm_fp4 import WRONG_TACTIC
from fakes.flashinfer_trtllm_moe import CONFIGS
from fakes.sim_bench import case_outcomes, run_bench
from fakes.wrapped import unwrapped


def test_each_trtllm_moe_row_runs_and_is_checked_and_a_wrong_tactic_is_named(tmp_path):
    res = run_bench(tmp_path, "--fp4-batches", "1", "-k", "moe", "--fp4-kinds", "moe", "--fp4-tactics", "all",
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
