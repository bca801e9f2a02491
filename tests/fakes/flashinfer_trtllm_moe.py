"""Fake FlashInfer TRT-LLM-gen fused MoE, NVFP4 (``trtllm_fp4_block_scale_routed_moe``, 0.7.2.post1 / 0.7.4).

Written from the released wheels (flashinfer/fused_moe/core.py ``trtllm_fp4_block_scale_routed_moe``,
0.7.2.post1 :6606, 0.7.4 :7269; ``trtllm_fp4_block_scale_moe_op``, :3444 in 0.7.2.post1), decoding
with ``fakes.decode``:

* keywords: exactly the release's signature (``ROUTED``; 0.7.4 adds ``workspace_buffer``,
  ``nvfp4_4over6``, ``routing_metadata``), an unknown one raises ``TypeError``;
* ``topk_ids=(ids int32 [T, k], weights bf16 or fp32 [T, k])``; ``hidden_states`` uint8 ``[T, H/2]``
  with *linear* e4m3 scales ``[T, H/16]``; a declared swizzled ``hidden_states_scale_layout`` raises
  ``NotImplementedError`` (0.7.4's validation), ``None`` warns ``DeprecationWarning`` (0.7.4);
* weights uint8 ``[E, 2I, H/2]`` / ``[E, H, I/2]`` in the layout of ``shuffle`` below: rows permuted
  by ``_maybe_get_cached_w3_w1_permute_indices`` (the real gated-activation interleave of the up and
  gate halves, then a fake epilogue shuffle: rows rotated within 32-row blocks, not its own inverse)
  or ``get_w2_permute_indices_with_cache`` (the fake shuffle alone); scales permuted the same way and
  128x4-interleaved (``nvfp4_block_scale_interleave``);
* fc1 rows *up first*; GEMM1 accumulates in fp32, the epilogue scales up by ``output1_scale_scalar``
  and gate by ``output1_scale_gate_scalar``, applies SwiGLU in fp32 and quantizes the result to
  NVFP4 with unit global scale (the fc2 input scale is folded into ``output1_scale_scalar``);
  GEMM2 times ``output2_scale_scalar``, stores bf16; fp32 finalize with the routing weights;
* the tactic: ``tuner.choose_one(TUNER_OP, [runner], ...)`` (the runner lists ``configs``); -1 is
  the launcher's default; a pair not listed raises, as the launcher's config check does.

``fault``: ``gate_first``, ``scales_linear`` (weight scales read linearly), ``ignore_global``
(output scales not applied). ``tuner_fault``: ``mispick`` (config ``MISPICK_TACTIC`` measured
fastest, runs twice as long), ``tuned_wrong`` (config ``WRONG_TACTIC`` fastest, ignores the scales).
"""

from __future__ import annotations

import inspect
import time
import warnings
from dataclasses import dataclass, field

import torch

from fakes import flashinfer_releases as releases
from fakes.decode import FakeContractError, Misread, dequant, raw_bytes, read_scales
from fakes.flashinfer_mm_fp4 import MISPICK_TACTIC, WRONG_TACTIC
from fakes.flashinfer_moe import requantize_nvfp4
from fp4bench import formats

TUNER_OP = "flashinfer::trtllm_fp4_block_scale_moe"
#: the ``[tile_n, config]`` pairs the fake runner lists (``MoERunner.get_valid_tactics``)
CONFIGS = ([8, 0], [8, 1], [16, 0], [16, 1])
SHUFFLE_BLOCK, SHUFFLE_SHIFT = 32, 8

_P = inspect.Parameter
_ROUTED_REQUIRED = ("topk_ids", "routing_bias", "hidden_states", "hidden_states_scale", "gemm1_weights",
                    "gemm1_weights_scale", "gemm1_bias", "gemm1_alpha", "gemm1_beta", "gemm1_clamp_limit",
                    "gemm2_weights", "gemm2_weights_scale", "gemm2_bias", "output1_scale_scalar",
                    "output1_scale_gate_scalar", "output2_scale_scalar", "num_experts", "top_k", "n_group",
                    "topk_group", "intermediate_size", "local_expert_offset", "local_num_experts",
                    "routed_scaling_factor")
_ROUTED_OPTIONAL = (("routing_method_type", 0), ("do_finalize", True), ("enable_pdl", None), ("activation_type", 3),
                    ("per_token_scale", None), ("output", None), ("tune_max_num_tokens", 8192),
                    ("gemm1_lora_delta", None), ("valid_hidden_size", None), ("valid_intermediate_size", None),
                    ("num_fused_shared_experts", None), ("hidden_states_scale_layout", None))
ROUTED = {
    "0.7.2.post1": releases.with_defaults(tuple((n, _P.empty) for n in _ROUTED_REQUIRED) + _ROUTED_OPTIONAL),
    "0.7.4": releases.with_defaults(tuple((n, _P.empty) for n in _ROUTED_REQUIRED) + _ROUTED_OPTIONAL
                                    + (("workspace_buffer", None), ("nvfp4_4over6", releases.UNSET),
                                       ("routing_metadata", None))),
}


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise FakeContractError(f"Check failed: {msg}")


def _shuffle_rows(n: int) -> torch.Tensor:
    rows = torch.arange(n)
    return (rows // SHUFFLE_BLOCK) * SHUFFLE_BLOCK + (rows % SHUFFLE_BLOCK + SHUFFLE_SHIFT) % SHUFFLE_BLOCK


def _gated_interleave(n: int) -> torch.Tensor:
    """``get_reorder_rows_for_gated_act_gemm_row_indices``: rows [0, n/2, 1, n/2 + 1, ...]."""
    out = torch.empty(n, dtype=torch.long)
    out[0::2], out[1::2] = torch.arange(n // 2), torch.arange(n // 2, n)
    return out


def w3_w1_permute_indices(cache: dict, x: torch.Tensor, epilogue_tile_m: int, num_elts_per_sf: int | None = None,
                          is_gated_act_gemm: bool = True) -> torch.Tensor:
    """``core._maybe_get_cached_w3_w1_permute_indices`` of the fake layout."""
    check(epilogue_tile_m == 128 and x.shape[0] % 128 == 0, "rows must be a multiple of epilogue_tile_m = 128")
    first = _gated_interleave(x.shape[0]) if is_gated_act_gemm else torch.arange(x.shape[0])
    return first[_shuffle_rows(x.shape[0])]


def w2_permute_indices(cache: dict, x: torch.Tensor, epilogue_tile_m: int, num_elts_per_sf: int | None = None,
                       is_gated_act_gemm: bool | None = None) -> torch.Tensor:
    """``core.get_w2_permute_indices_with_cache`` of the fake layout."""
    check(epilogue_tile_m == 128 and x.shape[0] % 128 == 0, "rows must be a multiple of epilogue_tile_m = 128")
    return _shuffle_rows(x.shape[0])


def nvfp4_block_scale_interleave(sf: torch.Tensor) -> torch.Tensor:
    """``flashinfer.nvfp4_block_scale_interleave``: uint8 ``[rows, K/16]`` -> 128x4 order."""
    check(sf.dtype == torch.uint8 and sf.dim() == 2, "block scales must be uint8 [rows, K/16]")
    return formats.swizzle_128x4(sf).reshape(-1)


def _unpermute(x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The rows of ``x`` back in their order before ``x = orig[perm]``."""
    return x[torch.argsort(perm)]


@dataclass
class FakeTrtllmRunner:
    """``TrtllmMoERunner`` as the tuner sees it: the listed configs and their simulated times."""

    owner: "FakeTrtllmMoE"

    def get_valid_tactics(self, inputs: list, profile: object, **kwargs: object) -> list[list[int]]:
        return [list(c) for c in self.owner.configs]

    def measured_time(self, tactic: list[int], **kwargs: object) -> float:
        index = [list(c) for c in self.owner.configs].index(list(tactic))
        if index == MISPICK_TACTIC and self.owner.tuner_fault == "mispick":
            return 0.0
        if index == WRONG_TACTIC and self.owner.tuner_fault == "tuned_wrong":
            return 0.5
        return 1.0 + index * 1e-3


@dataclass
class FakeTrtllmMoE:
    """The TRT-LLM-gen fused-MoE entry points of one simulated release; counts calls, logs kernels."""

    version: str = releases.DEFAULT
    tuner: object = None
    tuner_fault: str | None = None
    fault: str | None = None
    configs: tuple = CONFIGS
    call_s: float = 0.0
    calls: list = field(default_factory=list)
    kernels: list = field(default_factory=list)

    @property
    def signature(self) -> inspect.Signature:
        return ROUTED[releases.release(self.version).version]

    def routed_moe(self, *args: object, **kwargs: object) -> list[torch.Tensor]:
        bound = releases.bind_call(self.signature, "trtllm_fp4_block_scale_routed_moe", args, kwargs)
        t0 = time.perf_counter()
        layout = bound["hidden_states_scale_layout"]
        if layout is None and self.version != "0.7.2.post1":
            warnings.warn("hidden_states_scale_layout=None is deprecated", DeprecationWarning, stacklevel=2)
        elif layout is not None and layout != releases.SfLayout.layout_linear:
            raise NotImplementedError("the trtllm-gen routed GEMM consumes only the linear scale layout")
        tactic = -1
        if self.tuner is not None:
            ins = [bound["output"], None, bound["topk_ids"][0], bound["topk_ids"][1], bound["hidden_states"],
                   bound["hidden_states_scale"], None, None]
            tactic = self.tuner.choose_one(TUNER_OP, [FakeTrtllmRunner(self)], None, ins)[1]
        check(tactic == -1 or list(tactic) in [list(c) for c in self.configs], f"invalid MoE config {tactic}")
        index = -1 if tactic == -1 else [list(c) for c in self.configs].index(list(tactic))
        wrong = self.tuner_fault == "tuned_wrong" and index == WRONG_TACTIC
        out = self._run(bound, ignore_global=wrong or self.fault == "ignore_global")
        self.calls.append(tactic)
        self.kernels.append(f"trtllmgen_moe_nvfp4_{'default' if index < 0 else 'tile%d_cfg%d' % tuple(tactic)}")
        slow = 2.0 if self.tuner_fault == "mispick" and index == MISPICK_TACTIC else 1.0
        left = t0 + self.call_s * slow - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return [out]

    def _run(self, b: dict, ignore_global: bool) -> torch.Tensor:
        ids, wts = b["topk_ids"]
        x, w1, w2 = b["hidden_states"], b["gemm1_weights"], b["gemm2_weights"]
        e, inter, k = b["num_experts"], b["intermediate_size"], b["top_k"]
        t, h = x.shape[0], x.shape[1] * 2
        check(ids.dtype == torch.int32 and tuple(ids.shape) == (t, k), "topk_ids must be int32 [T, top_k]")
        check(wts.dtype in (torch.bfloat16, torch.float32) and wts.shape == ids.shape, "weights bf16/fp32 [T, top_k]")
        check(x.dtype == torch.uint8 and w1.dtype == torch.uint8 and w2.dtype == torch.uint8, "NVFP4 packed uint8")
        check(tuple(w1.shape) == (e, 2 * inter, h // 2) and tuple(w2.shape) == (e, h, inter // 2), "weight shapes")
        for name in ("hidden_states_scale", "gemm1_weights_scale", "gemm2_weights_scale"):
            check(b[name].dtype == torch.float8_e4m3fn, f"{name} must be float8_e4m3fn")
        check(b["hidden_states_scale"].numel() == t * h // 16, "hidden_states_scale must be [T, H/16] (linear)")
        scales = [b[n] for n in ("output1_scale_scalar", "output1_scale_gate_scalar", "output2_scale_scalar")]
        check(all(s is not None and s.dtype == torch.float32 and tuple(s.shape) == (e,) for s in scales),
              "output scales must be float32 [local_num_experts]")
        check(b["do_finalize"] and b["routing_method_type"] == 0 and b["activation_type"] == 3, "modelled call")
        out = b["output"]
        check(out is not None and out.dtype == torch.bfloat16 and tuple(out.shape) == (t, h), "output bf16 [T, H]")
        c1, g1, c2 = (torch.ones(e) if ignore_global else s for s in scales)
        mis = Misread(scales_linear=self.fault == "scales_linear")
        xs = raw_bytes(b["hidden_states_scale"]).view(torch.float8_e4m3fn).float().view(t, h // 16)
        xd = dequant(x, xs, 16)
        p1, p2 = _gated_interleave(2 * inter)[_shuffle_rows(2 * inter)], _shuffle_rows(h)
        s1b, s2b = raw_bytes(b["gemm1_weights_scale"]), raw_bytes(b["gemm2_weights_scale"])
        per1, per2 = s1b.numel() // e, s2b.numel() // e
        acc = torch.zeros(t, h)
        for x_e in ids.unique().tolist():
            tok, slot = (ids == x_e).nonzero(as_tuple=True)
            sc1 = _unpermute(read_scales(s1b, 2 * inter, h // 16, "e4m3", x_e * per1, mis.for_weights()), p1)
            sc2 = _unpermute(read_scales(s2b, h, inter // 16, "e4m3", x_e * per2, mis.for_weights()), p2)
            wd1 = dequant(_unpermute(w1[x_e], p1), sc1, 16)
            wd2 = dequant(_unpermute(w2[x_e], p2), sc2, 16)
            y1 = xd[tok] @ wd1.T
            up, gate = y1[:, :inter] * c1[x_e], y1[:, inter:] * g1[x_e]
            if self.fault == "gate_first":
                up, gate = y1[:, inter:] * c1[x_e], y1[:, :inter] * g1[x_e]
            act = requantize_nvfp4(torch.nn.functional.silu(gate) * up, torch.tensor(1.0))
            y2 = ((act @ wd2.T) * c2[x_e]).to(torch.bfloat16).float()
            acc[tok] += y2 * wts[tok, slot].float()[:, None]  # a token routes to an expert at most once
        out.copy_(acc.to(torch.bfloat16))
        return out


# --- the modules the adapter imports (``trtllm_moe_api(flashinfer, core, get_tuner)``) ------------
class DtypeTrtllmGen:
    """``flashinfer.tllm_enums.DtypeTrtllmGen`` (the member the NVFP4 call uses)."""

    E2m1 = "E2m1"


class Fp8QuantizationType:
    NoneFp8 = 0


class WeightLayout:
    MajorK = 0


@dataclass
class MoeRunnerInputs:
    """``flashinfer.fused_moe.shared.inputs.MoeRunnerInputs`` (field order = the tuner's input list)."""

    output: object
    routing_logits: object
    topk_ids: object
    expert_weights: object
    hidden_states: object
    hidden_states_scale: object
    gemm1_lora_delta: object
    per_token_scale: object

    def to_list(self) -> list:
        return [self.output, self.routing_logits, self.topk_ids, self.expert_weights, self.hidden_states,
                self.hidden_states_scale, self.gemm1_lora_delta, self.per_token_scale]


#: ``TrtllmMoERunner.__init__``'s keywords after ``moe_op`` (backends/trtllm/sm100_runner.py:60 / :63);
#: 0.7.4 adds ``nvfp4_4over6_code``
_RUNNER_KW = ("top_k", "num_local_experts", "dtype_act", "dtype_weights", "fp8_quantization_type", "hidden_size",
              "intermediate_size", "activation_type", "hidden_size_output", "use_shuffled_weight", "weight_layout",
              "use_packed_weights", "use_per_token_scaling", "num_experts", "num_fused_shared_experts")


def modules(fake: FakeTrtllmMoE) -> tuple[object, object]:
    """Fake ``flashinfer`` and ``flashinfer.fused_moe.core`` namespaces over ``fake`` (and its tuner)."""
    from types import SimpleNamespace

    def routed(*args: object, **kwargs: object) -> list[torch.Tensor]:
        return fake.routed_moe(*args, **kwargs)

    routed.__signature__ = fake.signature

    def runner(moe_op: object, **kw: object) -> FakeTrtllmRunner:
        allowed = set(_RUNNER_KW) | ({"nvfp4_4over6_code"} if fake.version != "0.7.2.post1" else set())
        if set(kw) - allowed:
            raise TypeError(f"MoERunner.__init__() got an unexpected keyword argument {sorted(set(kw) - allowed)[0]!r}")
        return FakeTrtllmRunner(fake)

    flashinfer = SimpleNamespace(__version__=fake.version, autotune=fake.tuner.tuning,
                                 nvfp4_block_scale_interleave=nvfp4_block_scale_interleave,
                                 fused_moe=SimpleNamespace(trtllm_fp4_block_scale_routed_moe=routed))
    core = SimpleNamespace(SfLayout=releases.SfLayout, DtypeTrtllmGen=DtypeTrtllmGen,
                           Fp8QuantizationType=Fp8QuantizationType, WeightLayout=WeightLayout,
                           MoeRunnerInputs=MoeRunnerInputs, TrtllmMoERunner=runner,
                           get_trtllm_moe_sm100_module=lambda: SimpleNamespace(moe_op=object()),
                           _maybe_get_cached_w3_w1_permute_indices=w3_w1_permute_indices,
                           get_w2_permute_indices_with_cache=w2_permute_indices)
    return flashinfer, core
