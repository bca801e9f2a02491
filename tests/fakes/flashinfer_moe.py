"""Fake FlashInfer CUTLASS fused MoE for Blackwell NVFP4 (``cutlass_fused_moe``, 0.7.2.post1 / 0.7.4).

Written from the library's binding and kernels, decoding with ``fakes.decode`` (not
``fp4bench.formats``):

* arguments (csrc/fused_moe/cutlass_backend/flashinfer_cutlass_fused_moe_binding.cu:1456-1545):
  ``input`` uint8 ``[T, H/2]`` + ``input_sf`` (128x4 swizzled e4m3 bytes), weights int64 views
  ``[E, 2I, H/16]`` / ``[E, H, I/16]``, six ``quant_scales`` (fc1 act global, fc1 weight block
  int32 ``[E, 2I, H/64]``, fc1 global ``[E]`` = alpha, fc2 act global, fc2 weight block, fc2
  global ``[E]``); a failed check raises ``FakeContractError`` ("Check failed: ..."), as
  TVM-FFI's ``TVM_FFI_ICHECK`` does (a RuntimeError);
* GEMM1 reads the fc1 rows *up first, gate second* (the gated activation takes the gate from
  the second half), stores bf16; SwiGLU; the activation is re-quantized to NVFP4 with the fc2
  act global scale (TRT-LLM ``cvt_warp_fp16_to_fp4``: block scale = e4m3(amax / 6 * gs),
  values RNE to E2M1); GEMM2 times fc2 global, stores bf16; fp32 finalize; bf16 output;
* profile ids ``[g1, g2]``: ``-1`` or ``[0, n1)`` / ``[n1, n1 + n2)`` (binding :716-719);
  ``failing`` tactics raise TRT-LLM's per-tactic texts (moe_gemm_tma_ws_launcher.inl:755-773).

* keywords: exactly those of the release's signature (``fakes.flashinfer_releases``), an unknown
  one raises Python's ``TypeError``; ``FLASHINFER_NVFP4_4OVER6=1`` (and not pinned off by 0.7.4's
  ``nvfp4_4over6=None``) re-quantizes the intermediate with the 4over6 recipe, as the library
  does: each 16-block quantized with the scale that maps its amax to 6 and with 1.5 times it
  (amax to 4), the one with the smaller summed error kept -- absolute error unless
  ``FLASHINFER_NVFP4_4OVER6_ERR_MODE=MSE`` (TRT-LLM kernels/quantization_utils.cuh:418-427,
  :519-530, :648; the variables read as common/envUtils.cpp:61-64, :370-385 read them).

``fault`` reproduces library/adapter disagreements for the simulated runs: ``gate_first``,
``scales_linear``, ``ignore_global`` (alpha not applied), ``arg_check`` (a check our call fails).

Without ``profile_ids`` the call asks ``tuner`` (``fakes.flashinfer_mm_fp4.FakeAutoTuner``) for the
GEMM1 and GEMM2 tactics, as core.py does (``choose_one("trtllm::fused_moe::gemm1", [runner], ...,
gemm_idx=1)``, then ``gemm2``). A call lasts ``call_s`` simulated seconds; ``tuner_fault``:
``mispick`` (the tuner reads GEMM1 tactic ``MISPICK_TACTIC`` as fastest; the call then takes twice
as long) or ``tuned_wrong`` (GEMM1 tactic ``WRONG_TACTIC`` is the fastest and ignores alpha).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import os

import torch

from fakes import flashinfer_releases as releases
from fakes.decode import E2M1_VALUES, FakeContractError, Misread, dequant, raw_bytes, read_scales
from fakes.flashinfer import FakeCutlassFp4Runner
from fakes.flashinfer_mm_fp4 import MISPICK_TACTIC, WRONG_TACTIC, moe_valid_tactics
from fp4bench import clock

_TACTIC_TEXT = {
    "can_implement": "[TensorRT-LLM][ERROR] Assertion failed: Grouped GEMM kernel will fail for params. "
                     "Error: Error Misaligned Operand",
    "init": "[TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS grouped gemm. "
            "Error: Error Internal",
}


def check(cond: bool, msg: str) -> None:
    """TVM-FFI ``TVM_FFI_ICHECK``: a RuntimeError starting ``Check failed``."""
    if not cond:
        raise FakeContractError(f"Check failed: {msg}")


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest E2M1 value (ties to the even code), saturating at +-6."""
    grid = torch.tensor(sorted(set(abs(v) for v in E2M1_VALUES)), dtype=torch.float32)  # 0 .. 6
    mag = x.abs().clamp(max=6.0)
    d = (mag[..., None] - grid).abs()
    best = d.min(-1, keepdim=True).values
    ties = d == best
    codes = torch.arange(len(grid))
    even = ties & (codes % 2 == 0)
    idx = torch.where(even.any(-1), even.float().argmax(-1), ties.float().argmax(-1))
    return grid[idx] * torch.sign(x)


def four_over_six_from_env() -> str | None:
    """The 4over6 error mode the environment selects ("MAE" or "MSE"), None when 4over6 is off:
    on only for ``FLASHINFER_NVFP4_4OVER6`` exactly "1" (envUtils.cpp:61-64 ``getBoolEnv``)."""
    if os.environ.get("FLASHINFER_NVFP4_4OVER6") != "1":
        return None
    mode = os.environ.get("FLASHINFER_NVFP4_4OVER6_ERR_MODE", "MAE").upper()
    if mode not in ("MAE", "MSE"):
        raise ValueError("FLASHINFER_NVFP4_4OVER6_ERR_MODE must be MAE or MSE.")
    return mode


def requantize_nvfp4(x: torch.Tensor, gs: torch.Tensor, four_over_six: str | None = None) -> torch.Tensor:
    """``x`` [R, C] -> its NVFP4 round trip with encode global scale ``gs`` (the kernel's requant);
    ``four_over_six`` ("MAE" / "MSE"): per block, the better by that error of scaling the block's
    amax to 6 or to 4 (a tie keeps 6)."""
    r, c = x.shape
    b = x.reshape(r, c // 16, 16)

    def trip(top: float) -> torch.Tensor:
        sf = (b.abs().amax(-1) / top * gs).to(torch.float8_e4m3fn).to(torch.float32)
        safe = torch.where(sf > 0, sf, torch.ones_like(sf))
        return e2m1_round(b * (gs / safe)[..., None]) * (sf / gs)[..., None]

    out = trip(6.0)
    if four_over_six:
        four = trip(4.0)
        err = (lambda d: d.square()) if four_over_six == "MSE" else (lambda d: d.abs())
        better = err(four - b).sum(-1, keepdim=True) < err(out - b).sum(-1, keepdim=True)
        out = torch.where(better, four, out)
    return out.reshape(r, c)


#: the keywords ``_run`` implements (the adapter's NVFP4 call); the release accepts more
_MODELLED = frozenset({"input", "token_selected_experts", "token_final_scales", "fc1_expert_weights",
                       "fc2_expert_weights", "output_dtype", "quant_scales", "output", "input_sf",
                       "swizzled_input_sf", "profile_ids", "use_fused_finalize", "workspace_buffer"})


@dataclass
class FakeMoERunner:
    """``MoERunner(...).fused_moe_runner``: tactic counts, occupancy and shape validity."""

    owner: "FakeFusedMoE"

    def get_gemm1_tactic_count(self) -> int:
        return self.owner.n1

    def get_gemm2_tactic_count(self) -> int:
        return self.owner.n2

    def get_tactic_occupancy(self, t: int) -> int:
        return 0 if self.owner.zero_occupancy is True or t in (self.owner.zero_occupancy or ()) else 2

    def get_valid_tactics_for_shape(self, stage: int, n: int, k: int) -> list[int]:
        lo, hi = (0, self.owner.n1) if stage == 1 else (self.owner.n1, self.owner.n1 + self.owner.n2)
        return list(range(lo, hi))


@dataclass
class FakeMoETunable:
    """The ``MoERunner`` as the tuner sees it: valid tactics per GEMM and their simulated times."""

    owner: "FakeFusedMoE"

    def get_valid_tactics(self, inputs: list, profile: object, gemm_idx: int = 1) -> list[int]:
        """``MoERunner.get_valid_tactics``: NVFP4 fc1 ``[E, 2I, H/16]`` int64, fc2 ``[E, H, I/16]``."""
        _, fc1, _, fc2, _ = inputs
        h, two_i = fc2.shape[1], fc1.shape[1]
        n, k = (two_i, h) if gemm_idx == 1 else (h, two_i // 2)
        return moe_valid_tactics(FakeMoERunner(self.owner), gemm_idx, n, k, w4_group_scaling=False)

    def measured_time(self, tactic: int, gemm_idx: int = 1) -> float:
        fault = self.owner.tuner_fault
        if gemm_idx == 1 and tactic == MISPICK_TACTIC and fault == "mispick":
            return 0.0
        if gemm_idx == 1 and tactic == WRONG_TACTIC and fault == "tuned_wrong":
            return 0.5
        return 1.0 + tactic * 1e-3  # the default-order tactic wins a tie


@dataclass
class FakeFusedMoE:
    """The fused-MoE entry points, Blackwell NVFP4 only; counts calls and logs launched kernels."""

    n1: int = 4
    n2: int = 4
    failing: Mapping[int, str] = field(default_factory=dict)
    zero_occupancy: object = ()  # True: every tactic reports 0 (an arch without the query)
    fault: str | None = None
    version: str = releases.DEFAULT
    calls: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    #: the keywords of each call (what the adapter passed)
    keywords: list = field(default_factory=list)
    tuner: object = None
    tuner_fault: str | None = None
    call_s: float = 0.0

    @property
    def release(self) -> releases.Release:
        return releases.release(self.version)

    def workspace_size(self, **kw: object) -> int:
        releases.bind(self.release.workspace_size, "cutlass_fused_moe_workspace_size", kw)
        check(kw.get("use_fused_finalize") is False or kw.get("use_fused_finalize") is None, "fused finalize")
        return 1 << 12

    def runner(self) -> FakeMoERunner:
        return FakeMoERunner(self)

    def cutlass_fused_moe(self, **kwargs: object) -> torch.Tensor:
        """The release's ``cutlass_fused_moe``: its keywords only (TypeError otherwise)."""
        releases.bind(self.release.cutlass_fused_moe, "cutlass_fused_moe", kwargs)
        self.keywords.append(sorted(kwargs))
        pinned = "nvfp4_4over6" in kwargs and kwargs.pop("nvfp4_4over6") is None
        unmodelled = sorted(set(kwargs) - _MODELLED)
        if unmodelled:
            raise NotImplementedError(f"the fake cutlass_fused_moe does not model {unmodelled} (the library takes them)")
        t0 = clock.now()
        if kwargs.get("profile_ids") is None and self.tuner is not None:
            tunable = FakeMoETunable(self)
            ins = [kwargs["input"], kwargs["fc1_expert_weights"], None, kwargs["fc2_expert_weights"], None]
            ids = [self.tuner.choose_one(f"trtllm::fused_moe::gemm{g}", [tunable], None, ins, gemm_idx=g)[1]
                   for g in (1, 2)]
            kwargs["profile_ids"] = ids
        g1 = (kwargs.get("profile_ids") or [-1])[0]
        wrong = self.tuner_fault == "tuned_wrong" and g1 == WRONG_TACTIC
        keep = self.fault
        self.fault = "ignore_global" if wrong else self.fault
        try:
            out = self._run(four_over_six=None if pinned else four_over_six_from_env(), **kwargs)
        finally:
            self.fault = keep
        slow = 2.0 if self.tuner_fault == "mispick" and g1 == MISPICK_TACTIC else 1.0
        FakeCutlassFp4Runner._wait_until(t0 + self.call_s * slow)
        return out

    def _run(self, *, input, token_selected_experts, token_final_scales, fc1_expert_weights,
             fc2_expert_weights, output_dtype, quant_scales, output=None, input_sf=None,
             swizzled_input_sf=True, profile_ids=None, use_fused_finalize=True,
             workspace_buffer=None, four_over_six: str | None = None) -> torch.Tensor:
        self.calls.append(list(profile_ids) if profile_ids is not None else None)
        check(input.dtype == torch.uint8 and input.dim() == 2, "input must be packed NVFP4 uint8 [T, H/2]")
        check(fc1_expert_weights.dtype == torch.int64 and fc2_expert_weights.dtype == torch.int64,
              "NVFP4 weights are passed as int64 views")
        check(len(quant_scales) == 6, "Expecting 6 quant scales for nvfp4 quantization")
        a_gs, s1, alpha1, gs2, s2, alpha2 = quant_scales
        e, two_i = fc1_expert_weights.shape[0], fc1_expert_weights.shape[1]
        h, inter = input.shape[1] * 2, two_i // 2
        for name, t in (("fc1_act_global", a_gs), ("fc1_global", alpha1), ("fc2_act_global", gs2), ("fc2_global", alpha2)):
            check(t.dtype == torch.float32, f"{name} must be float32")
        check(s1.dtype == torch.int32 and s2.dtype == torch.int32 and s1.dim() == 3 and s2.dim() == 3,
              "weight block scales must be int32 [E, rows, cols/4]")
        check(tuple(s1.shape) == (e, two_i, h // 64), "fc1 weight block size must be (num_experts_on_rank, "
              "inter_size * 2, hidden_size // 4 // block_scale_vector_size)")
        check(alpha1.dim() == 1 and alpha1.shape[0] == e, "fc1 global size must be (num_experts_on_rank,)")
        check(gs2.dim() == 0 or gs2.shape[0] == e, "fc2 act global must be scalar or (num_experts_on_rank,)")
        check(input_sf is not None and swizzled_input_sf, "NVFP4 input needs its swizzled input_sf")
        check(output is not None and output.dtype == output_dtype == torch.bfloat16 and
              tuple(output.shape) == (input.shape[0], h), "output must be bf16 [T, H]")
        if self.fault == "arg_check":
            check(token_final_scales.dtype == torch.bfloat16, "token_final_scales must be bf16 for this build")
        g1, g2 = profile_ids if profile_ids is not None else (-1, -1)
        check(g1 == -1 or 0 <= g1 < self.n1, f"Invalid profile id: {g1}")
        check(g2 == -1 or self.n1 <= g2 < self.n1 + self.n2, f"Invalid profile id: {g2}")
        for t in (g1, g2):
            if t in self.failing:
                raise RuntimeError(_TACTIC_TEXT[self.failing[t]] + " (moe_gemm_tma_ws_launcher.inl:761)")
        mis = Misread(scales_linear=self.fault == "scales_linear")
        x = dequant(input, read_scales(input_sf, input.shape[0], h // 16, "e4m3", misread=mis), 16, mis)
        w1b = raw_bytes(fc1_expert_weights.view(torch.uint8)).view(e, two_i, h // 2)
        w2b = raw_bytes(fc2_expert_weights.view(torch.uint8)).view(e, h, inter // 2)
        s1, s2 = s1.view(torch.uint8), s2.view(torch.uint8)
        ids = token_selected_experts
        out = torch.zeros(input.shape[0], h)
        per1, per2 = s1.numel() // e, s2.numel() // e
        for x_e in ids.unique().tolist():
            tok, slot = (ids == x_e).nonzero(as_tuple=True)
            w1 = dequant(w1b[x_e], read_scales(s1, two_i, h // 16, "e4m3", x_e * per1, mis), 16, mis.for_weights())
            w2 = dequant(w2b[x_e], read_scales(s2, h, inter // 16, "e4m3", x_e * per2, mis), 16, mis.for_weights())
            a1 = 1.0 if self.fault == "ignore_global" else alpha1[x_e]
            y1 = ((x[tok] @ w1.T) * a1).to(torch.bfloat16).float()
            up, gate = y1[:, :inter], y1[:, inter:]
            if self.fault == "gate_first":
                up, gate = gate, up
            act = torch.nn.functional.silu(gate) * up
            g = gs2 if gs2.dim() == 0 else gs2[x_e]
            act = requantize_nvfp4(act, g.float(), four_over_six)
            a2 = 1.0 if self.fault == "ignore_global" else alpha2[x_e] * g  # alpha2 = 1/(gs2*gs_w2); act holds /gs2
            y2 = ((act @ w2.T) * a2).to(torch.bfloat16).float()
            out.index_add_(0, tok, y2 * token_final_scales[tok, slot][:, None])
        output.copy_(out.to(torch.bfloat16))
        self.kernels.append(f"cutlass_moe_nvfp4_gemm1_cfg{g1}_gemm2_cfg{g2}")
        return output
