"""Seeded operands for a problem, quantized once: the *same bytes* go to every backend and to
the reference.

Activations and weights are drawn as bf16 ``randn`` (realistic magnitudes: data values change
power draw and so clocks; never zeros) and quantized with ``fp4bench.formats`` in the linear
scale layout. Backends marshal these canonical objects into their own layouts (swizzle,
interleave, views); the reference decodes the canonical objects.
"""

from __future__ import annotations

import dataclasses
import math
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


# Drawing or quantizing a whole MoE layer at once (GLM-5 gate_up: 256 x 4096 x 6144 = 6.4 G
# elements) makes float32 temporaries of 24 GiB each: an 80 GB card ran out of memory that way.
# Every full-size operand is drawn and quantized in chunks of whole rows of its leading dim (whole
# experts of a weight), at most this many elements a chunk and at least one row, into an output
# allocated once: the largest float32 temporary is one chunk (256 MiB), or one row where a row is
# larger. Quantizing in chunks is bit-identical (every block and every per-expert global scale
# lives inside one row); drawing in chunks is one ``randn`` call per chunk from one generator, so
# the bytes depend on the seed, the shape and this constant only (the same in every process).
CHUNK_ELEMENTS = 1 << 26


def chunks(shape: tuple[int, ...] | torch.Size) -> list[tuple[int, int]]:
    """``(lo, hi)`` ranges of the leading dim of a tensor of ``shape`` in the chunks above (one
    range for a tensor of at most one dim or at most ``CHUNK_ELEMENTS`` elements)."""
    shape = tuple(shape)
    if len(shape) < 2 or not shape[0]:
        return [(0, shape[0] if shape else 1)]
    per_row = max(1, math.prod(shape[1:]))
    rows = max(1, CHUNK_ELEMENTS // per_row)
    return [(lo, min(lo + rows, shape[0])) for lo in range(0, shape[0], rows)]


def _quantize_whole(x: torch.Tensor, fmt: str, gs: torch.Tensor | None) -> Any:
    if fmt == "nvfp4":
        return formats.nvfp4_quantize(x, global_scale=gs)
    if fmt == "mxfp4":
        return formats.mxfp4_quantize(x, scale_rounding="rceil")
    return fp8_rowwise_quantize(x)


def _amax(x: torch.Tensor, per_leading_dim: bool) -> torch.Tensor:
    """float32 ``max |x|`` (per ``x[i]`` with ``per_leading_dim``, keepdim), chunk by chunk."""
    if x.dim() < 2:
        return x.abs().float().amax()
    dims = tuple(range(1, x.dim()))
    parts = [x[lo:hi].abs().float().amax(dim=dims, keepdim=True) for lo, hi in chunks(x.shape)]
    return torch.cat(parts, 0) if per_leading_dim else torch.cat(parts, 0).amax()


def quantize(x: torch.Tensor, fmt: str, per_leading_dim: bool = False) -> Any:
    """Quantize ``x`` (``[..., K]``) to ``fmt``; None for formats kept in high precision.

    ``per_leading_dim`` gives each ``x[i]`` its own NVFP4 global scale (one per expert, as
    checkpoints store ``weight_scale_2`` per expert); otherwise one global scale for the tensor.
    Quantized in chunks of ``x``'s leading dim (``chunks``) into outputs allocated once.
    """
    if fmt == "bf16":
        return None
    if fmt not in ("nvfp4", "mxfp4", "fp8"):
        raise ValueError(f"unknown format {fmt!r}; expected one of nvfp4, mxfp4, bf16, fp8")
    gs = formats.nvfp4_global_scale(_amax(x, per_leading_dim)) if fmt == "nvfp4" else None
    ranges = chunks(x.shape)
    if x.dim() < 2 or len(ranges) == 1:
        return _quantize_whole(x, fmt, gs)
    out: dict[str, Any] = {}
    for lo, hi in ranges:
        g = gs[lo:hi] if gs is not None and gs.dim() > 0 else gs
        part = _quantize_whole(x[lo:hi], fmt, g)
        for f in dataclasses.fields(part):
            v = getattr(part, f.name)
            if not (isinstance(v, torch.Tensor) and v.dim() > 0):
                out.setdefault(f.name, v)  # a tensor-wide value (one global scale): the same in every chunk
                continue
            if f.name not in out:
                out[f.name] = v.new_empty((x.shape[0], *v.shape[1:]))
            out[f.name][lo:hi] = v
    return type(part)(**out)


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
    """bf16 ``scale * randn(shape)``: drawn in float32 chunk by chunk (``chunks``), each chunk
    scaled in place and rounded into the output once."""
    out = torch.empty(shape, dtype=torch.bfloat16, device=device)
    for lo, hi in chunks(shape):
        part = out[lo:hi] if out.dim() else out
        part.copy_(torch.randn(part.shape, generator=gen, device=device, dtype=torch.float32).mul_(scale))
    return out


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
