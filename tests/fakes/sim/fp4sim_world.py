"""The simulated Blackwell machine of one test process, chosen by environment variables.

``FP4SIM_GPU``      a name of ``fakes.arch.GPUS`` ("B200", "RTX PRO 6000", ...)
``FP4SIM_FAULT``    one fault (module ``FAULTS``), or empty for correct libraries
``FP4SIM_LIBRARY``  "" (FlashInfer 0.7.2.post1 as released), "reordered" (two configs swapped),
                    "dropped" (one config removed): a simulated FlashInfer upgrade
``FP4SIM_TORCH``    the torch the sgl_kernel wheel sees ("2.9.1": the sglang runner stack)
``FP4SIM_CALL_S``   simulated device time of a dense launch (see ``CALL_S``)
``FP4SIM_CLOCK``    "sim": the run times on the simulated clock (read by ``fp4sim``, ``fp4sim_ab``)
``FP4SIM_FLASHINFER`` the simulated FlashInfer release, "0.7.2.post1" (default) or "0.7.4"
                    (``fakes.flashinfer_releases``); put ``dists/<release>`` on the path too, so
                    its distribution metadata (the fingerprint's version) is that release's
``FP4SIM_NVCC``     the CUDA version FlashInfer reads from nvcc (default "12.9"), which orders ``auto``
``FP4SIM_CUDNN``    the cuDNN backend version (default 91400; empty: cudnn-frontend not importable)
``FP4SIM_CUDNN_FRONTEND`` cudnn-frontend's version (default "1.14.0")
``FP4SIM_CUTE_DSL`` "1" (default): FlashInfer finds the CuTe DSL (b12x, cute-dsl); "0": not

Faults of the library's own choices (``fakes.flashinfer_mm_fp4``): ``mispick`` (the autotuner picks a
tactic twice as slow as the default), ``tuned_wrong`` (the tuner's pick computes a wrong result),
``auto_switch`` (release 0.7.4's ``auto`` puts another backend first: the candidate of an upgrade).
``b12x_dynamic_wrong``: the b12x fused MoE's dynamic kernel (large batches) drops its alphas.

One instance of each fake library per process; the fake packages and the ``fp4sim`` pytest
plugin both read them from here.
"""

from __future__ import annotations

import os

from fakes import flashinfer_releases as releases
from fakes.arch import GPUS
from fakes.decode import Misread
from fakes.flashinfer import SM100_CONFIGS, SM120_CONFIGS, FakeFlashInfer
from fakes.flashinfer_b12x_moe import FakeB12xMoE
from fakes.flashinfer_mm_fp4 import FakeAutoTuner, FakeMmFp4
from fakes.flashinfer_moe import FakeFusedMoE
from fakes.flashinfer_trtllm_moe import FakeTrtllmMoE
from fakes.quantize import ISSUE_3398_M, FakeQuantizer
from fakes.sgl_kernel import FakeSglKernel
from fakes.torch_scaled_mm import FakeTorchScaledMM
from fp4bench.testing.faults import ZERO_BAND

FAULTS = ("zero_band", "unswizzled_scales", "gate_up_swapped", "wrong_alpha", "can_implement", "arg_check",
          "quant_zero_scales", "late", "copy", "padding", "mispick", "tuned_wrong", "auto_switch", "b12x_dynamic_wrong")
#: the faults of later launches (the dense FlashInfer fake's ``later``; ``measure.replays``)
LATER_FAULTS = ("late", "copy", "padding")
#: the faults of the autotuner, planted in the dense and fused-MoE tuners alike
TUNER_FAULTS = ("mispick", "tuned_wrong")
#: the release whose ``auto`` order the ``auto_switch`` fault changes (the candidate of the upgrade)
SWITCHED_RELEASE = "0.7.4"

GPU = GPUS[os.environ.get("FP4SIM_GPU", "B200")]
FAULT = os.environ.get("FP4SIM_FAULT", "")
LIBRARY = os.environ.get("FP4SIM_LIBRARY", "")
FLASHINFER = releases.release(os.environ.get("FP4SIM_FLASHINFER") or releases.DEFAULT).version
if FAULT and FAULT not in FAULTS:
    raise ValueError(f"FP4SIM_FAULT={FAULT!r}: not one of {FAULTS}")

_MIS = Misread(scales_linear=FAULT == "unswizzled_scales", ignore_global=FAULT == "wrong_alpha")
#: the tactic index that throws ``can_implement`` under that fault (dense and MoE GEMM1)
FAILING_TACTIC = 1
#: configs of the simulated build: the first ``N_CONFIGS`` of the released list (few, to stay fast)
N_CONFIGS = 4
REORDERED = (1, 2)   # FP4SIM_LIBRARY=reordered swaps these two indices
DROPPED = 2          # FP4SIM_LIBRARY=dropped removes this index
#: ``FP4SIM_CALL_S``: simulated device time of one dense launch in seconds (default 0: none, the
#: fake's CPU time). A timing comparison sets it and runs on the simulated clock
#: (``FP4SIM_CLOCK=sim``, ``fp4sim``), which a launch advances by exactly this; a stream-K
#: workspace memset, under a release that re-initializes per call, adds a fifth of it
#: ([estimate] ~2 us on a ~10 us decode-size FP4 GEMM on SM120).
CALL_S = float(os.environ.get("FP4SIM_CALL_S") or 0)
STREAMK_MEMSET_S = CALL_S / 5


def _configs(full: tuple[str, ...]) -> list[str]:
    cfg = list(full[:N_CONFIGS])
    if LIBRARY == "reordered":
        i, j = REORDERED
        cfg[i], cfg[j] = cfg[j], cfg[i]
    elif LIBRARY == "dropped":
        del cfg[DROPPED]
    elif LIBRARY:
        raise ValueError(f"FP4SIM_LIBRARY={LIBRARY!r}: use reordered or dropped")
    return cfg


DENSE = FakeFlashInfer(
    failing={FAILING_TACTIC: "can_implement"} if FAULT == "can_implement" else {},
    misread=_MIS, config_lists={"sm100": _configs(SM100_CONFIGS), "sm120": _configs(SM120_CONFIGS)},
    reject="mat2Scale must be SF_DTYPE (uint8)" if FAULT == "arg_check" else None,
    zero_band=ZERO_BAND if FAULT == "zero_band" else None, later=FAULT if FAULT in LATER_FAULTS else None,
    version=FLASHINFER, call_s=CALL_S, streamk_memset_s=STREAMK_MEMSET_S)
TUNER = FakeAutoTuner(version=FLASHINFER)
_TUNER_FAULT = FAULT if FAULT in TUNER_FAULTS else None
MM = FakeMmFp4(dense=DENSE, tuner=TUNER, sm=(GPU.major, GPU.minor), cuda=os.environ.get("FP4SIM_NVCC") or "12.9",
               cudnn=int(os.environ.get("FP4SIM_CUDNN", "91400")) if os.environ.get("FP4SIM_CUDNN", "x") else None,
               cudnn_frontend=os.environ.get("FP4SIM_CUDNN_FRONTEND") or "1.14.0",
               cute_dsl=os.environ.get("FP4SIM_CUTE_DSL", "1") == "1", fault=_TUNER_FAULT,
               switched=FAULT == "auto_switch" and FLASHINFER == SWITCHED_RELEASE)
if MM.cudnn is None:
    MM.cudnn_frontend = None
MOE = FakeFusedMoE(
    version=FLASHINFER, tuner=TUNER, tuner_fault=_TUNER_FAULT, call_s=CALL_S,
    failing={FAILING_TACTIC: "can_implement"} if FAULT == "can_implement" else {},
    fault={"gate_up_swapped": "gate_first", "unswizzled_scales": "scales_linear", "wrong_alpha": "ignore_global",
           "arg_check": "arg_check"}.get(FAULT))
#: the TRT-LLM-gen fused MoE (``trtllm_fp4_block_scale_routed_moe``), asking the same tuner
TRTLLM_MOE = FakeTrtllmMoE(
    version=FLASHINFER, tuner=TUNER, tuner_fault=_TUNER_FAULT, call_s=CALL_S,
    fault={"gate_up_swapped": "gate_first", "unswizzled_scales": "scales_linear",
           "wrong_alpha": "ignore_global"}.get(FAULT))
#: the b12x fused MoE (``b12x_fused_moe``, SM120/121), refusing CUDA < 13 as FlashInfer reads it (nvcc)
B12X_MOE = FakeB12xMoE(
    version=FLASHINFER, cuda=MM.cuda, call_s=CALL_S,
    fault={"gate_up_swapped": "gate_first", "unswizzled_scales": "scales_linear",
           "wrong_alpha": "ignore_alphas", "b12x_dynamic_wrong": "dynamic_wrong"}.get(FAULT))
SGL = FakeSglKernel(sm=120 if GPU.major == 12 else 100, misread=_MIS)
TORCH = FakeTorchScaledMM(misread=_MIS)
#: FlashInfer's activation quantizers (``quant_zero_scales``: FlashInfer #3398) and sgl_kernel's
# any K: sim-tiny has no K = 2048 (the K of the upstream report)
QUANT = FakeQuantizer(zero_scales=ISSUE_3398_M if FAULT == "quant_zero_scales" else frozenset(), version=FLASHINFER)
SGL_QUANT = FakeQuantizer(stale_padding=0x5A)  # sgl_kernel leaves its scale padding unwritten


def launched() -> list[str]:
    """Kernel names launched so far by every fake (the simulated profiler's view)."""
    return DENSE.kernels + MOE.kernels + TRTLLM_MOE.kernels + B12X_MOE.kernels + QUANT.kernels + SGL_QUANT.kernels
