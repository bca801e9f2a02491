"""Fake FlashInfer b12x fused MoE (``b12x_fused_moe``, 0.7.2.post1 / 0.7.4) and ``convert_sf_to_mma_layout``.

Written from the released wheels (flashinfer/fused_moe/cute_dsl/b12x_moe.py:115, the same signature
in both; blackwell_sm12x/moe_dispatch.py ``launch_sm120_moe``; flashinfer/cute_dsl/utils.py
``convert_sf_to_mma_layout``), decoding with ``fakes.decode``:

* keywords: exactly the release's signature (``B12X_FUSED_MOE``), an unknown one raises ``TypeError``;
  CUDA < 13 as FlashInfer reads it raises ``ValueError`` (the function's first check);
* ``x`` bf16 ``[T, H]``, quantized here to NVFP4 with encode scale ``1 / input_global_scale`` (the
  kernel converts the given decode scale to its multiplier), as ``formats.nvfp4_quantize`` does;
* weights uint8 ``[E, 2I, H/2]`` (up rows first) / ``[E, H, I/2]``; their scales e4m3 in the 6-D MMA
  view ``convert_sf_to_mma_layout`` returns, ``(32, 4, m_tiles, 4, k_tiles, E)`` over storage
  ``(E, m_tiles, k_tiles, 32, 4, 4)`` = per expert the 128x4 swizzle; anything else raises;
* GEMM1 in fp32 on ``e2m1 * SF`` times ``w1_alpha * input_global_scale`` (the library's fold),
  SwiGLU ``silu(gate) * up`` in fp32, re-quantized to NVFP4 with encode scale ``1 / fc2_input_scale``,
  GEMM2 times ``w2_alpha``, bf16 rows, fp32 finalize with the routing weights, bf16 output.

The library picks its kernel from the routed row count (``select_sm120_moe_backend``: static up to
``STATIC_CUTOVER_ROWS`` routed rows, the default cutover of NVFP4, then dynamic); the fake logs which.

``fault``: ``gate_first`` (reads the gate from the first half), ``scales_linear`` (weight scales read
as linear rows), ``ignore_alphas`` (``w1_alpha`` / ``w2_alpha`` taken as 1), ``dynamic_wrong`` (the
dynamic kernel ignores the alphas, the static one is right: a fault only large batches reach).
"""

from __future__ import annotations

import inspect
import time
from dataclasses import dataclass, field

import torch
from packaging.version import Version

from fakes import flashinfer_releases as releases
from fakes.decode import FakeContractError, dequant, raw_bytes
from fakes.flashinfer_moe import requantize_nvfp4
from fp4bench import formats

#: routed rows (tokens x top_k) up to which the library runs its static kernel (moe_dispatch.py
#: ``_get_static_compact_cutover_pairs``: 640 for NVFP4 unless tuned per shape or set by environment)
STATIC_CUTOVER_ROWS = 640

_P = inspect.Parameter
_REQUIRED = ("x", "w1_weight", "w1_weight_sf", "w2_weight", "w2_weight_sf", "token_selected_experts",
             "token_final_scales", "num_experts", "top_k")
_KWONLY = (("w1_alpha", _P.empty), ("w2_alpha", _P.empty), ("fc2_input_scale", None), ("input_global_scale", None),
           ("num_local_experts", None), ("expert_map", None), ("output", None), ("output_dtype", torch.bfloat16),
           ("activation", "silu"), ("swiglu_alpha", 1.702), ("swiglu_beta", 1.0), ("swiglu_limit", None),
           ("activation_precision", "fp4"), ("quant_mode", None), ("source_format", "modelopt"))
_SIG = releases.with_defaults(tuple((n, _P.empty) for n in _REQUIRED), _KWONLY)
#: the same signature in both releases (b12x_moe.py:115)
B12X_FUSED_MOE = {"0.7.2.post1": _SIG, "0.7.4": _SIG}


def check(cond: bool, msg: str) -> None:
    if not cond:
        raise FakeContractError(f"Check failed: {msg}")


def convert_sf_to_mma_layout(sf: torch.Tensor, m: int, k: int, num_groups: int = 1, sf_vec_size: int = 16
                             ) -> torch.Tensor:
    """``flashinfer.cute_dsl.utils.convert_sf_to_mma_layout``: 128x4-swizzled ``[G*M, K/16]`` -> the
    strided 6-D view ``(32, 4, m_tiles, 4, k_tiles, G)`` of storage ``(G, m_tiles, k_tiles, 32, 4, 4)``."""
    m_tiles, k_tiles = -(-m // 128), -(-(k // sf_vec_size) // 4)
    check(sf.numel() == num_groups * m_tiles * k_tiles * 512, f"scale count {sf.numel()} for m={m}, k={k}")
    return sf.reshape(num_groups, m_tiles, k_tiles, 32, 4, 4).permute(3, 4, 1, 5, 2, 0)


def _mma_scales(sf: torch.Tensor, e: int, rows: int, cols: int, linear: bool) -> torch.Tensor:
    """float32 ``[E, rows, cols]`` block scales from the 6-D MMA view (``linear``: misread as rows)."""
    check(sf.dtype == torch.float8_e4m3fn, f"weight scales must be float8_e4m3fn, got {sf.dtype}")
    m_tiles, k_tiles = -(-rows // 128), -(-cols // 4)
    check(tuple(sf.shape) == (32, 4, m_tiles, 4, k_tiles, e), f"weight scales must be the MMA view "
          f"(32, 4, {m_tiles}, 4, {k_tiles}, {e}), got {tuple(sf.shape)}")
    storage = raw_bytes(sf.permute(5, 2, 4, 0, 1, 3)).view(e, -1)
    if linear:
        vals = storage[:, :rows * cols].reshape(e, rows, cols)
    else:
        vals = torch.stack([formats.unswizzle_128x4(storage[x], rows, cols) for x in range(e)])
    return vals.view(torch.float8_e4m3fn).to(torch.float32)


@dataclass
class FakeB12xMoE:
    """``b12x_fused_moe`` of one simulated release on a machine with ``cuda`` (FlashInfer's reading)."""

    version: str = releases.DEFAULT
    cuda: str = "13.0"
    fault: str | None = None
    call_s: float = 0.0
    calls: int = 0
    kernels: list = field(default_factory=list)

    @property
    def signature(self) -> inspect.Signature:
        return B12X_FUSED_MOE[releases.release(self.version).version]

    def fused_moe(self, *args: object, **kwargs: object) -> torch.Tensor:
        b = releases.bind_call(self.signature, "b12x_fused_moe", args, kwargs)
        t0 = time.perf_counter()
        if Version(self.cuda).major < 13:
            raise ValueError(f"b12x fused MoE requires CUDA 13 or later. Current CUDA version: {self.cuda}.")
        kernel = "dynamic" if b["token_selected_experts"].numel() > STATIC_CUTOVER_ROWS else "static"
        out = self._run(b, wrong=self.fault == "ignore_alphas" or (self.fault == "dynamic_wrong" and kernel == "dynamic"))
        self.calls += 1
        self.kernels.append(f"b12x_moe_nvfp4_{kernel}")
        left = t0 + self.call_s - time.perf_counter()
        if left > 0:
            time.sleep(left)
        return out

    def _run(self, b: dict, wrong: bool) -> torch.Tensor:
        x, w1, w2 = b["x"], b["w1_weight"], b["w2_weight"]
        ids, wts = b["token_selected_experts"], b["token_final_scales"]
        e, k = b["num_experts"], b["top_k"]
        t, h = x.shape
        inter = w2.shape[-1] * 2
        check(x.dtype == torch.bfloat16 and x.dim() == 2, "x must be bf16 [T, H]")
        check(b["activation"] == "silu" and b["quant_mode"] is None and b["activation_precision"] == "fp4",
              "modelled call: SiLU, NVFP4")
        check(w1.dtype == torch.uint8 and tuple(w1.shape) == (e, 2 * inter, h // 2), "w1 uint8 [E, 2I, H/2]")
        check(w2.dtype == torch.uint8 and tuple(w2.shape) == (e, h, inter // 2), "w2 uint8 [E, H, I/2]")
        check(ids.dtype == torch.int32 and tuple(ids.shape) == (t, k), "token_selected_experts int32 [T, top_k]")
        check(wts.dtype == torch.float32 and wts.shape == ids.shape, "token_final_scales float32 [T, top_k]")
        for name in ("w1_alpha", "w2_alpha", "fc2_input_scale", "input_global_scale"):
            v = b[name]
            check(v is not None and v.dtype == torch.float32 and v.numel() in (1, e),
                  f"{name} must be float32, scalar or [num_experts]")
        out = b["output"]
        if out is None:
            out = torch.empty((t, h), dtype=torch.bfloat16, device=x.device)
        check(out.dtype == torch.bfloat16 and tuple(out.shape) == (t, h), "output bf16 [T, H]")

        def per_expert(v: torch.Tensor) -> torch.Tensor:
            return v.float().reshape(-1).expand(e) if v.numel() == 1 else v.float().reshape(e)

        in_gs, fc2_gs = per_expert(b["input_global_scale"]), per_expert(b["fc2_input_scale"])
        a1, a2 = per_expert(b["w1_alpha"]), per_expert(b["w2_alpha"])
        if wrong:
            a1, a2 = torch.ones(e), torch.ones(e)
        linear = self.fault == "scales_linear"
        sf1 = _mma_scales(b["w1_weight_sf"], e, 2 * inter, h // 16, linear)
        sf2 = _mma_scales(b["w2_weight_sf"], e, h, inter // 16, linear)
        acc = torch.zeros(t, h)
        for x_e in ids.unique().tolist():
            tok, slot = (ids == x_e).nonzero(as_tuple=True)
            qx = formats.nvfp4_quantize(x[tok], global_scale=1.0 / in_gs[x_e])
            xr = dequant(qx.data, qx.scales.to(torch.float32), 16)           # e2m1 * SF, no global scale
            y1 = (xr @ dequant(w1[x_e], sf1[x_e], 16).T) * (a1[x_e] * in_gs[x_e])
            up, gate = y1[:, :inter], y1[:, inter:]
            if self.fault == "gate_first":
                up, gate = gate, up
            gs2 = 1.0 / fc2_gs[x_e]
            act = requantize_nvfp4(torch.nn.functional.silu(gate) * up, gs2) * gs2   # e2m1 * SF
            y2 = ((act @ dequant(w2[x_e], sf2[x_e], 16).T) * a2[x_e]).to(torch.bfloat16).float()
            acc[tok] += y2 * wts[tok, slot][:, None]  # a token routes to an expert at most once
        out.copy_(acc.to(torch.bfloat16))
        return out


def modules(fake: FakeB12xMoE):
    """The adapter's entry points over ``fake`` (``flashinfer_b12x_moe.B12xMoEApi``'s fields)."""

    def fused(*args: object, **kwargs: object) -> torch.Tensor:
        return fake.fused_moe(*args, **kwargs)

    fused.__signature__ = fake.signature
    return {"version": fake.version, "fused_moe": fused, "to_mma_layout": convert_sf_to_mma_layout,
            "cuda_version": lambda: fake.cuda}
