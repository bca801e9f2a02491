"""``cutlass_fused_moe`` as a serving engine runs it: the autotuner's GEMM tactics, the library's
defaults (library-choice rows, ``gate.picks``).

``flashinfer-cutlass-moe-tuned`` (SM90, BF16 x MXFP4 "W4A16") and ``flashinfer-cutlass-moe-nvfp4-tuned``
(Blackwell, NVFP4) make the call of ``flashinfer-cutlass-moe`` / ``-nvfp4`` (same operands, same
reference) without ``profile_ids``, ``use_fused_finalize`` and ``tune_max_num_tokens``: the release's
defaults (finalize: True in 0.7.2.post1; in 0.7.4 None, which the call resolves to "fused unless
torch's deterministic algorithms are on"; on Blackwell the fused GEMM2 epilogue reduces the top-k rows
with atomics). ``prepare`` runs the call once under ``flashinfer.autotune(True)``:
``cutlass_fused_moe`` then asks ``AutoTuner.get().choose_one("trtllm::fused_moe::gemm1", [runner],
..., gemm_idx=1)`` and ``"...::gemm2"`` (flashinfer/fused_moe/core.py), which profile every valid
GEMM1 / GEMM2 tactic (``MoERunner.get_valid_tactics``) at each tuning bucket up to 8192 tokens, cache
the picks and answer the one for this token count; the timed calls, outside tuning, get the cached
picks. The row records them as ``tactic: [gemm1, gemm2]`` (absolute profile ids, the values
``profile_ids`` takes), held to the explicit rows of the untuned backend (``compare_with``).
"""

from __future__ import annotations

from typing import Any

import torch

from fp4bench.backends.base import DEFAULT_TACTIC, Prepared, Tactic
from fp4bench.backends.builtin._choice import ChoiceLog
from fp4bench.backends.builtin.flashinfer_moe import FlashInferCutlassMoENVFP4, FlashInferCutlassMoEW4A16
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import Problem

#: the ops ``cutlass_fused_moe`` asks the tuner for (flashinfer/fused_moe/core.py)
GEMM_OPS = ("trtllm::fused_moe::gemm1", "trtllm::fused_moe::gemm2")


class _Tuned:
    """Mixed into an explicit fused-MoE backend: no ``profile_ids``, default finalize, tuned first."""

    choice_row = True
    fused_finalize = None
    #: the explicit backend of the same call (what the tuner's pick is held to)
    explicit: str

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        return [DEFAULT_TACTIC]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        prepared = super().prepare(problem, operands, device)  # type: ignore[misc]
        log = ChoiceLog.on(self.lib.tuner())  # type: ignore[attr-defined]
        # profiles this shape once; later prepares (copies, windows) hit the tuner's cache, as an
        # engine's later calls of a tuned shape do
        with self.lib.autotune(True):  # type: ignore[attr-defined]
            self.run(prepared, DEFAULT_TACTIC)  # type: ignore[attr-defined]
        prepared.args["meta"]["log"] = log
        return prepared

    def _profile_ids(self, prepared: Prepared, tactic: Tactic) -> None:
        return None  # the library asks its tuner

    def library_choice(self, prepared: Prepared) -> dict[str, Any]:
        log: ChoiceLog = prepared.args["meta"]["log"]
        ids = [log.answer(op, self.name)[1] for op in GEMM_OPS]  # type: ignore[attr-defined]
        return {"backend": "cutlass", "tactic": ids, "tuned": True, "compare_with": self.explicit}


class FlashInferCutlassMoEW4A16Tuned(_Tuned, FlashInferCutlassMoEW4A16):
    name = "flashinfer-cutlass-moe-tuned"
    api = "flashinfer.cutlass_fused_moe (BF16 x MXFP4) after autotune(True): the tuner's tactics, default finalize"
    explicit = FlashInferCutlassMoEW4A16.name


class FlashInferCutlassMoENVFP4Tuned(_Tuned, FlashInferCutlassMoENVFP4):
    name = "flashinfer-cutlass-moe-nvfp4-tuned"
    api = "flashinfer.cutlass_fused_moe (NVFP4) after autotune(True): the tuner's tactics, fused finalize"
    explicit = FlashInferCutlassMoENVFP4.name


BACKENDS = [FlashInferCutlassMoEW4A16Tuned(), FlashInferCutlassMoENVFP4Tuned()]
