"""FlashInfer dense NVFP4 GEMM through the CUTLASS FP4 runner, one explicit tactic per launch.

``flashinfer.mm_fp4(backend="cutlass")`` has no tactic argument and, outside autotuning, always
runs tactic -1 (= 0 on SM100, a fixed default on SM120: the "default" row), so this adapter drives the same runner
object ``mm_fp4`` builds (flashinfer/gemm/gemm_base.py, CutlassFp4GemmRunner)::

    runner = flashinfer.gemm.gemm_base.get_cutlass_fp4_gemm_module(major, minor).cutlass_fp4_gemm_runner()
    ws     = flashinfer.utils._get_cache_buf("mm_fp4_workspace", DEFAULT_WORKSPACE_SIZE, device)
    runner(inputs=[a, w.T, a_sf, w_sf.T, alpha, torch.bfloat16, out, 16, True, ws], tactic=t)

No autotuner runs in the timed path. Tactics are -1 ("default") and ``range(fp4_gemm_tactic_num())``
(read through ``runner.get_valid_tactics``), labelled ``tNN``; the config of each comes from the
tile tables below (SM100/110 and SM120/121) for the FlashInfer releases in ``VERIFIED_TABLES``;
any other release, SM103 (its table is not verified) or an unexpected tactic count gets a
config that says "config unknown ..." and why.

Library access goes through ``FlashInferAPI`` so that CPU contract tests can hand the adapter a
fake (``FlashInferDense(api=fake)``) implementing the documented semantics.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from fp4bench import formats
from fp4bench.backends.builtin import _gating
from fp4bench.backends._errors import tactic_failure
from fp4bench.backends.builtin._marshal import fp4_pair, nvfp4_alpha
from fp4bench.backends.alignment import CUTLASS_FP4_SM100
from fp4bench.backends.base import Availability, Backend, Prepared, Tactic
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import GemmProblem, Problem

SUPPORTED_SMS = frozenset({100, 103, 110, 120, 121})
DIST = "flashinfer-python"
#: What the runner throws for one tactic that cannot run this problem, before or while
#: launching (``throw std::runtime_error("[FP4 gemm Runner] " + errMsg)`` in flashinfer
#: 0.7.2.post1 include/flashinfer/gemm/fp4_gemm_template_sm100.h:281-302, sm103.h:263-284,
#: sm120.h:166-192): workspace too small for the config, CUTLASS ``can_implement``,
#: ``initialize`` and ``run``. A failed ``TVM_FFI_ICHECK`` argument check
#: (csrc/fp4_gemm_cutlass.cu:100-170, "Check failed: ...") is our bug and propagates.
TACTIC_FAILURES = (
    "Requested workspace size insufficient",
    "FP4 Gemm cutlass kernel will fail for params",
    "Failed to initialize cutlass FP4 gemm",
    "Failed to run cutlass FP4 gemm",
)
#: The library's own choice when no tactic is passed (mm_fp4 outside autotuning): -1. The SM100
#: module maps it to config 0 (csrc/fp4_gemm_cutlass.cu:135-138); the SM120 module to a fixed
#: CtaShape128x128x128B, no swap, data-parallel config (csrc/fp4_gemm_cutlass_sm120.cu:141-145),
#: which is t21 of its list.
LIBRARY_DEFAULT = -1
#: The FlashInfer releases whose SM100 and SM120 config lists are the tables below, checked by
#: diffing the wheels: the tables come from ``CutlassFp4GemmRunner::getConfigs`` in
#: include/flashinfer/gemm/fp4_gemm_cutlass_template.h:194-231 (SM100, 32 configs) and
#: fp4_gemm_cutlass_template_sm120.h:187-220 (SM120, 32 configs), the default from
#: csrc/fp4_gemm_cutlass.cu:135-138 and csrc/fp4_gemm_cutlass_sm120.cu:141-145; these four
#: files are byte-identical in 0.7.2.post1 and 0.7.4 (sha256 f4f6fcb68dc584cb..., 446daaf38d34e643...,
#: a5b2956a1ad54b7a..., a1c4a0e32db900cc...). A release is keyed by its version because the
#: headers are compiled into the JIT module from that wheel; a release not listed here may have
#: re-ordered its list, so its tactics say "config unknown ..." (the executed kernel names,
#: recorded per tactic on the GPU, are then the only identity) until someone diffs its headers
#: and adds it.
VERIFIED_TABLES = ("0.7.2.post1", "0.7.4")


# -- tactic labels (flashinfer 0.7.2.post1 / 0.7.4 include/flashinfer/gemm/*template*.h) ------------

# SM100/110: tile x cluster, then FlashInfer moves five "best" configs to the front. Tile K is in
# elements (the C++ enum's "B" suffix notwithstanding); an even cluster M selects the 2-SM MMA.
_SM100_TILES = ((128, 64, 128), (128, 256, 128), (128, 128, 256), (128, 256, 256))
_SM100_CLUSTERS = ((1, 1), (1, 2), (2, 1), (2, 2), (1, 4), (4, 2), (2, 4), (4, 4))
_SM100_FIRST = (22, 20, 29, 4, 18)

# SM120/121: per tile (K in elements = 2x the enum's byte count) four configs:
# swapAB+DP, DP, swapAB+StreamK, StreamK; cluster 1x1x1.
_SM120_TILES = ((128, 32, 128), (128, 32, 256), (128, 64, 128), (128, 64, 256),
                (128, 128, 128), (128, 128, 256), (256, 128, 128), (128, 256, 128))
_SM120_VARIANTS = ("swap-dp", "noswap-dp", "swap-streamk", "noswap-streamk")


def _tile(t: tuple[int, int, int]) -> str:
    return "x".join(str(v) for v in t)


def _sm100_descriptions() -> tuple[str, ...]:
    base = [(tile, cl) for tile in _SM100_TILES for cl in _SM100_CLUSTERS]
    order = list(_SM100_FIRST) + [i for i in range(len(base)) if i not in _SM100_FIRST]
    out = []
    for i in order:
        tile, (cm, cn) = base[i]
        out.append(f"{_tile(tile)}-c{cm}x{cn}-{'2sm' if cm % 2 == 0 else '1sm'}")
    return tuple(out)


def _sm120_descriptions() -> tuple[str, ...]:
    return tuple(f"{_tile(tile)}-{v}" for tile in _SM120_TILES for v in _SM120_VARIANTS)


SM100_TACTICS = _sm100_descriptions()
SM120_TACTICS = _sm120_descriptions()
SM120_DEFAULT_INDEX = 4 * _SM120_TILES.index((128, 128, 256)) + _SM120_VARIANTS.index("noswap-dp")  # t21


def tactic_table(major: int, minor: int) -> tuple[str, ...] | None:
    """Descriptions indexed by tactic for the module FlashInfer picks on (major, minor), or None
    when no verified table exists (SM103 uses its own module: unverified)."""
    if major in (10, 11) and minor != 3:
        return SM100_TACTICS
    if major == 12:
        return SM120_TACTICS
    return None


def _unknown(version: str, major: int, minor: int, count: int) -> str | None:
    """Why tactic configs are unknown here, or None when the verified table applies."""
    if version not in VERIFIED_TABLES:
        return f"config unknown for flashinfer {version} (tables not verified)"
    table = tactic_table(major, minor)
    if table is None:
        return f"config unknown on SM{major}{minor} (flashinfer {version}: table not verified)"
    if count != len(table):
        return (f"config unknown: flashinfer {version} lists {count} tactics on SM{major}{minor}, "
                f"the verified table {len(table)}")
    return None


def tactic_configs(count: int, major: int, minor: int, version: str) -> list[str]:
    """The config each tactic index selects, from the verified tile tables; for every index the
    reason the config is unknown when the version, the architecture's table or the count differ."""
    why = _unknown(version, major, minor, count)
    table = tactic_table(major, minor)
    return [why] * count if why is not None or table is None else list(table)


def default_config(major: int, minor: int, version: str) -> str:
    """The config tactic -1 runs (``LIBRARY_DEFAULT``), or why it is unknown."""
    table = tactic_table(major, minor)
    why = _unknown(version, major, minor, len(table) if table is not None else 0)
    if why is not None or table is None:
        return str(why)
    return table[0] if major in (10, 11) else SM120_TACTICS[SM120_DEFAULT_INDEX]


# -- library access --------------------------------------------------------------------------

@dataclass(frozen=True)
class FlashInferAPI:
    """The few FlashInfer entry points the adapter uses (a fake replaces them in CPU tests).

    cutlass_supported(sm): ``mm_fp4.is_backend_supported("cutlass", sm)`` (pure Python check).
    fp4_runner(major, minor): the ``CutlassFp4GemmRunner`` (JIT-builds the module on first use).
    workspace(device): the shared ``mm_fp4_workspace`` buffer, as ``mm_fp4`` uses it.
    """

    version: str
    cutlass_supported: Callable[[int], bool]
    fp4_runner: Callable[[int, int], Any]
    workspace: Callable[[torch.device], torch.Tensor]


def load_flashinfer() -> FlashInferAPI:
    """Import FlashInfer (lazily: only from availability/prepare) and collect the entry points."""
    import flashinfer
    from flashinfer.gemm.gemm_base import DEFAULT_WORKSPACE_SIZE, get_cutlass_fp4_gemm_module
    from flashinfer.utils import _get_cache_buf

    def runner(major: int, minor: int) -> Any:
        return get_cutlass_fp4_gemm_module(major, minor).cutlass_fp4_gemm_runner()

    def workspace(device: torch.device) -> torch.Tensor:
        return _get_cache_buf("mm_fp4_workspace", DEFAULT_WORKSPACE_SIZE, device)

    return FlashInferAPI(
        version=str(flashinfer.__version__),
        cutlass_supported=lambda sm: bool(flashinfer.mm_fp4.is_backend_supported("cutlass", sm)),
        fp4_runner=runner,
        workspace=workspace,
    )


class FlashInferDense(Backend):
    """``flashinfer-cutlass``: dense NVFP4 x NVFP4 -> bf16, every CUTLASS tactic explicitly."""

    name = "flashinfer-cutlass"
    kinds = frozenset({"dense"})
    alignment = CUTLASS_FP4_SM100  # K % 32, N % 32 (FlashInfer's SM100 CUTLASS FP4 check)
    act_format = "nvfp4"
    weight_format = "nvfp4"
    api = "flashinfer CutlassFp4GemmRunner (mm_fp4 backend='cutlass'), explicit tactic, no autotuner"

    def __init__(self, api: FlashInferAPI | None = None) -> None:
        # Stored under another name: ``Backend.api`` is the human-readable description.
        self._lib: FlashInferAPI | None = api

    def _library(self) -> FlashInferAPI:
        if self._lib is None:
            self._lib = load_flashinfer()
        return self._lib

    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        reason = _gating.arch_reason(info, SUPPORTED_SMS)
        if reason:
            return Availability.no(reason)
        failed = _gating.load_failure(DIST, self._library) if self._lib is None else None
        if failed is not None:
            return Availability.no(*failed)
        lib = self._library()
        if not lib.cutlass_supported(info.sm):
            return Availability.no(f"flashinfer {lib.version}: mm_fp4 backend 'cutlass' does not support "
                                   f"{info.describe()}", lib.version)
        return Availability.yes(lib.version)

    @staticmethod
    def _arch(device: torch.device) -> _gating.DeviceInfo:
        info = _gating.device_info(device)
        if info is None:
            raise RuntimeError(f"flashinfer-cutlass: {device} is not a CUDA device ({_gating.NO_CUDA})")
        return info

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        """The library's default (-1, what ``mm_fp4`` runs) first, then every tactic it lists.

        Labels are the library's tactic indices (``tNN``: what it takes, stable keys across
        versions); the config each one selects travels separately (``Tactic.config``), and on
        the GPU the executed kernel names are recorded, so a library that re-orders its list
        shows up as "tactic tNN now runs another kernel" instead of a timing change."""
        info = self._arch(device)
        lib = self._library()
        runner = lib.fp4_runner(info.major, info.minor)
        ids = [int(t) for t in runner.get_valid_tactics([], None)]
        configs = tactic_configs(len(ids), info.major, info.minor, lib.version)
        if ids != list(range(len(ids))):  # configs index the table; anything else has none
            configs = [f"config unknown: flashinfer {lib.version} lists tactics {ids[:4]}..., not 0..{len(ids) - 1}"
                       ] * len(ids)
        default = Tactic(LIBRARY_DEFAULT, "default", default_config(info.major, info.minor, lib.version), default=True)
        return [default] + [Tactic(value=t, label=f"t{t:02d}", config=c) for t, c in zip(ids, configs)]

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        why = self.unsupported_reason(problem)
        if why:
            raise ValueError(why)
        assert isinstance(problem, GemmProblem)
        qa, qw = fp4_pair(operands, formats.NVFP4, self.name)
        info = self._arch(device)
        lib = self._library()
        a = qa.data.to(device).contiguous()                        # [M, K/2] uint8
        w = qw.data.to(device).contiguous()                        # [N, K/2] uint8
        a_sf = formats.swizzle_128x4(qa.scales).to(device)        # [pad128(M), pad4(K/16)] e4m3
        w_sf = formats.swizzle_128x4(qw.scales).to(device)        # [pad128(N), pad4(K/16)] e4m3
        alpha = nvfp4_alpha(qa.global_scale, qw.global_scale).reshape(1).to(device)  # fp32 [1], read on device
        out = torch.empty((problem.m, problem.n), dtype=torch.bfloat16, device=device)
        ws = lib.workspace(a.device)
        runner = lib.fp4_runner(info.major, info.minor)
        inputs = [a, w.T, a_sf, w_sf.T, alpha, torch.bfloat16, out, 16, True, ws]
        return Prepared(problem, out, {"runner": runner, "inputs": inputs})

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        try:
            prepared.args["runner"](inputs=prepared.args["inputs"], tactic=tactic.value)
        except RuntimeError as exc:
            unsupported = tactic_failure(exc, tactic.label, TACTIC_FAILURES)
            if unsupported is None:
                raise  # an argument check or anything else: our bug, never "unsupported"
            raise unsupported from exc
        return prepared.out


BACKENDS = [FlashInferDense()]
