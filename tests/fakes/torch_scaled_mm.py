"""Fake ``torch._scaled_mm`` (v1) and ``torch.ops.aten._scaled_mm_v2.out`` for block-scaled FP4.

Semantics implemented (torch 2.13 meta-kernel messages):

* operands ``float4_e2m1fn_x2``: ``a`` ``[M, K/2]`` row-major, ``b`` ``[K/2, N]`` column-major
  (``mat2 must be col_major``); ``K/2 % 16`` and both dims of ``b`` ``% 16`` (so K % 32, N % 16).
* v1 NVFP4: one e4m3 scale per operand, contiguous, any shape, ``numel == pad128(M|N) *
  pad4(K/16)``, 128x4 swizzled; no global scale; out bf16/fp16/fp32 ``[M, N]``.
* v2: lists of scales with integer recipes (ScalingType TensorWise 0, BlockWise1x16 2,
  BlockWise1x32 3) and swizzles (NO_SWIZZLE 0, SWIZZLE_32_4_4 1). NVFP4 ``[2, 0]`` / ``[1, 0]``:
  swizzled e4m3 block scales plus a 1-element fp32 global *decode* scale (cuBLASLt alpha =
  g_a * g_b); NVFP4 single level ``[2]``; MXFP4 ``[3]`` / ``[1]`` with e8m0 scales of
  ``pad128 * pad4(K/32)`` elements. ``mxfp4_raises`` emulates a torch built without MSLK.
* Decoding goes through ``.view(torch.uint8)``: the fake, like the adapter, never ``.float()``s fp4x2.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fakes.decode import EXACT, FakeContractError, Misread, dequant, pad, raw_bytes, read_scales, require, same_device, write
from fp4bench.backends.builtin.cublaslt import TorchScaledMMAPI

TENSORWISE, BLOCK16, BLOCK32 = 0, 2, 3
NO_SWIZZLE, SWIZZLE_32_4_4 = 0, 1


def _operands(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    fp4 = torch.float4_e2m1fn_x2
    require(a.dtype == fp4 and b.dtype == fp4, f"FP4 operands must be float4_e2m1fn_x2, got {a.dtype}, {b.dtype}")
    require(a.dim() == 2 and b.dim() == 2, "mat1/mat2 must be matrices")
    require(a.is_contiguous(), f"self must be row_major, got stride {a.stride()}")
    require(b.t().is_contiguous(), f"mat2 must be col_major, got stride {b.stride()}")
    require(a.shape[1] == b.shape[0], f"mat1 and mat2 shapes cannot be multiplied ({tuple(a.shape)} and {tuple(b.shape)})")
    require(a.shape[1] % 16 == 0, f"Expected self.size(1) to be divisible by 16, but got self.size(1)={a.shape[1]}")
    require(b.shape[0] % 16 == 0 and b.shape[1] % 16 == 0,
            f"Expected both dimensions of mat2 to be divisible by 16 but got {tuple(b.shape)}")
    return a.shape[0], b.shape[1], 2 * a.shape[1]


def _block_scale(s: torch.Tensor, rows: int, k: int, block: int, dtype: torch.dtype, name: str) -> None:
    want = pad(rows, 128) * pad(k // block, 4)
    require(s.dtype == dtype, f"{name} must be {dtype}, got {s.dtype}")
    require(s.is_contiguous(), f"{name} must be contiguous")
    require(s.numel() == want, f"{name} must have {want} elements (pad128({rows}) * pad4({k // block})), got {s.numel()}")


def _out(out: torch.Tensor, m: int, n: int) -> None:
    require(out.dtype in (torch.bfloat16, torch.float16, torch.float32), f"out dtype {out.dtype}")
    require(tuple(out.shape) == (m, n) and out.is_contiguous(), f"out must be contiguous [{m}, {n}], got {tuple(out.shape)}")


def _decode(a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor, sb: torch.Tensor, block: int, kind: str,
            misread: Misread) -> torch.Tensor:
    m, n, k = a.shape[0], b.shape[1], 2 * a.shape[1]
    c = k // block
    da = dequant(raw_bytes(a).view(m, k // 2), read_scales(sa, m, c, kind, misread=misread), block, misread)
    dw = dequant(raw_bytes(b.t()).view(n, k // 2), read_scales(sb, n, c, kind, misread=misread), block, misread.for_weights())
    return da @ dw.T


@dataclass
class FakeTorchScaledMM:
    misread: Misread = EXACT
    mxfp4_raises: bool = False
    calls: int = 0

    def api(self) -> TorchScaledMMAPI:
        return TorchScaledMMAPI(version="2.13.0-fake", scaled_mm_out=self.scaled_mm_out,
                                scaled_mm_v2_out=self.scaled_mm_v2_out)

    def scaled_mm_out(self, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                      out: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        m, n, k = _operands(a, b)
        _block_scale(scale_a, m, k, 16, torch.float8_e4m3fn, "scale_a")
        _block_scale(scale_b, n, k, 16, torch.float8_e4m3fn, "scale_b")
        _out(out, m, n)
        same_device(a, b, scale_a, scale_b, out)
        write(out, _decode(a, b, scale_a, scale_b, 16, "e4m3", self.misread))
        return out

    def scaled_mm_v2_out(self, a: torch.Tensor, b: torch.Tensor, scale_a: list, recipe_a: list, swizzle_a: list,
                         scale_b: list, recipe_b: list, swizzle_b: list, out: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        m, n, k = _operands(a, b)
        _out(out, m, n)
        require(list(recipe_a) == list(recipe_b) and list(swizzle_a) == list(swizzle_b),
                f"both operands must use the same recipe: {recipe_a} vs {recipe_b}")
        require(len(scale_a) == len(recipe_a) == len(swizzle_a) and len(scale_b) == len(recipe_b),
                "one scale, recipe and swizzle per level")
        recipe, swizzle = list(recipe_a), list(swizzle_a)
        same_device(a, b, out, *scale_a, *scale_b)
        if recipe[0] == BLOCK16:
            require(recipe in ([BLOCK16], [BLOCK16, TENSORWISE]), f"unsupported NVFP4 recipe {recipe}")
            require(swizzle[0] == SWIZZLE_32_4_4, "NVFP4 block scales must be SWIZZLE_32_4_4")
            _block_scale(scale_a[0], m, k, 16, torch.float8_e4m3fn, "scale_a[0]")
            _block_scale(scale_b[0], n, k, 16, torch.float8_e4m3fn, "scale_b[0]")
            acc = _decode(a, b, scale_a[0], scale_b[0], 16, "e4m3", self.misread)
            if len(recipe) == 2:
                require(swizzle[1] == NO_SWIZZLE, "the global scale takes NO_SWIZZLE")
                for g in (scale_a[1], scale_b[1]):
                    require(g.dtype == torch.float32 and g.numel() == 1, "TensorWise scale: 1 float32 element")
                if not self.misread.ignore_global:
                    acc = acc * (scale_a[1].reshape(-1)[0] * scale_b[1].reshape(-1)[0])
        elif recipe[0] == BLOCK32:
            require(recipe == [BLOCK32] and swizzle == [SWIZZLE_32_4_4], "MXFP4 takes [BlockWise1x32] / swizzled")
            if self.mxfp4_raises:
                raise NotImplementedError("MXFP4 scaling support requires USE_MSLK (fake)")
            _block_scale(scale_a[0], m, k, 32, torch.float8_e8m0fnu, "scale_a[0]")
            _block_scale(scale_b[0], n, k, 32, torch.float8_e8m0fnu, "scale_b[0]")
            acc = _decode(a, b, scale_a[0], scale_b[0], 32, "e8m0", self.misread)
        else:
            raise FakeContractError(f"recipe {recipe} is not an FP4 recipe the fake models")
        write(out, acc)
        return out
