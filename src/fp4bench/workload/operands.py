"""Seeded operands for a problem, quantized once: the *same bytes* go to every backend and to
the reference.

Activations and weights are drawn as bf16 ``randn`` (realistic magnitudes: data values change
power draw and so clocks; never zeros) and quantized with ``fp4bench.formats`` in the linear
scale layout. Backends marshal these canonical objects into their own layouts (swizzle,
interleave, views); the reference decodes the canonical objects.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from fp4bench import formats
from fp4bench.workload.problems import GemmProblem, GroupedProblem, MoEProblem, Problem, QuantProblem

FP8_MAX = 448.0  # largest finite float8_e4m3fn


@dataclass
class FP8Rowwise:
    """FP8 e4m3 with one float32 *decode* scale per row (what torch's rowwise ``_scaled_mm`` takes).

    The comparison rows need the same-bytes rule too: the reference decodes these bytes.
    """

    data: torch.Tensor  # float8_e4m3fn [..., K]
    scale: torch.Tensor  # float32 [..., 1]: x ~= data * scale


def fp8_rowwise_quantize(x: torch.Tensor) -> FP8Rowwise:
    amax = x.abs().float().amax(dim=-1, keepdim=True)
    scale = torch.where(amax > 0, amax / FP8_MAX, torch.ones_like(amax))
    # clamp before the cast: torch's e4m3 cast is not saturating (measured on torch 2.11)
    data = (x.float() / scale).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return FP8Rowwise(data, scale)


# Quantizing a whole MoE layer at once (e.g. GLM-5 gate_up: 6.4 G elements) makes several fp32
# temporaries of 26 GB each; an H200 ran out of memory that way. Rows of experts are quantized in
# chunks of at most this many elements and concatenated (the result is bit-identical: every
# block and every per-expert global scale lives inside one expert).
CHUNK_ELEMENTS = 1 << 28


def _quantize_whole(x: torch.Tensor, fmt: str, gs: torch.Tensor | None) -> Any:
    if fmt == "nvfp4":
        return formats.nvfp4_quantize(x, global_scale=gs)
    if fmt == "mxfp4":
        return formats.mxfp4_quantize(x, scale_rounding="rceil")
    return fp8_rowwise_quantize(x)


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    fields = {}
    for f in dataclasses.fields(first):
        vals = [getattr(p, f.name) for p in parts]
        v0 = vals[0]
        fields[f.name] = torch.cat(vals, 0) if isinstance(v0, torch.Tensor) and v0.dim() > 0 else v0
    return type(first)(**fields)


def quantize(x: torch.Tensor, fmt: str, per_leading_dim: bool = False) -> Any:
    """Quantize ``x`` (``[..., K]``) to ``fmt``; None for formats kept in high precision.

    ``per_leading_dim`` gives each ``x[i]`` its own NVFP4 global scale (one per expert, as
    checkpoints store ``weight_scale_2`` per expert); otherwise one global scale for the tensor.
    """
    if fmt == "bf16":
        return None
    if fmt not in ("nvfp4", "mxfp4", "fp8"):
        raise ValueError(f"unknown format {fmt!r}; expected one of nvfp4, mxfp4, bf16, fp8")
    gs = None
    if fmt == "nvfp4":
        if per_leading_dim:
            amax = x.abs().float().amax(dim=tuple(range(1, x.dim())), keepdim=True)
        else:
            amax = x.abs().float().amax()
        gs = formats.nvfp4_global_scale(amax)
    per_row = x[0].numel() if x.dim() > 1 else x.numel()
    rows = max(1, CHUNK_ELEMENTS // max(1, per_row))
    if x.dim() < 2 or x.shape[0] <= rows:
        return _quantize_whole(x, fmt, gs)
    parts = []
    for lo in range(0, x.shape[0], rows):
        g = gs[lo:lo + rows] if gs is not None and gs.dim() > 0 else gs
        parts.append(_quantize_whole(x[lo:lo + rows], fmt, g))
    return _concat(parts)


def dequantize(q: Any) -> torch.Tensor:
    """Exact float32 decode of a quantized operand (format picked from the object)."""
    if isinstance(q, formats.NVFP4):
        return formats.nvfp4_dequantize(q)
    if isinstance(q, formats.MXFP4):
        return formats.mxfp4_dequantize(q)
    if isinstance(q, FP8Rowwise):
        return q.data.float() * q.scale
    raise TypeError(f"not a quantized operand: {type(q).__name__}")


@dataclass
class Operands:
    """bf16 originals plus their quantized forms for one problem and one format pair.

    dense:   a [M, K], w [N, K]
    grouped: a [sum m_e, K] (rows sorted by expert), w [E, N, K], offsets [E+1] int64
    moe:     a [T, H], w [E, 2I, H] (gate rows first, then up), w2 [E, H, I],
             topk_ids [T, k] int32, topk_weights [T, k] float32
    quant:   a [M, K], w empty [0, K]; ``qa`` is the expected NVFP4 result of quantizing ``a``
    ``qa``/``qw``/``qw2`` are None where the format is not quantized.
    """

    problem: Problem
    act_format: str
    weight_format: str
    a: torch.Tensor
    w: torch.Tensor
    qa: Any = None
    qw: Any = None
    offsets: torch.Tensor | None = None
    w2: torch.Tensor | None = None
    qw2: Any = None
    topk_ids: torch.Tensor | None = None
    topk_weights: torch.Tensor | None = None
    seed: int = 0


def _randn(shape: tuple[int, ...], gen: torch.Generator, device: torch.device, scale: float) -> torch.Tensor:
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * scale).to(torch.bfloat16)


def make_operands(
    problem: Problem,
    act_format: str,
    weight_format: str,
    device: torch.device | str = "cpu",
    seed: int = 0,
) -> Operands:
    """Draw seeded operands for ``problem`` on ``device`` and quantize them once."""
    device = torch.device(device)
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    if isinstance(problem, GemmProblem):
        a = _randn((problem.m, problem.k), gen, device, 1.0)
        w = _randn((problem.n, problem.k), gen, device, problem.k ** -0.5)
        return Operands(problem, act_format, weight_format, a, w,
                        qa=quantize(a, act_format), qw=quantize(w, weight_format), seed=seed)
    if isinstance(problem, GroupedProblem):
        counts = torch.tensor((0,) + problem.tokens_per_expert, dtype=torch.int64)
        offsets = torch.cumsum(counts, 0).to(device)
        a = _randn((problem.total_rows, problem.k), gen, device, 1.0)
        w = _randn((problem.num_experts, problem.n, problem.k), gen, device, problem.k ** -0.5)
        return Operands(problem, act_format, weight_format, a, w,
                        qa=quantize(a, act_format), qw=quantize(w, weight_format, per_leading_dim=True),
                        offsets=offsets, seed=seed)
    if isinstance(problem, MoEProblem):
        e, h, i = problem.num_experts, problem.hidden, problem.inter
        a = _randn((problem.num_tokens, h), gen, device, 1.0)
        w = _randn((e, 2 * i, h), gen, device, h ** -0.5)
        w2 = _randn((e, h, i), gen, device, i ** -0.5)
        topk_ids = torch.tensor(problem.topk_ids, dtype=torch.int32, device=device)
        logits = torch.randn((problem.num_tokens, problem.top_k), generator=gen, device=device)
        topk_weights = torch.softmax(logits, dim=-1)
        return Operands(problem, act_format, weight_format, a, w,
                        qa=quantize(a, act_format), qw=quantize(w, weight_format, per_leading_dim=True),
                        w2=w2, qw2=quantize(w2, weight_format, per_leading_dim=True),
                        topk_ids=topk_ids, topk_weights=topk_weights, seed=seed)
    if isinstance(problem, QuantProblem):
        a = _randn((problem.m, problem.k), gen, device, 1.0)
        return Operands(problem, act_format, weight_format, a, a.new_empty((0, problem.k)),
                        qa=quantize(a, act_format), seed=seed)
    raise TypeError(f"unknown problem type {type(problem).__name__}")


#: added to an operand set's seed to draw its second set of activations (``other_activations``)
SECOND_SET_SEED = 0x5EC0D


def other_activations(ops: Operands) -> Operands:
    """The same problem, weights and routing with activations of another seed (its ``seed``),
    quantized like ``ops``' own: a second input for the same weights, as the next decode step
    brings."""
    seed = ops.seed + SECOND_SET_SEED
    gen = torch.Generator(device=ops.a.device)
    gen.manual_seed(seed)
    a = _randn(tuple(ops.a.shape), gen, ops.a.device, 1.0)
    return dataclasses.replace(ops, a=a, qa=quantize(a, ops.act_format), seed=seed)
