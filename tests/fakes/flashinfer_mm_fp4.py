"""Fake ``flashinfer.mm_fp4`` with ``backend="auto"`` dispatch, its backends' runners, and a fake
``AutoTuner`` / ``autotune`` (test-only).

Semantics implemented (flashinfer/gemm/gemm_base.py ``mm_fp4``, ``_heuristic_func_mm_fp4``,
``_*_gemm_fp4_requirement``; flashinfer/utils.py ``backend_requirement``; flashinfer/autotuner/
autotuner.py ``AutoTuner.choose_one``, ``autotune``):

* ``mm_fp4(a, b, a_descale, b_descale, alpha=None, out_dtype=bf16, out=None, block_size=16,
  use_8x4_sf_layout=False, backend="auto", use_nvfp4=True, enable_pdl=True)``; an explicit
  backend must support the GPU (``BackendSupportedError``-like ``ValueError`` otherwise);
* ``auto``: the backends whose requirement holds (cudnn: cudnn-frontend importable with a cuDNN
  backend >= 91002; b12x: CUDA >= 13; cute-dsl / trtllm: never auto), ordered by the heuristic:
  SM120 + CUDA >= 13: b12x, cutlass, cudnn; CUDA >= 13 and cuDNN >= 91500: cudnn, cutlass (SM103:
  cutlass, cudnn); else cutlass, cudnn. The order is left on ``mm_fp4.suitable_auto_backends``;
* one runner per backend in that order; ``AutoTuner.get().choose_one("fp4_gemm", runners, cfg,
  inputs)`` picks ``(runner, tactic)``: the cached pick for (op, input shapes); else in tuning mode
  by the simulated device time of every valid tactic of every runner (the fastest, first on a
  tie), then cached; outside it ``(runners[0], -1)``; an op in ``autotune(skip_ops=...)``: ``(runners[0], -1)``;
* the CUDA version FlashInfer decides by is nvcc's (``cuda``), cuDNN's backend version ``cudnn``
  (None: cudnn-frontend not importable).

Every runner computes the NVFP4 GEMM with the CUTLASS runner's checks and math
(``fakes.flashinfer.FakeCutlassFp4Runner``); a backend launches its own kernel names and has its
own simulated speed (``SPEED``: a simulation, not a measurement).

Planted faults (``fault``): ``mispick``: the tuner mis-measures tactic ``MISPICK_TACTIC`` of the
first runner as the fastest; it takes twice the default's time (FlashInfer #3537). ``tuned_wrong``:
tactic ``WRONG_TACTIC`` is the fastest and computes without alpha (FlashInfer #3197: a wrong
tactic). ``auto_switch``: the candidate release's heuristic (``switch_release``) puts the last
suitable backend first.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from fakes.flashinfer import FakeCutlassFp4Runner, FakeFlashInfer
from fp4bench.backends.builtin._mm_fp4 import MmFp4API

#: the backends ``mm_fp4`` knows and the capabilities each requirement checker supports
SUPPORTED = {"cudnn": (100, 103, 107, 110, 120, 121), "trtllm": (100, 103, 107),
             "cutlass": (100, 103, 107, 110, 120, 121), "cute-dsl": (100, 103, 107), "b12x": (120, 121)}
#: simulated device time of a backend's launch relative to CUTLASS's (a simulation, not a measurement)
SPEED = {"cutlass": 1.0, "cudnn": 1.5, "b12x": 0.9, "cute-dsl": 1.2, "trtllm": 1.1}
KERNEL_PREFIX = {"cutlass": "cutlass3x", "cudnn": "cudnn_generated_nvfp4", "b12x": "b12x_cutedsl",
                 "cute-dsl": "cutedsl_dense_blockscaled", "trtllm": "trtllmgen_bmm"}
MISPICK_TACTIC = 1
WRONG_TACTIC = 2
CUDNN_FP4_MIN = 91002


def heuristic(sm: int, cuda_major: int, cudnn: int | None, suitable: list[str]) -> list[str]:
    """``_heuristic_func_mm_fp4``: the suitable backends in ``auto``'s order."""
    if sm == 120 and cuda_major >= 13:
        order: tuple[str, ...] = ("b12x", "cutlass", "cudnn")
    elif cudnn is not None and cuda_major >= 13 and cudnn >= 91500:
        order = ("cutlass", "cudnn") if sm == 103 else ("cudnn", "cutlass")
    else:
        order = ("cutlass", "cudnn")
    return [c for c in order if c in suitable]


@dataclass
class FakeRunner:
    """One backend's ``TunableRunner``: the CUTLASS runner's checks and math, its own kernels and speed."""

    backend: str
    inner: FakeCutlassFp4Runner
    owner: "FakeMmFp4"

    def get_valid_tactics(self, inputs: list, profile: object, **kwargs: Any) -> list[int]:
        return self.inner.get_valid_tactics(inputs, profile)

    def relative_time(self, tactic: int) -> float:
        """A launch of ``tactic`` in units of a CUTLASS default launch."""
        if self.owner.fault == "mispick" and tactic == MISPICK_TACTIC:
            return 2 * SPEED[self.backend]
        if self.owner.fault == "tuned_wrong" and tactic == WRONG_TACTIC:
            return 0.5 * SPEED[self.backend]
        return SPEED[self.backend]

    def device_time(self, tactic: int) -> float:
        """Simulated seconds of one launch with ``tactic`` (0 without ``call_s``)."""
        return self.owner.dense.call_s * self.relative_time(tactic)

    def measured_time(self, tactic: int, **kwargs: Any) -> float:
        """What the tuner's profiling reads for ``tactic``: the relative time (the lower index wins a
        tie), but for the ``mispick`` fault, which reads ``MISPICK_TACTIC`` of the first runner as free."""
        if self.owner.fault == "mispick" and tactic == MISPICK_TACTIC and self is self.owner.first:
            return 0.0
        return self.relative_time(tactic) * (1.0 + max(tactic, 0) * 1e-3)

    def __call__(self, inputs: list, tactic: int = -1, **kwargs: Any) -> torch.Tensor:
        t0 = self.owner.clock()
        dense = self.owner.dense
        keep = dense.call_s, dense.kernels[:]
        wrong = self.owner.fault == "tuned_wrong" and tactic == WRONG_TACTIC
        try:
            dense.call_s = 0.0  # this runner sleeps out its own device time below
            if wrong:
                inputs = list(inputs)
                inputs[4] = torch.ones_like(inputs[4])  # computes without alpha
            out = self.inner(inputs, tactic=tactic)
        finally:
            dense.call_s = keep[0]
        if self.backend != "cutlass":  # the CUTLASS runner's own kernel names stay
            dense.kernels[:] = keep[1] + [f"{KERNEL_PREFIX[self.backend]}_{self.inner.family}_fp4gemm_t{tactic}"]
        FakeCutlassFp4Runner._wait_until(t0 + self.device_time(tactic))
        return out


@dataclass
class FakeAutoTuner:
    """``AutoTuner``: ``choose_one`` as the real one answers, ``clear_cache``, tuning mode."""

    is_tuning_mode: bool = False
    cache: dict = field(default_factory=dict)
    #: ops answered with the fallback without a look at the cache (``autotune(skip_ops=...)``)
    skip_ops: frozenset = frozenset()
    #: every (op, runner, tactic) profiled while tuning
    profiled: list = field(default_factory=list)

    def clear_cache(self) -> None:
        self.cache.clear()

    def choose_one(self, custom_op: str, runners: list, tuning_config: Any, inputs: list, **kwargs: Any) -> tuple:
        if custom_op in self.skip_ops:
            return runners[0], -1
        key = (custom_op, len(runners), tuple(tuple(t.shape) for t in inputs if isinstance(t, torch.Tensor)),
               tuple(sorted(kwargs.items())))
        if key in self.cache:  # tuning mode too: a shape profiled once is not profiled again
            i, tactic = self.cache[key]
            return runners[i], tactic
        if not self.is_tuning_mode:
            return runners[0], -1
        best: tuple[float, int, int] | None = None
        for i, r in enumerate(runners):
            for t in r.get_valid_tactics(inputs, None, **kwargs):
                self.profiled.append((custom_op, i, t))
                cost = r.measured_time(t, **kwargs)
                if best is None or cost < best[0]:
                    best = (cost, i, t)
        assert best is not None, "no tactic to profile"
        self.cache[key] = best[1:]
        return runners[best[1]], best[2]

    @contextlib.contextmanager
    def tuning(self, tune_mode: bool = True, cache: str | None = None, tuning_buckets: Any = None,
               round_up: bool | None = None, skip_ops: Any = None):
        """``flashinfer.autotune(tune_mode=True, cache=None, tuning_buckets=None, round_up=None, skip_ops=None)``
        (nested contexts union their skip sets)."""
        old = self.is_tuning_mode, self.skip_ops
        self.is_tuning_mode = tune_mode
        self.skip_ops = old[1] | frozenset({skip_ops} if isinstance(skip_ops, str) else skip_ops or ())
        try:
            yield
        finally:
            self.is_tuning_mode, self.skip_ops = old


@dataclass
class FakeMmFp4:
    """``flashinfer.mm_fp4`` of one simulated machine."""

    dense: FakeFlashInfer
    tuner: FakeAutoTuner
    sm: tuple[int, int]
    cuda: str = "12.9"
    cudnn: int | None = None
    cudnn_frontend: str | None = None
    cute_dsl: bool = False
    fault: str | None = None
    #: this release puts the last suitable backend first (the ``auto_switch`` fault)
    switched: bool = False
    clock: Callable[[], float] = time.perf_counter
    suitable_auto_backends: list[str] = field(default_factory=list)
    first: FakeRunner | None = None

    @property
    def cc(self) -> int:
        return self.sm[0] * 10 + self.sm[1]

    def is_backend_supported(self, backend: str, cc: int | None = None) -> bool:
        """``mm_fp4.is_backend_supported``: ``cc`` None asks whether the backend exists."""
        return backend in SUPPORTED and (cc is None or cc in SUPPORTED[backend])

    def is_compute_capability_supported(self, cc: int) -> bool:
        return any(cc in ccs for ccs in SUPPORTED.values())

    def requirement(self, backend: str, k: int) -> bool:
        """The backend's requirement checker for ``auto`` (a ValueError there means unsuitable)."""
        cuda_major = int(self.cuda.split(".")[0])
        if backend == "cudnn":
            return self.cudnn is not None and self.cudnn >= CUDNN_FP4_MIN
        if backend == "b12x":
            return cuda_major >= 13 and k % 32 == 0 and self.cute_dsl
        return backend == "cutlass"

    def auto_order(self, k: int) -> list[str]:
        suitable = [b for b in SUPPORTED if self.cc in SUPPORTED[b] and self.requirement(b, k)]
        order = heuristic(self.cc, int(self.cuda.split(".")[0]), self.cudnn, suitable)
        return order[-1:] + order[:-1] if self.switched and len(order) > 1 else order

    def __call__(self, a, b, a_descale, b_descale, alpha=None, out_dtype=torch.bfloat16, out=None, block_size=16,
                 use_8x4_sf_layout=False, backend="auto", use_nvfp4=True, enable_pdl=True) -> torch.Tensor:
        if backend == "auto":
            order = self.auto_order(a.shape[1] * 2)
            if not order:
                raise ValueError(f"No suitable auto backends found for mm_fp4 on SM{self.cc}")
            self.suitable_auto_backends = order
        else:
            if not self.is_backend_supported(backend, self.cc):
                raise ValueError(f"mm_fp4 does not support backend '{backend}' with capability {self.cc}")
            order = [backend]
        if out is None:
            out = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
        family_runner = self.dense._runner(*self.sm)
        runners = [FakeRunner(name, family_runner, self) for name in order]
        self.first = runners[0]
        ws = torch.empty(1024, dtype=torch.uint8, device=a.device)
        inputs = [a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, ws]
        runner, tactic = self.tuner.choose_one("fp4_gemm", runners, None, inputs)
        runner(inputs=inputs, tactic=tactic)
        return out

    def api(self) -> MmFp4API:
        """The adapters' ``MmFp4API`` over this fake (what ``load_mm_fp4`` collects from FlashInfer)."""
        return MmFp4API(
            version=self.dense.version, mm_fp4=self, auto_order=lambda: list(self.suitable_auto_backends),
            supported=lambda b, sm: self.is_compute_capability_supported(sm) if b == "auto"
            else self.is_backend_supported(b, sm),
            autotune=self.tuner.tuning, tuner=lambda: self.tuner, cuda_version=lambda: self.cuda,
            cudnn_version=lambda: self.cudnn, cudnn_frontend=lambda: self.cudnn_frontend, cute_dsl=lambda: self.cute_dsl)
