"""``flashinfer-auto`` and ``flashinfer-auto-tuned``: ``mm_fp4(backend="auto")``, FlashInfer's
default, as a serving engine runs it (library-choice rows, ``gate.picks``).

``flashinfer-auto``: untuned, so the autotuner answers with its fallback, the first backend of the
heuristic's order and that backend's default tactic (flashinfer/gemm/gemm_base.py
``_heuristic_func_mm_fp4``, ``AutoTuner.choose_one``). ``flashinfer-auto-tuned``: ``prepare`` first
runs the call once under ``flashinfer.autotune(True)``, which times every suitable backend and
tactic and caches the pick for the shape; the timed calls then run that pick. Each row records
the backend and tactic the library chose; the availability line names the order ``auto``
applies here and the CUDA (nvcc) and cuDNN versions that decide it.
"""

from __future__ import annotations

from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._mm_fp4 import MmFp4API, MmFp4Backend, auto_reason


#: the capabilities FlashInfer offers this on (the adapter asks the library: ``mm_fp4.is_backend_supported``)
SUPPORTED_SMS = frozenset({100, 103, 110, 120, 121})  # every mm_fp4 backend: gemm_base.py requirement checkers


class FlashInferAuto(MmFp4Backend):
    name = "flashinfer-auto"
    api = "flashinfer.mm_fp4(backend='auto'), untuned: the heuristic's first backend, default tactic"
    library_backend = "auto"
    choice_row = True

    def available_reason(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str:
        return f"flashinfer {lib.version}: {auto_reason(lib, info)}"


class FlashInferAutoTuned(FlashInferAuto):
    name = "flashinfer-auto-tuned"
    api = "flashinfer.mm_fp4(backend='auto') after flashinfer.autotune(True) over the case: the tuner's pick"
    tuned = True


BACKENDS = [FlashInferAuto(), FlashInferAutoTuned()]
