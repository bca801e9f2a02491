"""Fake sgl_kernel 0.3.21 ops: ``cutlass_scaled_fp4_mm`` and ``cutlass_fp4_group_mm``.

Semantics implemented (sgl-kernel ``csrc/gemm/nvfp4_scaled_mm_kernels.cu``
and ``csrc/moe/nvfp4_blockwise_moe.cu``; the op schemas and check messages are in the 0.3.21
``common_ops`` binary):

dense  ``(out, a, b, block_scale_a, block_scale_b, alpha)``: a/b uint8 contiguous 2-D, TN;
       scales e4m3 contiguous, *exactly* ``[pad128(M|N), pad4(K/16)]``; alpha fp32 (``[0]``
       read); ``k % 32``, ``n % 32``; out fp16/bf16/fp32 ``[M, N]``.
group  ``(output, a, b, a_blockscale, b_blockscales, alphas, ab_strides, c_strides,
       problem_sizes, expert_offsets, sf_offsets)``: a ``[M_total, K/2]`` / b ``[E, N, K/2]`` uint8;
       a_blockscale 2-D, b_blockscales 3-D, e4m3; alphas fp32 ``[E]``; strides int64 ``[E]``;
       problem_sizes int32 ``[E, 3]`` = (m_e, N, K) with ``size(0) == expert_offsets.size(0)``
       (the op gets ``[:-1]`` of the ``[E+1]`` offsets); offsets int32. Expert e reads A rows
       from ``expert_offsets[e]``, its A scales at byte ``sf_offsets[e] * K/16`` and its B scales
       at byte ``e * N * K/16`` (unpadded arithmetic, as the kernel's pointer setup does), each in
       128x4 layout; both must be 128-byte aligned (the kernel asserts it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fakes.decode import EXACT, Misread, dequant, pad, read_scales, require, same_device, write
from fp4bench.backends.builtin.sgl_kernel import SglKernelAPI


def _check_input(t: torch.Tensor, dtype: torch.dtype, name: str) -> None:
    require(t.is_contiguous(), f"{name}: must be contiguous.")
    require(t.dtype == dtype, f": Inconsistency of Tensor type: {name} ({t.dtype}, expected {dtype})")


@dataclass
class FakeSglKernel:
    """Builds the ``SglKernelAPI``; ``sm`` selects the SM100 or SM120 behaviour."""

    sm: int = 100
    misread: Misread = EXACT
    calls: int = 0

    def api(self) -> SglKernelAPI:
        return SglKernelAPI(version="0.3.21", scaled_fp4_mm=self.scaled_fp4_mm, fp4_group_mm=self.fp4_group_mm)

    def scaled_fp4_mm(self, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, sa: torch.Tensor,
                      sb: torch.Tensor, alpha: torch.Tensor) -> None:
        self.calls += 1
        _check_input(a, torch.uint8, "a")
        _check_input(b, torch.uint8, "b")
        _check_input(sa, torch.float8_e4m3fn, "scale_a")
        _check_input(sb, torch.float8_e4m3fn, "scale_b")
        _check_input(alpha, torch.float32, "alpha")
        require(a.dim() == 2 and b.dim() == 2, "a and b must be matrices")
        require(a.shape[1] == b.shape[1], f"a and b shapes cannot be multiplied ({tuple(a.shape)} and {tuple(b.shape)})")
        m, n, k = a.shape[0], b.shape[0], a.shape[1] * 2
        require(k % 32 == 0, f"Expected k to be divisible by 32, k: {k}")
        require(n % 32 == 0, f"Expected n to be divisible by 32, n: {n}")
        c = k // 16
        require(sa.dim() == 2 and sb.dim() == 2, "scale_a / scale_b must be matrices")
        require(tuple(sa.shape) == (pad(m, 128), pad(c, 4)),
                f"scale_a must be padded and swizzled to a shape ({pad(m, 128)}x{pad(c, 4)}), got {tuple(sa.shape)}")
        require(tuple(sb.shape) == (pad(n, 128), pad(c, 4)),
                f"scale_b must be padded and swizzled to a shape ({pad(n, 128)}x{pad(c, 4)}), got {tuple(sb.shape)}")
        allowed = (torch.float16, torch.bfloat16) if self.sm == 120 else (torch.float16, torch.bfloat16, torch.float32)
        require(out.dtype in allowed, f"Unsupported output data type of nvfp4 mm: {out.dtype}")
        require(tuple(out.shape) == (m, n) and out.is_contiguous(), f"out must be contiguous [{m}, {n}]")
        same_device(out, a, b, sa, sb, alpha)
        mis = self.misread
        da = dequant(a, read_scales(sa, m, c, "e4m3", misread=mis), 16, mis)
        dw = dequant(b, read_scales(sb, n, c, "e4m3", misread=mis), 16, mis.for_weights())
        acc = da @ dw.T
        write(out, acc if mis.ignore_global else acc * alpha.reshape(-1)[0])

    def fp4_group_mm(self, out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, a_bs: torch.Tensor,
                     b_bs: torch.Tensor, alphas: torch.Tensor, ab_strides: torch.Tensor, c_strides: torch.Tensor,
                     problem_sizes: torch.Tensor, expert_offsets: torch.Tensor, sf_offsets: torch.Tensor) -> None:
        self.calls += 1
        _check_input(a, torch.uint8, "a")
        _check_input(b, torch.uint8, "b")
        _check_input(a_bs, torch.float8_e4m3fn, "a_blockscale")
        _check_input(b_bs, torch.float8_e4m3fn, "b_blockscales")
        _check_input(alphas, torch.float32, "alphas")
        require(a_bs.dim() == 2, f"expected a_blockscale to be of shape [num_experts, rounded_m, k // group_size], "
                                 f"observed rank: {a_bs.dim()}")
        require(b_bs.dim() == 3, f"expected b_blockscale to be of shape: [num_experts, n, k // group_size], "
                                 f"observed rank: {b_bs.dim()}")
        require(problem_sizes.dim() == 2 and problem_sizes.shape[1] == 3, "problem_sizes must have the shape (num_experts, 3)")
        require(problem_sizes.shape[0] == expert_offsets.shape[0],
                "Number of experts in problem_sizes must match expert_offsets")
        require(problem_sizes.dtype == torch.int32, "problem_sizes must be int32.")
        e, n, k = b.shape[0], b.shape[1], 2 * b.shape[2]
        require(problem_sizes.shape[0] == e, f"{problem_sizes.shape[0]} problems for {e} experts of b")
        for name, t, dtype in (("ab_strides", ab_strides, torch.int64), ("c_strides", c_strides, torch.int64),
                               ("expert_offsets", expert_offsets, torch.int32), ("sf_offsets", sf_offsets, torch.int32)):
            require(t.dtype == dtype and t.dim() == 1 and t.shape[0] == e and t.is_contiguous(),
                    f"{name} must be contiguous {dtype} [{e}], got {t.dtype} {tuple(t.shape)}")
        # the kernel reinterprets the stride arrays as CUTLASS packed strides: row pitches K and N
        require(bool((ab_strides == k).all()) and bool((c_strides == n).all()), "ab_strides must be K, c_strides N")
        require(alphas.shape == (e,), f"alphas must be [E={e}], got {tuple(alphas.shape)}")
        require(out.dtype == torch.bfloat16 or (self.sm != 120 and out.dtype == torch.float16),
                f"output dtype {out.dtype} (SM120: bf16 only)")
        require(out.is_contiguous() and out.shape[1] == n, "Output tensor shape doesn't match expected shape")
        require(a.shape[1] * 2 == k, "b_tensors(dim = 2) and a_tensors(dim = 1) trailing dimension must match")
        same_device(out, a, b, a_bs, b_bs, alphas, ab_strides, c_strides, problem_sizes, expert_offsets, sf_offsets)
        group_k = k // 16
        mis = self.misread
        sizes, e_offs, s_offs = problem_sizes.tolist(), expert_offsets.tolist(), sf_offsets.tolist()
        for x in range(e):
            m_e, n_e, k_e = sizes[x]
            require(m_e >= 0 and n_e == n and k_e == k and k_e % 2 == 0, "unexpected problem sizes")
            a_base, b_base = s_offs[x] * group_k, x * n * group_k
            require(s_offs[x] % 128 == 0, f"expert {x}: A-scale block must start on a 128-row boundary, got row {s_offs[x]}")
            require(a_base % 128 == 0 and b_base % 128 == 0, "TMA requires 128-byte alignment")
            if m_e == 0:
                continue
            rows = slice(e_offs[x], e_offs[x] + m_e)
            require(rows.stop <= a.shape[0] and rows.stop <= out.shape[0], f"expert {x}: rows {rows} out of range")
            da = dequant(a[rows], read_scales(a_bs, m_e, group_k, "e4m3", a_base, mis), 16, mis)
            dw = dequant(b[x], read_scales(b_bs, n, group_k, "e4m3", b_base, mis), 16, mis.for_weights())
            acc = da @ dw.T
            write(out[rows], acc if mis.ignore_global else acc * alphas[x])
