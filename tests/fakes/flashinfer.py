"""Fake FlashInfer: the ``CutlassFp4GemmRunner`` that ``mm_fp4(backend="cutlass")`` drives.

Semantics implemented (flashinfer 0.7.2.post1, ``gemm/gemm_base.py`` and
``csrc/fp4_gemm_cutlass*.cu``):

* ``inputs = [a, b, a_descale, b_descale, alpha, out_dtype, out, block_size, use_nvfp4, ws]``,
  the ``mm_fp4`` Python checks (2-D, dtypes, alpha fp32, out dtype, block 16 / nvfp4).
* The runner hands ``b.T`` and ``b_descale.T`` to C++, which requires uint8 (e4m3 scales are
  viewed as uint8 when ``a`` is uint8) and contiguous ``mat1``/``mat2``/scales: so ``b`` must be
  the transposed view of a contiguous ``[N, K/2]`` and ``b_descale`` that of a contiguous
  ``[pad128(N), pad4(K/16)]``. The scale buffers are read as
  ``pad128(rows) * pad4(K/16)`` bytes (the C++ comment); ``alpha`` is read as ``alpha[0]``.
* SM100/103 module: ``k % 32`` and ``n % 32``; ``out`` contiguous ``[M, N]``; tactic in
  ``[-1, tactic_num)``.
* Config lists, copied from the C++ enumerations (``CutlassFp4GemmRunner::getConfigs``):
  SM100 ``include/flashinfer/gemm/fp4_gemm_cutlass_template.h:194-231`` (4 CTA shapes x 8
  clusters, then indices 22, 20, 29, 4, 18 moved to the front); SM120
  ``fp4_gemm_cutlass_template_sm120.h:185-215`` (8 CTA shapes x {swap DP, DP, swap StreamK,
  StreamK}). Tactic -1: config 0 on SM100 (``csrc/fp4_gemm_cutlass.cu:135-138``), the fixed
  ``CtaShape128x128x128B`` no-swap DP config on SM120 (``csrc/fp4_gemm_cutlass_sm120.cu:141-145``).
  Each launch appends the config's kernel name to ``kernels`` (what a GPU profiler would see).
* Per-tactic failures (``failing: {tactic: kind}``) raise the runner's own RuntimeError texts
  (``fp4_gemm_template_sm100.h:281-302``, ``sm120.h:166-192``): ``workspace``,
  ``can_implement``, ``init``, ``run``. Argument checks raise ``FakeContractError`` (TVM-FFI's
  ``Check failed: ...`` RuntimeError).
* Simulated device time (``call_s``, 0 = none): a launch lasts at least ``call_s`` (the call
  sleeps out what its CPU work left of it); on SM120 a stream-K config of a release whose
  launcher re-initializes (``fakes.flashinfer_releases``, 0.7.2.post1) lasts
  ``streamk_memset_s`` longer: the workspace memset 0.7.4 no longer issues.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
import weakref
from dataclasses import dataclass, field

import torch

from fp4bench import clock
from fakes import flashinfer_releases as releases
from fakes.decode import (EXACT, FakeContractError, Misread, dequant, offsets_128x4, pad, raw_bytes, read_scales,
                          require, same_device, write)
from fp4bench.backends.builtin.flashinfer_dense import FlashInferAPI

_SM100_TILES = ("128x64x128B", "128x256x128B", "128x128x256B", "128x256x256B")
_SM100_CLUSTERS = ("1x1x1", "1x2x1", "2x1x1", "2x2x1", "1x4x1", "4x2x1", "2x4x1", "4x4x1")
_SM100_ALL = [f"CtaShape{t}_Cluster{c}" for t in _SM100_TILES for c in _SM100_CLUSTERS]
_BEST = (22, 20, 29, 4, 18)
SM100_CONFIGS = tuple([_SM100_ALL[i] for i in _BEST] + [c for i, c in enumerate(_SM100_ALL) if i not in _BEST])
_SM120_TILES = ("128x32x64B", "128x32x128B", "128x64x64B", "128x64x128B",
                "128x128x64B", "128x128x128B", "256x128x64B", "128x256x64B")
SM120_CONFIGS = tuple(f"CtaShape{t}_{v}" for t in _SM120_TILES
                      for v in ("swapab_dp", "dp", "swapab_streamk", "streamk"))
SM120_DEFAULT = "CtaShape128x128x128B_dp"

_FAILURES = {
    "workspace": "Requested workspace size insufficient. Required 33554432, got 1024",
    "can_implement": "FP4 Gemm cutlass kernel will fail for params. Error: Error Misaligned Operand",
    "init": "Failed to initialize cutlass FP4 gemm on {family}. Error: Error Internal",
    "run": "Failed to run cutlass FP4 gemm on {family}. Error: Error Internal",
}


def _failure(kind: str, family: str) -> str:
    """The runner's per-tactic error text (``throw std::runtime_error("[FP4 gemm Runner] " + errMsg)``)."""
    fam = "sm120/sm121" if family == "sm120" else family
    return "[FP4 gemm Runner] " + _FAILURES[kind].format(family=fam)


_FP4_DTYPES = (torch.uint8, torch.float4_e2m1fn_x2)
_SF_DTYPES = (torch.uint8, torch.float8_e4m3fn)


@dataclass
class FakeCutlassFp4Runner:
    """One ``CutlassFp4GemmRunner``; ``family`` is the module FlashInfer would load."""

    family: str  # "sm100", "sm103", "sm120"
    owner: "FakeFlashInfer"

    def get_valid_tactics(self, inputs: list, profile: object) -> list[int]:
        self.owner.calls += 1
        return list(range(len(self.owner.configs(self.family))))

    def __call__(self, inputs: list, tactic: int = -1, do_preparation: bool = False, **kwargs: object) -> torch.Tensor:
        """``CutlassFp4GemmRunner.forward`` (its ``**kwargs`` is the real one's, unused there too)."""
        t0 = clock.now()
        self.owner.calls += 1
        require(len(inputs) == 10, f"runner inputs must have 10 entries, got {len(inputs)}")
        a, b, a_sf, b_sf, alpha, out_dtype, out, block_size, use_nvfp4, ws = inputs
        # mm_fp4 Python-level checks (_check_mm_fp4_problem_size, _cutlass_gemm_fp4_requirement)
        require(a.ndim == 2 and b.ndim == 2, f"mm_fp4 accepts 2d tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
        require(a.shape[1] == b.shape[0], f"K dimension mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}")
        require(a.dtype in _FP4_DTYPES and b.dtype in _FP4_DTYPES, f"a/b dtypes {a.dtype}, {b.dtype}")
        require(a_sf.dtype in _SF_DTYPES and b_sf.dtype in _SF_DTYPES, f"scale dtypes {a_sf.dtype}, {b_sf.dtype}")
        require(isinstance(alpha, torch.Tensor) and alpha.dtype == torch.float32 and alpha.numel() == 1,
                f"alpha must be a 1-element float32 tensor, got {alpha!r}")
        require(out_dtype in (torch.bfloat16, torch.float16), f"out_dtype {out_dtype}")
        require(block_size == 16 and use_nvfp4 is True, "cutlass backend is NVFP4 only (block 16)")
        require(out.is_contiguous(), "The CUTLASS FP4 GEMM backend requires a contiguous output tensor.")
        # runner.forward: uint8 views, then fp4_gemm(a, b.T, a_sf, b_sf.T, alpha, out, ws, tactic)
        if a.dtype == torch.uint8 and a_sf.dtype == torch.float8_e4m3fn:
            a_sf = a_sf.view(torch.uint8)
        if b.dtype == torch.uint8 and b_sf.dtype == torch.float8_e4m3fn:
            b_sf = b_sf.view(torch.uint8)
        mat1, mat2, mat1_sf, mat2_sf = a, b.T, a_sf, b_sf.T
        for name, t in (("mat1", mat1), ("mat2", mat2), ("mat1Scale", mat1_sf), ("mat2Scale", mat2_sf)):
            require(t.dtype == torch.uint8, f"{name} must be uint8, got {t.dtype}")
            require(t.is_contiguous(), f"{name} must be contiguous (b / b_descale must be .T views of "
                                       f"contiguous [N, ...] tensors); strides {t.stride()}")
        same_device(mat1, mat2, mat1_sf, mat2_sf, alpha, out, ws)
        m, n, k = mat1.shape[0], mat2.shape[0], mat2.shape[1] * 2
        require(mat1.shape[1] == mat2.shape[1], "mat1 and mat2 shapes cannot be multiplied")
        if self.family in ("sm100", "sm103"):
            require(k % 32 == 0, f"Expected k to be divisible by 32, k: {k}")
            require(n % 32 == 0, f"Expected n to be divisible by 32, n: {n}")
        c = k // 16
        require(tuple(mat1_sf.shape) == (pad(m, 128), pad(c, 4)),
                f"a_descale must be 128x4 swizzled [{pad(m, 128)}, {pad(c, 4)}], got {tuple(mat1_sf.shape)}")
        require(tuple(mat2_sf.shape) == (pad(n, 128), pad(c, 4)),
                f"b_descale must be the .T of 128x4 swizzled [{pad(n, 128)}, {pad(c, 4)}], got {tuple(mat2_sf.shape)}")
        require(tuple(out.shape) == (m, n) and out.dtype == out_dtype, f"out {tuple(out.shape)} {out.dtype}")
        require(ws.dtype == torch.uint8 and ws.ndim == 1, "workspace must be a 1-D uint8 buffer")
        if self.owner.reject:
            raise FakeContractError(f"Check failed: {self.owner.reject}")
        configs = self.owner.configs(self.family)
        require(tactic == -1 or 0 <= tactic < len(configs), f"tactic must be between 0 and {len(configs)}")
        config = self.owner.default_config(self.family) if tactic == -1 else configs[tactic]
        if tactic in self.owner.failing:
            raise RuntimeError(_failure(self.owner.failing[tactic], self.family))
        mis = self.owner.misread
        da = dequant(raw_bytes(mat1).view(m, k // 2), read_scales(mat1_sf, m, c, "e4m3", misread=mis), 16, mis)
        dw = dequant(raw_bytes(mat2).view(n, k // 2), read_scales(mat2_sf, n, c, "e4m3", misread=mis), 16, mis.for_weights())
        acc = da @ dw.T
        if not mis.ignore_global:
            acc = acc * alpha.reshape(-1)[0]
        band = self.owner.zero_band
        if band is not None and band[0] <= m <= band[1]:
            acc = torch.zeros_like(acc)
        acc = self.owner.later_fault(acc, mat1, mat1_sf, out, tactic, m, c)
        write(out, acc)
        self.owner.launches.append(tactic)
        self.owner.kernels.append(f"cutlass3x_{self.family}_fp4gemm_{config}")
        self._wait_until(t0 + self.owner.device_time(self.family, config))
        return out

    @staticmethod
    def _wait_until(deadline: float) -> None:
        """Let the simulated device time pass (``clock.advance``): a kernel runs on the GPU, not on
        this CPU. On the real clock that is a sleep (a busy-wait would be a CPU-bound task that the
        scheduler preempts on a loaded machine, by a whole tick, ~4 ms, in ~40 % of 20 ms waits on
        the shared 2-core test machine; a sleeping process is woken within ~0.1 ms in all but ~1 %
        of them); on a simulated clock the time moves by exactly that much."""
        left = deadline - clock.now()
        if left > 0:
            clock.advance(left)


@dataclass
class FakeFlashInfer:
    """Builds the ``FlashInferAPI`` the adapter takes; counts every library call."""

    failing: Mapping[int, str] | Collection[int] = ()  # tactic -> "workspace" | "can_implement" | "init" | "run"
    misread: Misread = EXACT
    supported_sms: Collection[int] = (100, 103, 107, 110, 120, 121)
    #: replace a family's config list (a library build that dropped or re-ordered configs)
    config_lists: Mapping[str, Sequence[str]] = field(default_factory=dict)
    version: str = releases.DEFAULT
    #: simulated device time of a launch, and what a stream-K re-initialization adds (seconds)
    call_s: float = 0.0
    streamk_memset_s: float = 0.0
    #: an argument check the call fails (TVM-FFI "Check failed: ..."), e.g. a changed contract
    reject: str | None = None
    #: rows [lo, hi] of M for which the kernel writes zeros (FlashInfer #3398 on SM120)
    zero_band: tuple[int, int] | None = None
    #: a fault of a later launch (``later_fault``): "late", "copy" or "padding"
    later: str | None = None
    calls: int = 0
    launches: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    _per_buffer: dict = field(default_factory=dict)
    _first_a: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.failing, Mapping):
            self.failing = {t: "init" for t in self.failing}
        if self.later not in (None, "late", "copy", "padding"):
            raise ValueError(f"later fault {self.later!r}: use late, copy or padding")

    def later_fault(self, acc: torch.Tensor, a: torch.Tensor, a_sf: torch.Tensor, out: torch.Tensor, tactic: int,
                    m: int, c: int) -> torch.Tensor:
        """The result of a launch under the ``later`` fault: "late" zeroes it from the third launch
        of a tactic into one output buffer on (FlashInfer #4841: passes warm-up, then corrupts; a
        new output tensor counts afresh, also at the address of a freed one);
        "copy" scales it by 1.5 unless ``a`` is the activation tensor of the first launch of this
        shape, while that tensor lives (another address, another answer); "padding" adds the E4M3
        value of the first padding byte of the activation scales (vLLM #45741)."""
        if self.later == "late":
            key = (out.data_ptr(), tactic)
            seen = self._per_buffer.get(key)
            if seen is None or seen[0]() is not out:  # a new buffer, maybe at a freed one's address
                seen = self._per_buffer[key] = [weakref.ref(out), 0]
            seen[1] += 1
            return torch.zeros_like(acc) if seen[1] > 2 else acc
        if self.later == "copy":
            first = self._first_a.get((m, c))
            if first is None or first() is None:
                self._first_a[(m, c)] = weakref.ref(a)
                return acc
            return acc if first() is a else acc * 1.5
        if self.later == "padding":
            used = torch.zeros(raw_bytes(a_sf).numel(), dtype=torch.bool)
            used[offsets_128x4(m, c).flatten()] = True
            spare = (~used).nonzero().flatten()
            if spare.numel():
                at = int(spare[0])
                return acc + raw_bytes(a_sf)[at:at + 1].view(torch.float8_e4m3fn).float()
        return acc

    def configs(self, family: str) -> Sequence[str]:
        return self.config_lists.get(family) or (SM120_CONFIGS if family == "sm120" else SM100_CONFIGS)

    def device_time(self, family: str, config: str) -> float:
        """Simulated seconds one launch of ``config`` takes (0 without ``call_s``)."""
        if not self.call_s:
            return 0.0
        reinit = releases.release(self.version).streamk_reinit and family == "sm120" and config.endswith("streamk")
        return self.call_s + (self.streamk_memset_s if reinit else 0.0)

    def default_config(self, family: str) -> str:
        return SM120_DEFAULT if family == "sm120" else self.configs(family)[0]

    def api(self) -> FlashInferAPI:
        return FlashInferAPI(version=self.version, cutlass_supported=self._supported,
                             fp4_runner=self._runner, workspace=self._workspace)

    def _supported(self, sm: int) -> bool:
        self.calls += 1
        return sm in self.supported_sms

    def _runner(self, major: int, minor: int) -> FakeCutlassFp4Runner:
        self.calls += 1
        if major in (10, 11):
            return FakeCutlassFp4Runner("sm103" if minor == 3 else "sm100", self)
        if major == 12:
            return FakeCutlassFp4Runner("sm120", self)
        raise ValueError(f"Unsupported SM major version: {major}")

    def _workspace(self, device: torch.device) -> torch.Tensor:
        self.calls += 1
        return torch.empty(1024, dtype=torch.uint8, device=device)
