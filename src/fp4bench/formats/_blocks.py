"""Block helpers shared by the NVFP4 and MXFP4 quantizers (input dtype policy, block maxima)."""

from __future__ import annotations

import torch


def as_kernel_input(x: torch.Tensor, fn: str) -> torch.Tensor:
    """Keep bf16/fp16/fp32 as they are (ops promote them to fp32 exactly, saving a full-size
    copy); other floating dtypes (fp64, fp8) are converted to fp32, the quantizers' arithmetic.

    A finite fp64 value beyond the fp32 range would become Inf in that conversion: rejected
    with its index, since no FP4 scale chain (fp32 global scale) can represent it."""
    if x.dtype in (torch.bfloat16, torch.float16, torch.float32):
        return x
    xf = x.to(torch.float32)
    if xf.numel():
        over = torch.isinf(xf) & torch.isfinite(x)
        if bool(over.any()):
            first = tuple(int(i) for i in over.nonzero()[0])
            raise ValueError(f"{fn}: input of dtype {x.dtype} and shape {tuple(x.shape)} has "
                             f"{int(over.sum())} value(s) beyond the float32 range (max "
                             f"{torch.finfo(torch.float32).max:.4g}), first at index {first} = "
                             f"{x[first].item():.4g}; FP4 quantization computes in float32")
    return xf


def block_amax(blocks: torch.Tensor) -> torch.Tensor:
    """float32 ``max |x|`` over the last dim, keepdim; NaN/Inf propagate (the finite check).

    ``max(amax, -amin)`` reads the data twice but allocates no full-size ``|x|`` temporary; the
    final ``abs`` turns the ``-0.0`` of an all-(-0.0) block into ``+0.0`` (else a -0 scale byte).
    """
    hi = blocks.amax(dim=-1, keepdim=True)
    lo = blocks.amin(dim=-1, keepdim=True)
    return torch.maximum(hi, lo.neg_()).abs_().to(torch.float32)
