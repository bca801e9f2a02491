"""Torch models of FlashInfer's SM90 mixed-input (W4A16) layouts: the interleaved E2M1 weight
bytes and the folded UE8M0 scale bytes that ``interleave_moe_weights_for_sm90_mixed_gemm`` /
``interleave_moe_scales_for_sm90_mixed_gemm`` produce, and their inverses.

The benchmark itself calls the library's helpers; these models let the CPU fakes decode what a
backend hands the kernel (tests/fakes), and tests/backends/test_gpu_flashinfer_sm90.py checks them
byte for byte against the real helpers on an H200.
"""

from __future__ import annotations

import torch

# interleave_fp4_weights_for_sm90_mixed_gemm_kernel (moe_gemm_mixed_utils.cu), per expert
# [n, k/2] bytes: within each 16-row x 64-element tile, lane l of an 8-row block takes four
# bytes (rows r and r+8, byte columns c and c+4, c = 8*(l//4) + l%4), little-endian into one
# 32-bit word, permutes its 32 bits, and stores the word at row r + 8*((l//4) % 2), byte
# column 16*(l//8) + 4*(l%4). _BIT_SRC[d] = raw bit that lands in output bit d.
_BIT_SRC = (16, 17, 18, 8, 9, 10, 0, 1, 2, 19, 25, 26, 11, 24, 27, 3,
            20, 21, 22, 12, 13, 14, 4, 5, 6, 23, 29, 30, 15, 28, 31, 7)


def _tile_maps() -> tuple[torch.Tensor, torch.Tensor]:
    """(src, dst) byte positions inside one 16 x 32-byte tile for the 4 bytes of each word."""
    rows = torch.arange(8).repeat_interleave(16)          # row r in 0..7 of the block
    lane = torch.arange(16).repeat(8)
    col = 8 * (lane // 4) + lane % 4
    src = torch.stack([rows * 32 + col, (rows + 8) * 32 + col,
                       rows * 32 + col + 4, (rows + 8) * 32 + col + 4], dim=1)   # [128, 4]
    drow = rows + 8 * ((lane // 4) % 2)
    dcol = 16 * (lane // 8) + 4 * (lane % 4)
    dst = (drow * 32 + dcol)[:, None] + torch.arange(4)[None, :]                 # [128, 4]
    return src, dst


def _tiles(w: torch.Tensor) -> tuple[torch.Tensor, tuple[int, ...]]:
    """View ``[..., n, k/2]`` bytes as ``[..., n/16, k/64, 512]`` tiles."""
    *lead, n, kb = w.shape
    if n % 16 or kb % 32:
        raise ValueError(f"SM90 fp4 interleave needs n % 16 == 0 and k % 64 == 0, got weight bytes "
                         f"of shape {tuple(w.shape)}")
    t = w.reshape(*lead, n // 16, 16, kb // 32, 32).transpose(-3, -2).reshape(*lead, n // 16, kb // 32, 512)
    return t, (*lead, n, kb)


def _untiles(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    *lead, n, kb = shape
    return t.reshape(*lead, n // 16, kb // 32, 16, 32).transpose(-3, -2).reshape(shape)


def _permute_bits(words: torch.Tensor, table: tuple[int, ...]) -> torch.Tensor:
    out = torch.zeros_like(words)
    for d, s in enumerate(table):
        out |= ((words >> s) & 1) << d
    return out


def _words(b: torch.Tensor) -> torch.Tensor:
    b = b.to(torch.int64)
    return b[..., 0] | b[..., 1] << 8 | b[..., 2] << 16 | b[..., 3] << 24


def _bytes(words: torch.Tensor) -> torch.Tensor:
    return torch.stack([(words >> (8 * i)) & 0xFF for i in range(4)], dim=-1).to(torch.uint8)


def sm90_interleave_fp4_weights(w: torch.Tensor) -> torch.Tensor:
    """Torch model of ``interleave_moe_weights_for_sm90_mixed_gemm(w, "fp4")`` (uint8 ``[..., n, k/2]``)."""
    t, shape = _tiles(w)
    src, dst = _tile_maps()
    words = _permute_bits(_words(t[..., src.to(w.device)]), _BIT_SRC)
    out = torch.empty_like(t)
    out[..., dst.to(w.device)] = _bytes(words)
    return _untiles(out, shape)


def sm90_deinterleave_fp4_weights(w: torch.Tensor) -> torch.Tensor:
    """Inverse of ``sm90_interleave_fp4_weights``."""
    t, shape = _tiles(w)
    src, dst = _tile_maps()
    inverse = tuple(_BIT_SRC.index(b) for b in range(32))
    words = _permute_bits(_words(t[..., dst.to(w.device)]), inverse)
    out = torch.empty_like(t)
    out[..., src.to(w.device)] = _bytes(words)
    return _untiles(out, shape)


def _scale_fold_shape(e: int, rows: int, groups: int) -> tuple[int, ...]:
    if rows % 64 or groups % 4:
        raise ValueError(f"SM90 scale interleave needs rows % 64 == 0 and K/32 % 4 == 0, got "
                         f"[{e}, {rows}, {groups}]")
    return (e, rows // 64, 4, 16, groups // 4, 4)


def sm90_interleave_mxfp4_scales(s: torch.Tensor) -> torch.Tensor:
    """Torch model of ``interleave_moe_scales_for_sm90_mixed_gemm(s, 32)``: uint8 ``[E, R, K/32]``
    -> ``[E, R/64, K/128, 16, 16]``; each 64-row x 128-element block becomes 16 rows of 16 bytes,
    byte ``4*j + g`` of row ``i`` holding row ``16*j + i``, group ``g``."""
    e, rows, groups = s.shape
    f = s.reshape(_scale_fold_shape(e, rows, groups)).permute(0, 1, 4, 3, 2, 5)
    return f.reshape(e, rows // 64, groups // 4, 16, 16).contiguous()


def sm90_deinterleave_mxfp4_scales(s: torch.Tensor, rows: int, groups: int) -> torch.Tensor:
    """Inverse of ``sm90_interleave_mxfp4_scales`` back to ``[E, rows, groups]``."""
    e = s.shape[0]
    f = s.reshape(e, rows // 64, groups // 4, 16, 4, 4).permute(0, 1, 4, 3, 2, 5)
    return f.reshape(e, rows, groups).contiguous()
