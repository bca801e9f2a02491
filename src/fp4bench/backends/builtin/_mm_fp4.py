"""``flashinfer.mm_fp4`` called as a serving engine calls it: one backend named, or ``"auto"``.

The shared part of the ``mm_fp4`` rows (one module per backend: ``flashinfer_auto.py``,
``flashinfer_cudnn.py``, ``flashinfer_b12x.py``, ``flashinfer_cute_dsl.py``,
``flashinfer_cutedsl_low_latency.py``, ``flashinfer_trtllm.py``). The call is the library's public
one (flashinfer/gemm/gemm_base.py ``mm_fp4``)::

    mm_fp4(a, w.T, a_sf, w_sf.T, alpha, torch.bfloat16, out, block_size=16, backend=B)

with the operands of ``flashinfer-cutlass`` (``nvfp4_inputs``: 128x4 swizzled scales, fp32 alpha
on the device; ``trtllm``: the weight shuffled as that backend reads it). ``mm_fp4`` builds one
runner per backend (for ``"auto"``: the heuristic's list ``mm_fp4.suitable_auto_backends``) and runs what
``AutoTuner.choose_one`` answers; outside
autotuning that is the first runner with tactic -1, unless the tuner's cache holds a pick for the
shape. An untuned row calls under ``autotune(False, skip_ops={"fp4_gemm"})`` (the tuner answers
``(runners[0], -1)`` without looking at its cache: what a caller that never tuned gets); a tuned row
tunes the shape in ``prepare`` and then calls plainly. Each row records the answer
(``_choice.ChoiceLog``) as its ``library_choice``.

``auto``'s order (``_heuristic_func_mm_fp4``, the same in 0.7.2.post1 and 0.7.4) depends on the
CUDA version FlashInfer reads (``flashinfer.jit.cpp_ext.get_cuda_version``: ``<cuda_home>/bin/nvcc
--version``, else ``torch.version.cuda``), the cuDNN backend version and the GPU: SM120 with CUDA >=
12.9: b12x, cutlass, cudnn; CUDA >= 13 with cudnn-frontend importable and cuDNN >= 9.15: cudnn,
cutlass (SM103: cutlass, cudnn; SM107: cudnn, cutlass, cute-dsl); otherwise cutlass, cudnn (SM107:
cutlass, cudnn, cute-dsl). Where FlashInfer found the CuTe DSL, ``cutedsl_low_latency`` comes last
on SM100/103/107 for M <= 8 and K % 64 == 0. ``auto_reason`` repeats that rule so an availability
line says which order applies here.

Tactics: ``mm_fp4`` takes none, but each backend's runner lists its own (``get_valid_tactics(inputs,
profile)``: CUTLASS config indices, cuDNN execution plans, the TRT-LLM-gen GEMM's configs, the CuTe DSL
backends' tile tuples). An explicit backend's ``tactics`` makes one untimed call on all-zero operands
of the problem's shapes with the tuner answering the default (``_choice.captured``), asks that call's
runner for its list, and each listed tactic becomes a row (``--fp4-tactics all``) whose calls the tuner
answers with it (``_choice.pinned``), as it answers a cached tuning result.

Library access goes through ``MmFp4API`` (CPU tests hand the adapters a fake).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from packaging.version import Version

from fp4bench import formats
from fp4bench.backends.alignment import CUTLASS_FP4_SM100
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._choice import ChoiceLog, captured, jsonable, pinned
from fp4bench.backends.builtin._marshal import fp4_pair, nvfp4_alpha
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, Problem

DIST = "flashinfer-python"
#: ``mm_fp4``'s op name at ``AutoTuner.choose_one`` (gemm_base.py ``mm_fp4``)
FP4_GEMM_OP = "fp4_gemm"
#: the fp4bench rows that time each ``mm_fp4`` backend with fixed tactics (what a choice is held to)
EXPLICIT_ROW = {"cutlass": "flashinfer-cutlass", "cudnn": "flashinfer-cudnn", "b12x": "flashinfer-b12x",
                "cute-dsl": "flashinfer-cute-dsl", "cutedsl_low_latency": "flashinfer-cutedsl-low-latency",
                "trtllm": "flashinfer-trtllm"}
#: cuDNN FP4 needs cudnn-frontend >= 1.13 and a cuDNN backend >= 9.10.2 (gemm_base.py
#: ``_check_cudnn_fp4_availability``); ``auto`` prefers cuDNN on SM100 from backend 9.15 (91500)
CUDNN_FP4_MIN = 91002
CUDNN_AUTO_FIRST = 91500
#: b12x's NVFP4 GEMM needs CUDA >= 12.9 as FlashInfer reads it (gemm_base.py ``_MIN_B12X_CUDA_VERSION``)
B12X_MIN_CUDA = Version("12.9")
#: ``cutedsl_low_latency``'s problem limits (gemm_base.py ``_cutedsl_low_latency_gemm_fp4_requirement``)
LOW_LATENCY_MAX_M = 8
LOW_LATENCY_K_ALIGN = 64
#: the epilogue tile ``nvfp4_quantize(do_shuffle=True)`` shuffles the TRT-LLM-gen weight for
#: (quantization/fp4_quantization.py ``nvfp4_quantize``: ``epilogue_tile_m = 128``)
SHUFFLE_EPILOGUE_TILE_M = 128


@dataclass(frozen=True)
class MmFp4API:
    """The FlashInfer entry points of the ``mm_fp4`` rows (a fake replaces them in CPU tests).

    mm_fp4: ``flashinfer.mm_fp4``; auto_order(): ``mm_fp4.suitable_auto_backends`` (the heuristic's
    order of the last ``"auto"`` call); supported(backend, sm): ``mm_fp4.is_backend_supported``
(``sm`` None: whether the release has the backend at all; for ``"auto"``:
``mm_fp4.is_compute_capability_supported``, true when any backend supports ``sm``);
    autotune: ``flashinfer.autotune``; tuner(): ``AutoTuner.get()``; cuda_version(): the CUDA
    version FlashInfer decides by (nvcc's, else torch's); cudnn_version(): ``cudnn.backend_version()``
    or None when cudnn-frontend does not import; cudnn_frontend(): its version or None;
    cute_dsl(): whether FlashInfer found the CuTe DSL (``CUTE_DSL_AVAILABLE``); shuffle_b(w, sf): the
    TRT-LLM-gen weight layout ``nvfp4_quantize(..., do_shuffle=True)`` makes, from our ``[N, K/2]`` bytes
    and linear ``[N, K/16]`` uint8 scales: ``shuffle_matrix_a(w, 128)`` and
    ``shuffle_matrix_sf_a(sf, 128).reshape(sf.shape)`` (128x4 order).
    """

    version: str
    mm_fp4: Callable[..., Any]
    auto_order: Callable[[], list[str]]
    supported: Callable[[str, int | None], bool]
    autotune: Callable[..., Any]
    tuner: Callable[[], Any]
    cuda_version: Callable[[], str]
    cudnn_version: Callable[[], int | None]
    cudnn_frontend: Callable[[], str | None]
    cute_dsl: Callable[[], bool]
    shuffle_b: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def load_mm_fp4() -> MmFp4API:
    """Import FlashInfer lazily (availability / prepare only) and collect the entry points."""
    import flashinfer
    from flashinfer.autotuner import AutoTuner
    from flashinfer.gemm import gemm_base
    from flashinfer.jit.cpp_ext import get_cuda_version

    def cudnn_version() -> int | None:
        return int(gemm_base.cudnn.backend_version()) if gemm_base.CUDNN_AVAILABLE else None

    def cudnn_frontend() -> str | None:
        return str(gemm_base.cudnn.__version__) if gemm_base.CUDNN_AVAILABLE else None

    return MmFp4API(
        version=str(flashinfer.__version__), mm_fp4=flashinfer.mm_fp4,
        auto_order=lambda: list(getattr(flashinfer.mm_fp4, "suitable_auto_backends", None) or []),
        supported=lambda backend, sm: bool(flashinfer.mm_fp4.is_compute_capability_supported(sm) if backend == "auto"
                                           else flashinfer.mm_fp4.is_backend_supported(backend, sm)),
        autotune=flashinfer.autotune, tuner=AutoTuner.get, cuda_version=lambda: str(get_cuda_version()),
        cudnn_version=cudnn_version, cudnn_frontend=cudnn_frontend,
        cute_dsl=lambda: bool(getattr(gemm_base, "CUTE_DSL_AVAILABLE", False)),
        shuffle_b=lambda w, sf: (flashinfer.shuffle_matrix_a(w, SHUFFLE_EPILOGUE_TILE_M),
                                 flashinfer.shuffle_matrix_sf_a(sf, SHUFFLE_EPILOGUE_TILE_M).reshape(sf.shape)))


def nvfp4_inputs(problem: GemmProblem, operands: Operands, device: torch.device, backend: str) -> dict[str, Any]:
    """``mm_fp4``'s operands from ours: a ``[M, K/2]``, b = ``w.T`` of contiguous ``[N, K/2]``, 128x4
    swizzled e4m3 scales (b's transposed), fp32 ``alpha`` [1] on the device, a contiguous bf16 out."""
    qa, qw = fp4_pair(operands, formats.NVFP4, backend)
    w = qw.data.to(device).contiguous()
    return {
        "a": qa.data.to(device).contiguous(),
        "b": w.T,
        "a_descale": formats.swizzle_128x4(qa.scales).to(device),
        "b_descale": formats.swizzle_128x4(qw.scales).to(device).T,
        "alpha": nvfp4_alpha(qa.global_scale, qw.global_scale).reshape(1).to(device),
        "out": torch.empty((problem.m, problem.n), dtype=torch.bfloat16, device=device),
    }


def probe_operands(problem: GemmProblem, device: torch.device) -> Operands:
    """All-zero NVFP4 operands of ``problem``'s shapes (what tactic enumeration calls the library with:
    a runner lists its tactics from shapes and dtypes, never from values)."""
    m, n, k = problem.m, problem.n, problem.k

    def zeros(rows: int) -> formats.NVFP4:
        return formats.NVFP4(data=torch.zeros((rows, k // 2), dtype=torch.uint8, device=device),
                             scales=torch.zeros((rows, k // 16), dtype=torch.uint8, device=device
                                                ).view(torch.float8_e4m3fn),
                             global_scale=torch.ones((), dtype=torch.float32, device=device))

    empty = torch.empty((0,), dtype=torch.bfloat16, device=device)
    return Operands(problem, "nvfp4", "nvfp4", empty, empty, qa=zeros(m), qw=zeros(n))


class ShapeProfile:
    """What a runner's ``get_valid_tactics(inputs, profile)`` reads of the autotuner's
    ``OptimizationProfile``: ``get_opt_shapes()``, here the call's own shapes (the TRT-LLM-gen runner
    reads A's and B's, gemm_base.py ``TrtllmGemmRunner.get_valid_tactics``; the others read ``inputs``)."""

    def __init__(self, inputs: list[Any]) -> None:
        self._shapes = [tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in inputs]

    def get_opt_shapes(self) -> list[tuple[int, ...] | None]:
        return self._shapes


def tactic_label(tactic: Any) -> str:
    """A stable row label for a runner's tactic (an int or a tuple of ints / names): ``t3``, ``t128-64-1``."""
    def flat(v: Any) -> list[str]:
        return [x for item in v for x in flat(item)] if isinstance(v, list) else [str(v)]

    return "t" + "-".join(flat(jsonable(tactic)))


def cuda_major(version: str) -> int:
    return Version(str(version)).major


def auto_reason(lib: MmFp4API, info: _gating.DeviceInfo) -> str:
    """Which order ``auto``'s heuristic applies here, and the versions that decide it."""
    cuda, cudnn = lib.cuda_version(), lib.cudnn_version()
    facts = f"CUDA {cuda} (nvcc, else torch), cuDNN {cudnn if cudnn is not None else 'not importable'}"
    if info.sm == 120 and Version(str(cuda)) >= B12X_MIN_CUDA:
        order = "b12x > cutlass > cudnn"
    elif cudnn is not None and cuda_major(cuda) >= 13 and cudnn >= CUDNN_AUTO_FIRST:
        order = {103: "cutlass > cudnn", 107: "cudnn > cutlass > cute-dsl"}.get(info.sm, "cudnn > cutlass")
    else:
        order = "cutlass > cudnn > cute-dsl" if info.sm == 107 else "cutlass > cudnn"
    if info.sm in (100, 103, 107) and lib.cute_dsl():
        order += f" > cutedsl_low_latency (M <= {LOW_LATENCY_MAX_M}, K % {LOW_LATENCY_K_ALIGN} == 0)"
    return f"auto order {order} on {info.describe()}: {facts}"


class MmFp4Backend(Backend):
    """One ``mm_fp4`` backend (``library_backend``): the library's default tactic (-1), and for an explicit
    backend each tactic its runner lists (``--fp4-tactics all``)."""

    kinds = frozenset({"dense"})
    act_format = "nvfp4"
    weight_format = "nvfp4"
    alignment = CUTLASS_FP4_SM100  # K % 32, N % 32: every mm_fp4 backend's common ground
    #: the ``backend=`` argument
    library_backend: ClassVar[str]
    #: tuned under ``autotune(True)`` over the case before it is timed
    tuned: ClassVar[bool] = False

    def __init__(self, api: MmFp4API | None = None) -> None:
        self._lib = api

    def _library(self) -> MmFp4API:
        if self._lib is None:
            self._lib = load_mm_fp4()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is None:
            return Availability.no(_gating.NO_CUDA)
        failed = _gating.load_failure(DIST, self._library) if self._lib is None else None
        if failed is not None:
            return Availability.no(*failed)
        lib = self._library()
        if self.library_backend != "auto" and not lib.supported(self.library_backend, None):
            return Availability.no(f"flashinfer {lib.version} has no mm_fp4 backend {self.library_backend!r}",
                                   lib.version)
        if not lib.supported(self.library_backend, info.sm):
            return Availability.no(f"flashinfer {lib.version}: mm_fp4 backend {self.library_backend!r} does not "
                                   f"support {info.describe()}", lib.version)
        why = self.requirement(lib, info)
        if why:
            return Availability.no(f"flashinfer {lib.version}: {why}", lib.version)
        return Availability.yes(lib.version, self.available_reason(lib, info))

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is None and isinstance(problem, GemmProblem):
            rule = self.shape_rule(problem)
            why = f"{self.name}: {rule}" if rule else None
        return why

    def shape_rule(self, problem: GemmProblem) -> str | None:
        """The backend's own rule this problem breaks (beyond ``alignment``), or None."""
        return None

    def requirement(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str | None:
        """Why the library's requirement check of this backend refuses here (versions), or None."""
        return None

    def available_reason(self, lib: MmFp4API, info: _gating.DeviceInfo) -> str:
        return f"flashinfer {lib.version} on {info.describe()}"

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        """The library's default, then (explicit backends) each tactic the backend's runner lists for
        this shape (``get_valid_tactics``), asked on one untimed call with all-zero operands."""
        if self.library_backend == "auto" or self.tuned:
            return [DEFAULT_TACTIC]
        assert isinstance(problem, GemmProblem)
        lib, device = self._library(), torch.device(device)
        args = self.inputs(problem, probe_operands(problem, device), device)
        with captured(lib.tuner(), FP4_GEMM_OP) as got:
            lib.mm_fp4(out_dtype=torch.bfloat16, block_size=16, backend=self.library_backend, **args)
        if not got:
            raise RuntimeError(f"{self.name}: mm_fp4 never asked FlashInfer's autotuner for {FP4_GEMM_OP!r}")
        listed = got["runners"][0].get_valid_tactics(got["inputs"], ShapeProfile(got["inputs"]))
        return [DEFAULT_TACTIC] + [Tactic(t, tactic_label(t)) for t in listed]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        why = self.unsupported_reason(problem)
        if why:
            raise ValueError(why)
        assert isinstance(problem, GemmProblem)
        lib = self._library()
        args = self.inputs(problem, operands, device)
        out = args.pop("out")
        log = ChoiceLog.on(lib.tuner())
        prepared = Prepared(problem, out, {"call": args, "log": log})
        if self.tuned:  # profiles this shape once; later prepares (copies, windows) hit the tuner's cache
            with lib.autotune(True):
                self.run(prepared, DEFAULT_TACTIC)
        return prepared

    def inputs(self, problem: GemmProblem, operands: Operands, device: torch.device) -> dict[str, Any]:
        """``mm_fp4``'s operands (and ``out``) for this backend."""
        return nvfp4_inputs(problem, operands, device, self.name)

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        lib = self._library()
        call = dict(out_dtype=torch.bfloat16, out=prepared.out, block_size=16, backend=self.library_backend,
                    **prepared.args["call"])
        if self.tuned:
            lib.mm_fp4(**call)
        elif tactic.value is not None:  # one of the runner's tactics, answered by the tuner for this op
            with pinned(lib.tuner(), FP4_GEMM_OP, tactic.value):
                lib.mm_fp4(**call)
        else:  # what a caller that never tuned gets, whatever another row cached for this shape
            with lib.autotune(False, skip_ops={FP4_GEMM_OP}):
                lib.mm_fp4(**call)
        return prepared.out

    def library_choice(self, prepared: Prepared) -> dict[str, Any] | None:
        index, tactic = prepared.args["log"].answer(FP4_GEMM_OP, self.name)
        backends = self._library().auto_order() if self.library_backend == "auto" else [self.library_backend]
        chosen = backends[index] if index is not None and index < len(backends) else f"runner #{index}"
        return {"backend": chosen, "tactic": tactic, "tuned": self.tuned, "compare_with": EXPLICIT_ROW.get(chosen),
                "candidates": backends}
