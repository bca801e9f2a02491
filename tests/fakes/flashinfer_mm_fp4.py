"""Fake ``flashinfer.mm_fp4`` with ``backend="auto"`` dispatch, its backends' runners, and a fake
``AutoTuner`` / ``autotune`` (test-only).

Semantics implemented, as FlashInfer 0.7.2.post1 and 0.7.4 have them (flashinfer/gemm/gemm_base.py
``mm_fp4``, ``_heuristic_func_mm_fp4``, ``_*_gemm_fp4_requirement``; flashinfer/utils.py
``backend_requirement``; flashinfer/autotuner/autotuner.py ``AutoTuner.choose_one``, ``autotune``;
``fakes.flashinfer_releases`` records the line numbers and what differs per release):

* ``mm_fp4``'s and ``autotune``'s signatures of the release (0.7.4: ``batch_invariant=``,
  ``tie_tolerance=``); an explicit backend must support the GPU (``BackendSupportedError``-like
  ``ValueError`` otherwise);
* ``auto``: the backends whose requirement holds (cudnn: cudnn-frontend >= 1.13 importable with a
  cuDNN backend >= 91002; b12x: CUDA >= 12.9, K % 32, the CuTe DSL; cutedsl_low_latency: M <= 8,
  K % 64; cute-dsl: N % 8 and the CuTe DSL, never on SM12x), ordered by the heuristic: SM120 + CUDA
  >= 12.9: b12x, cutlass, cudnn; CUDA >= 13 and cuDNN >= 91500: cudnn, cutlass (SM103: cutlass,
  cudnn; SM107: cudnn, cutlass, cute-dsl); else cutlass, cudnn (SM107: cutlass, cudnn, cute-dsl);
  then cutedsl_low_latency where the CuTe DSL is found. The order is left on
  ``mm_fp4.suitable_auto_backends``;
* one runner per backend in that order; ``AutoTuner.get().choose_one("fp4_gemm", runners, cfg,
  inputs)`` picks ``(runner, tactic)``: the cached pick for (op, input shapes); else in tuning mode
  by the simulated device time of every valid tactic of every runner (the fastest, first on a
  tie; with ``tie_tolerance``: the first tactic enumerated before the fastest, of at most four,
  within the tolerance), then cached; outside it ``(runners[0], -1)``; an op in
  ``autotune(skip_ops=...)``: ``(runners[0], -1)``;
* the CUDA version FlashInfer decides by is nvcc's (``cuda``), cuDNN's backend version ``cudnn``
  (None: cudnn-frontend not importable).

Every runner computes the NVFP4 GEMM with the CUTLASS runner's checks and math
(``fakes.flashinfer.FakeCutlassFp4Runner``); a backend launches its own kernel names and has its
own simulated speed (``SPEED``: a simulation, not a measurement).

Planted faults (``fault``): ``mispick``: the tuner mis-measures tactic ``MISPICK_TACTIC`` of the
first runner as the fastest; it takes twice the default's time (FlashInfer #3537). ``tuned_wrong``:
tactic ``WRONG_TACTIC`` is the fastest and computes without alpha (FlashInfer #3197: a wrong
tactic). ``auto_switch``: the candidate release's heuristic (``switch_release``) puts cuDNN first, as
the real heuristic does on SM100 once CUDA 13 and cuDNN 9.15 meet.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from packaging.version import Version

from fakes import flashinfer_releases as releases
from fakes.flashinfer import FakeCutlassFp4Runner, FakeFlashInfer
from fp4bench import clock, formats
from fp4bench.backends.builtin._mm_fp4 import MmFp4API

#: the backends ``mm_fp4`` knows and the capabilities each requirement checker supports
SUPPORTED = {"cudnn": (100, 103, 107, 110, 120, 121), "trtllm": (100, 103, 107),
             "cutlass": (100, 103, 107, 110, 120, 121), "cute-dsl": (100, 103, 107, 120, 121),
             "cutedsl_low_latency": (100, 103, 107), "b12x": (120, 121),
             # experimental, per-token alpha only (experimental/cake_nvfp4_per_token/support.py): never suitable here
             "cake": (100, 103)}
#: simulated device time of a backend's launch relative to CUTLASS's (a simulation, not a measurement)
SPEED = {"cutlass": 1.0, "cudnn": 1.5, "b12x": 0.9, "cute-dsl": 1.2, "trtllm": 1.1, "cutedsl_low_latency": 1.3,
         "cake": 1.0}
KERNEL_PREFIX = {"cutlass": "cutlass3x", "cudnn": "cudnn_generated_nvfp4", "b12x": "b12x_cutedsl",
                 "cute-dsl": "cutedsl_dense_blockscaled", "trtllm": "trtllmgen_bmm",
                 "cutedsl_low_latency": "cutedsl_low_latency_blockscaled", "cake": "cake_nvfp4_per_token"}
MISPICK_TACTIC = 1
WRONG_TACTIC = 2
CUDNN_FP4_MIN = 91002
B12X_MIN_CUDA = Version("12.9")
#: ``AutoTuner._TIE_MAX_CONTENDERS`` (0.7.4)
TIE_MAX_CONTENDERS = 4
#: the fake TRT-LLM-gen weight shuffle: rows rotated by ``SHUFFLE_SHIFT`` within each block of
#: ``SHUFFLE_BLOCK`` (the real one, ``shuffle_matrix_a(w, 128)``, permutes rows within 32-row blocks by a
#: fixed table; any permutation that is not its own inverse tests the adapter's contract)
SHUFFLE_BLOCK, SHUFFLE_SHIFT = 32, 8


def _shuffle_rows(x: torch.Tensor, inverse: bool = False) -> torch.Tensor:
    rows = torch.arange(x.shape[0])
    shift = -SHUFFLE_SHIFT if inverse else SHUFFLE_SHIFT
    return x[(rows // SHUFFLE_BLOCK) * SHUFFLE_BLOCK + (rows % SHUFFLE_BLOCK + shift) % SHUFFLE_BLOCK]


def shuffle_matrix_a(w: torch.Tensor, epilogue_tile_m: int) -> torch.Tensor:
    """``flashinfer.shuffle_matrix_a``: the rows of uint8 ``[N, K/2]`` bytes in the kernel's order."""
    assert w.dtype == torch.uint8 and w.dim() == 2 and epilogue_tile_m == 128, (w.dtype, epilogue_tile_m)
    return _shuffle_rows(w).contiguous()


def shuffle_matrix_sf_a(sf: torch.Tensor, epilogue_tile_m: int, num_elts_per_sf: int = 16) -> torch.Tensor:
    """``flashinfer.shuffle_matrix_sf_a``: linear uint8 scales ``[N, K/16]`` (N % 128), rows shuffled,
    re-interleaved into 128x4 order."""
    assert sf.dtype == torch.uint8 and sf.dim() == 2 and epilogue_tile_m == 128, (sf.dtype, epilogue_tile_m)
    assert sf.shape[0] % 128 == 0, "input_tensor.shape[0] must be a multiple of 128"
    return formats.swizzle_128x4(_shuffle_rows(sf))


def shuffle_b(w: torch.Tensor, sf: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``MmFp4API.shuffle_b`` over the fakes, as ``load_mm_fp4`` composes FlashInfer's two functions."""
    return shuffle_matrix_a(w, 128), shuffle_matrix_sf_a(sf, 128).reshape(sf.shape)


def unshuffle_inputs(inputs: list) -> list:
    """What the TRT-LLM-gen kernel reads from ``mm_fp4``'s shuffled ``b = w.T``, ``b_descale = sf.T``,
    in the layout of every other runner (the CUTLASS runner's inputs)."""
    w, sf = inputs[1].T, inputs[3].T
    n, kb = w.shape
    lin = formats.unswizzle_128x4(sf.contiguous(), n, kb // 8)
    out = list(inputs)
    out[1] = _shuffle_rows(w, inverse=True).contiguous().T
    out[3] = formats.swizzle_128x4(_shuffle_rows(lin, inverse=True)).view(torch.float8_e4m3fn).T
    return out


def heuristic(sm: int, cuda: str, cudnn: int | None, cute_dsl: bool, suitable: list[str]) -> list[str]:
    """``_heuristic_func_mm_fp4``: the suitable backends in ``auto``'s order."""
    v = Version(cuda)
    if sm == 120 and v >= B12X_MIN_CUDA:
        return [c for c in ("b12x", "cutlass", "cudnn") if c in suitable]
    if cudnn is not None and v.major >= 13 and cudnn >= 91500:
        order: tuple[str, ...] = {103: ("cutlass", "cudnn"), 107: ("cudnn", "cutlass", "cute-dsl")}.get(
            sm, ("cudnn", "cutlass"))
    else:
        order = ("cutlass", "cudnn", "cute-dsl") if sm == 107 else ("cutlass", "cudnn")
    if cute_dsl and "cutedsl_low_latency" in suitable:
        order += ("cutedsl_low_latency",)
    return [c for c in order if c in suitable]


def moe_valid_tactics(runner: Any, gemm_idx: int, n: int, k: int, w4_group_scaling: bool) -> list[int]:
    """``MoERunner.get_valid_tactics`` (flashinfer/fused_moe/core.py, 0.7.2.post1 :803-905, 0.7.4
    :1061-1163) over a fake ``fused_moe_runner``: the GEMM's absolute profile ids (GEMM2's from ``n1``),
    less those with zero occupancy unless all have it; for W4A16 (``use_w4_group_scaling``) only, less
    those ``get_valid_tactics_for_shape(gemm_idx, n, k)`` leaves out unless that leaves none."""
    n1, n2 = runner.get_gemm1_tactic_count(), runner.get_gemm2_tactic_count()
    ids = list(range(n1)) if gemm_idx == 1 else list(range(n1, n1 + n2))
    if not ids:
        return [-1]
    valid = [t for t in ids if runner.get_tactic_occupancy(t) > 0] or ids
    if not w4_group_scaling:
        return valid
    shape = set(runner.get_valid_tactics_for_shape(gemm_idx, n, k))
    return [t for t in valid if t in shape] or valid


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
            if self.backend == "trtllm":
                inputs = unshuffle_inputs(inputs)
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

    version: str = releases.DEFAULT
    is_tuning_mode: bool = False
    tie_tolerance: float = 0.0
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
        measured: list[tuple[float, int, int]] = []
        for i, r in enumerate(runners):
            for t in r.get_valid_tactics(inputs, None, **kwargs):
                self.profiled.append((custom_op, i, t))
                measured.append((r.measured_time(t, **kwargs), i, t))
        assert measured, "no tactic to profile"
        fastest = min(range(len(measured)), key=lambda j: measured[j][0])  # the first of equal times
        limit = measured[fastest][0] * (1.0 + self.tie_tolerance)
        near = [j for j in range(fastest) if measured[j][0] <= limit][:TIE_MAX_CONTENDERS]
        _, i, t = measured[near[0] if near else fastest]  # a re-timing reads the same simulated time
        self.cache[key] = (i, t)
        return runners[i], t

    @contextlib.contextmanager
    def tuning(self, *args: Any, **kwargs: Any):
        """``flashinfer.autotune(...)`` of the release (nested contexts union their skip sets and
        inherit an unset ``tie_tolerance``)."""
        bound = releases.bind_call(releases.release(self.version).autotune, "autotune", args, kwargs)
        skip_ops, tie = bound["skip_ops"], bound.get("tie_tolerance")
        if tie is not None and not 0 <= tie < 1:
            raise ValueError("tie_tolerance must be at least 0 and less than 1")
        old = self.is_tuning_mode, self.skip_ops, self.tie_tolerance
        self.is_tuning_mode = bound["tune_mode"]
        self.skip_ops = old[1] | frozenset({skip_ops} if isinstance(skip_ops, str) else skip_ops or ())
        self.tie_tolerance = old[2] if tie is None else tie
        try:
            yield
        finally:
            self.is_tuning_mode, self.skip_ops, self.tie_tolerance = old


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
    #: this release puts cuDNN first where it is suitable (the ``auto_switch`` fault)
    switched: bool = False
    clock: Callable[[], float] = clock.now
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

    def requirement(self, backend: str, m: int, n: int, k: int) -> bool:
        """The backend's requirement checker for ``auto`` (a ValueError there means unsuitable)."""
        if backend == "cudnn":
            return (self.cudnn_frontend is not None and Version(self.cudnn_frontend) >= Version("1.13")
                    and self.cudnn is not None and self.cudnn >= CUDNN_FP4_MIN)
        if backend == "b12x":
            return Version(self.cuda) >= B12X_MIN_CUDA and k % 32 == 0 and self.cute_dsl
        if backend == "cutedsl_low_latency":
            return m <= 8 and k % 64 == 0
        if backend == "cute-dsl":
            return self.sm[0] != 12 and n % 8 == 0 and self.cute_dsl
        return backend in ("cutlass", "trtllm")

    def auto_order(self, m: int, n: int, k: int) -> list[str]:
        suitable = [b for b in SUPPORTED if self.cc in SUPPORTED[b] and self.requirement(b, m, n, k)]
        order = heuristic(self.cc, self.cuda, self.cudnn if self.cudnn_frontend else None, self.cute_dsl, suitable)
        return sorted(order, key=lambda b: b != "cudnn") if self.switched else order

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        call = releases.bind_call(releases.release(self.dense.version).mm_fp4, "mm_fp4", args, kwargs)
        if call.get("batch_invariant"):
            raise NotImplementedError("the fake mm_fp4 does not model batch_invariant=True")
        a, b, backend, out = call["a"], call["b"], call["backend"], call["out"]
        out_dtype = call["out_dtype"] or torch.bfloat16
        if backend == "auto":
            order = self.auto_order(a.shape[0], b.shape[1], a.shape[1] * 2)
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
        inputs = [a, b, call["a_descale"], call["b_descale"], call["alpha"], out_dtype, out, call["block_size"],
                  call["use_nvfp4"], ws]
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
            cudnn_version=lambda: self.cudnn, cudnn_frontend=lambda: self.cudnn_frontend, cute_dsl=lambda: self.cute_dsl,
            shuffle_b=shuffle_b)
