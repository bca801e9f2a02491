"""Input validation shared by the format modules.

FP4 has no NaN/Inf encoding and the block formats need K to be a whole number of blocks, so
every public entry point validates first and raises a ``ValueError`` that names the problem and
the offending shape or value, instead of emitting silently wrong bytes.
"""

from __future__ import annotations

import torch


def check_tensor(x: object, fn: str, name: str = "input") -> torch.Tensor:
    """Reject non-tensors up front (the other checks assume tensor methods)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_floating(x: torch.Tensor, fn: str, name: str = "input") -> None:
    """Quantizers take real values; integer/bool tensors are almost always packed codes by mistake."""
    check_tensor(x, fn, name)
    if not x.is_floating_point():
        raise ValueError(f"{fn}: {name} must be a floating-point tensor, got dtype {x.dtype} "
                         f"with shape {tuple(x.shape)}")


def check_dtype(x: torch.Tensor, dtype: torch.dtype, fn: str, name: str) -> None:
    """Codes, packed bytes and scales have exactly one storage dtype each."""
    check_tensor(x, fn, name)
    if x.dtype != dtype:
        raise ValueError(f"{fn}: {name} must have dtype {dtype}, got {x.dtype} with shape {tuple(x.shape)}")


def raise_non_finite(x: torch.Tensor, fn: str, name: str = "input") -> None:
    """Raise a ValueError describing the first NaN/Inf of ``x`` (call only when one exists)."""
    bad = ~torch.isfinite(x)
    count = int(bad.sum())
    first = tuple(int(i) for i in bad.nonzero()[0])
    raise ValueError(f"{fn}: {name} of shape {tuple(x.shape)} contains {count} non-finite value(s) "
                     f"(NaN/Inf), first at index {first} = {x[first].item()}; FP4 formats have no "
                     f"NaN/Inf encoding, so these inputs are rejected")


def check_finite(x: torch.Tensor, fn: str, name: str = "input") -> None:
    """Reject NaN/Inf (one reduction; the detailed scan runs only on failure)."""
    if x.numel() and not bool(torch.isfinite(x).all()):
        raise_non_finite(x, fn, name)


def check_positive_finite(x: torch.Tensor, fn: str, name: str) -> None:
    """A scale divides the data: 0, a negative value or NaN/Inf would decode to Inf/NaN or flip signs."""
    if x.numel() and not bool((torch.isfinite(x) & (x > 0)).all()):
        bad = x[~(torch.isfinite(x) & (x > 0))].flatten()
        raise ValueError(f"{fn}: {name} must be finite and > 0, got {bad[0].item()!r} "
                         f"({bad.numel()} bad of {x.numel()}, shape {tuple(x.shape)})")


def check_block_dim(x: torch.Tensor, block: int, fn: str, name: str = "input") -> int:
    """Blocks run along the last (K) dimension, so K must be a positive multiple of ``block``."""
    if x.dim() < 1:
        raise ValueError(f"{fn}: {name} must have at least one dimension (K last), got a 0-d tensor")
    k = x.shape[-1]
    if k == 0 or k % block:
        raise ValueError(f"{fn}: last dimension K={k} of {name} shape {tuple(x.shape)} must be a "
                         f"positive multiple of the block size {block}")
    return k


def check_packed(data: torch.Tensor, scales: torch.Tensor, block: int, fn: str) -> None:
    """Packed bytes ``[..., K/2]`` and block scales ``[..., K/block]`` must describe one ``[..., K]``."""
    if data.dim() < 1 or data.shape[:-1] != scales.shape[:-1] or data.shape[-1] * 2 != scales.shape[-1] * block:
        raise ValueError(f"{fn}: data {tuple(data.shape)} (K/2 bytes) and scales "
                         f"{tuple(scales.shape)} (K/{block}) describe different shapes")
