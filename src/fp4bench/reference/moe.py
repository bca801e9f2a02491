"""Pure-torch reference for a whole routed MoE layer: Σ_k w_k · down(act(gate_up(x))).

It decodes the *same* quantized bytes the kernel gets (``Operands.qw`` / ``qw2``, and ``qa``
when activations are quantized) and computes in float32. What a fused-MoE kernel rounds
between its two GEMMs is modelled explicitly, because at FP4 precision that rounding is
the largest difference left between a correct kernel and the math:

``intermediate="bf16"`` (CUTLASS MoE with bf16 in/out, e.g. FlashInfer SM90 W4A16)
    GEMM1 accumulates in fp32 and stores gate and up in bf16; the activation runs in fp32
    on those bf16 values and writes bf16 (GEMM2's input); GEMM2 stores each (token, expert)
    row in bf16; the finalize step sums ``w_k · row`` in fp32. Each of the three roundings
    is applied here, so the result differs from the kernel only by fp32 summation order
    (plus the final bf16 rounding of the output, which this float32 result leaves out).
``intermediate="nvfp4"`` (FlashInfer CUTLASS NVFP4 x NVFP4 on Blackwell)
    as "bf16", but the activation output is re-quantized to NVFP4 with the fc2 activation
    global scale (``fc2_act_global_scale``, the kernel-convention *encode* scale) before
    GEMM2. The kernel quantizes with fast-math reciprocals, so it may pick the neighbouring
    E2M1 code on near-ties: compare with an FP4-level tolerance.
``intermediate="nvfp4-fused"`` (FlashInfer's TRT-LLM-gen NVFP4 fused MoE on SM100/103)
    as "nvfp4", but GEMM1's fp32 accumulators go through the SwiGLU and the NVFP4
    re-quantization in its epilogue without a bf16 store of gate and up.
``intermediate="fp32"``
    no intermediate rounding (the ideal math on the decoded operands).

``kernel_input=x`` (FlashInfer's b12x fused MoE on SM120/121): the kernel reads bf16 activations ``x``
and quantizes them itself with ``Operands.qa``'s global scale. The reference still decodes ``qa``,
which must be our quantization of ``x`` (checked, but for values on a rounding near-tie);
``moe_error_bound`` adds the near-tie term of ``reference.input_ties`` carried through both GEMMs
(zero when ``x`` has no value on a tie: ``input_ties.off_ties``).

Gate/up convention: ``Operands.w`` is ``[E, 2I, H]`` with the **gate** rows first; the
output is ``silu(x·gateᵀ) * (x·upᵀ)``. (FlashInfer's ``cutlass_fused_moe`` wants the up
rows first, TRT-LLM's ``w3_w1`` order: its activation kernel reads the gate from the second
half, ``cutlass_fused_moe_kernels.cuh`` ``doActivationKernel``; adapters swap the halves.)

Work is vectorized per *active* expert (one matmul pair per expert that has tokens); the
expert's weights are decoded on their own, so a 256-expert layer never decodes all experts.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from fp4bench import formats
from fp4bench.reference.input_ties import input_deviation, requant_moves
from fp4bench.workload.operands import Operands, dequantize
from fp4bench.workload.problems import MoEProblem

Intermediate = Literal["fp32", "bf16", "nvfp4", "nvfp4-fused"]
INTERMEDIATES = ("fp32", "bf16", "nvfp4", "nvfp4-fused")
#: the intermediates re-quantized to NVFP4 with the fc2 activation global scale before GEMM2
NVFP4_INTERMEDIATES = ("nvfp4", "nvfp4-fused")
ACTIVATIONS = ("swiglu",)


def _expert_slice(q: Any, e: int) -> Any:
    """The quantized weights of expert ``e`` as a standalone quantized object."""
    if isinstance(q, formats.MXFP4):
        return formats.MXFP4(data=q.data[e], scales=q.scales[e])
    if isinstance(q, formats.NVFP4):
        gs = q.global_scale
        if gs.dim() == q.data.dim():  # one encode scale per expert, [E, 1, 1]
            gs = gs[e]
        return formats.NVFP4(data=q.data[e], scales=q.scales[e], global_scale=gs)
    raise TypeError(f"reference_moe: unsupported quantized weight type {type(q).__name__}")


def decoded_expert_weight(q: Any, w: torch.Tensor, e: int) -> torch.Tensor:
    """float32 weights of expert ``e`` exactly as the kernel sees them (decoded FP4, or bf16)."""
    return dequantize(_expert_slice(q, e)) if q is not None else w[e].float()


def _decoded_activations(ops: Operands) -> torch.Tensor:
    return dequantize(ops.qa) if ops.qa is not None else ops.a.float()


def _bf16(x: torch.Tensor) -> torch.Tensor:
    """Round float32 to bf16 and back (round-to-nearest-even, as CUTLASS epilogues store)."""
    return x.to(torch.bfloat16).to(torch.float32)


def _check(ops: Operands, activation: str, intermediate: str,
           fc2_act_global_scale: torch.Tensor | float | None, kernel_input: torch.Tensor | None = None) -> None:
    if not isinstance(ops.problem, MoEProblem):
        raise TypeError(f"reference_moe needs MoE operands, got a {type(ops.problem).__name__}")
    if activation not in ACTIVATIONS:
        raise ValueError(f"reference_moe: unknown activation {activation!r}; supported: {ACTIVATIONS}")
    if intermediate not in INTERMEDIATES:
        raise ValueError(f"reference_moe: intermediate must be one of {INTERMEDIATES}, got {intermediate!r}")
    if intermediate in NVFP4_INTERMEDIATES and fc2_act_global_scale is None:
        raise ValueError(f"reference_moe: intermediate={intermediate!r} needs fc2_act_global_scale "
                         "(the encode global scale the kernel quantizes the GEMM2 input with)")
    if kernel_input is not None:
        _check_kernel_input(ops, kernel_input)
    if ops.topk_ids is None or ops.topk_weights is None or ops.w2 is None:
        raise ValueError("reference_moe: operands lack topk_ids / topk_weights / w2 (not MoE operands)")
    p = ops.problem
    t, k = ops.topk_ids.shape
    if (t, k) != (p.num_tokens, p.top_k) or tuple(ops.topk_weights.shape) != (t, k):
        raise ValueError(f"reference_moe: topk_ids {tuple(ops.topk_ids.shape)} / topk_weights "
                         f"{tuple(ops.topk_weights.shape)} do not match the problem's "
                         f"[{p.num_tokens}, {p.top_k}]")


def _routed_groups(ops: Operands):
    """Yield ``(expert, token indices, routing weights)`` for each active expert, in expert order."""
    p: MoEProblem = ops.problem
    ids = ops.topk_ids.to(torch.int64).reshape(-1)
    tok = torch.arange(p.num_tokens, device=ids.device).repeat_interleave(p.top_k)
    wts = ops.topk_weights.to(torch.float32).reshape(-1)
    order = torch.argsort(ids, stable=True)
    ids, tok, wts = ids[order], tok[order], wts[order]
    experts, counts = torch.unique_consecutive(ids, return_counts=True)
    start = 0
    for e, n in zip(experts.tolist(), counts.tolist()):
        yield e, tok[start:start + n], wts[start:start + n]
        start += n


def _swiglu_input(ops: Operands, x: torch.Tensor, e: int, tok_e: torch.Tensor, intermediate: str) -> torch.Tensor:
    """float32 SwiGLU output of expert ``e`` for its routed tokens (before any GEMM2-input rounding)."""
    inter = ops.problem.inter
    h = x[tok_e] @ decoded_expert_weight(ops.qw, ops.w, e).t()          # [n, 2I], fp32 accumulate
    gate, up = h[:, :inter], h[:, inter:]
    if intermediate in ("bf16", "nvfp4"):
        gate, up = _bf16(gate), _bf16(up)                                # GEMM1 epilogue stores bf16
    return torch.nn.functional.silu(gate) * up                          # activation kernel, fp32


def routed_intermediate_amax(ops: Operands) -> torch.Tensor:
    """``max |SwiGLU output|`` over all routed (token, expert) rows, with GEMM1's bf16 stores.

    What a calibration pass measures to pick the fc2 activation global scale of an NVFP4
    fused MoE (``nvfp4_global_scale(amax)``)."""
    _check(ops, "swiglu", "bf16", None)
    x = _decoded_activations(ops)
    amax = torch.zeros((), dtype=torch.float32, device=x.device)
    for e, tok_e, _ in _routed_groups(ops):
        amax = torch.maximum(amax, _swiglu_input(ops, x, e, tok_e, "bf16").abs().amax())
    return amax


def reference_moe(
    ops: Operands,
    activation: str = "swiglu",
    intermediate: Intermediate = "bf16",
    fc2_act_global_scale: torch.Tensor | float | None = None,
    kernel_input: torch.Tensor | None = None,
) -> torch.Tensor:
    """float32 ``[T, H]``: for each token, ``Σ_k topk_weight · down(act(gate_up(x)))``.

    ``intermediate`` says which rounding the kernel applies between and after the GEMMs
    (module docstring); ``fc2_act_global_scale`` (encode convention, scalar or ``[E]``) is
    required for the NVFP4 intermediates. ``kernel_input`` changes the bound only (the reference is
    on ``qa``, the bytes a correct kernel reproduces from it).
    """
    _check(ops, activation, intermediate, fc2_act_global_scale, kernel_input)
    p: MoEProblem = ops.problem
    x = _decoded_activations(ops)
    device = x.device
    out = torch.zeros((p.num_tokens, p.hidden), dtype=torch.float32, device=device)

    gs2 = None
    if intermediate in NVFP4_INTERMEDIATES:
        gs2 = torch.as_tensor(fc2_act_global_scale, dtype=torch.float32, device=device)
        if gs2.dim() > 1 or (gs2.dim() == 1 and gs2.numel() not in (1, p.num_experts)):
            raise ValueError(f"reference_moe: fc2_act_global_scale must be a scalar or [E={p.num_experts}], "
                             f"got shape {tuple(gs2.shape)}")

    for e, tok_e, wts_e in _routed_groups(ops):  # one matmul pair per active expert
        act = _swiglu_input(ops, x, e, tok_e, intermediate)
        if intermediate in NVFP4_INTERMEDIATES:
            g = gs2 if gs2.dim() == 0 or gs2.numel() == 1 else gs2[e]
            act = dequantize(formats.nvfp4_quantize(act, global_scale=g.reshape(())))
        elif intermediate == "bf16":
            act = _bf16(act)                                             # GEMM2 input is bf16
        y = act @ decoded_expert_weight(ops.qw2, ops.w2, e).t()          # [n, H]
        if intermediate != "fp32":
            y = _bf16(y)                                                 # GEMM2 epilogue stores bf16
        out.index_add_(0, tok_e, y * wts_e[:, None])                     # finalize: fp32 sum
    return out


#: how far one intermediate may move when a kernel's fp32 summation order flips one of its
#: roundings (module docstring): bf16 path -- gate/up, activation and GEMM2 output each one bf16
#: ulp (2^-8 relative), the gate's through silu (|g*silu'(g)/silu(g)| <= 1.1): 2^-8 * 4.1 < 2^-6;
#: NVFP4 path -- one E2M1 step of the re-quantized activation (at most 1/3 of the block max
#: over 2, i.e. 2/6 relative to the block amax): 1/3; fp32: only the summation-order term.
_FLIP = {"bf16": 2.0 ** -6, "nvfp4": 1.0 / 3.0, "nvfp4-fused": 1.0 / 3.0, "fp32": 0.0}


def moe_error_bound(ops: Operands, ref: torch.Tensor, intermediate: Intermediate = "bf16",
                    fc2_act_global_scale: torch.Tensor | float | None = None,
                    kernel_input: torch.Tensor | None = None) -> torch.Tensor:
    """Elementwise bound on ``|kernel - reference_moe|`` for a correct kernel on the same bytes.

    ``2^-8 |ref|`` (the output's bf16 store) ``+ (FLIP + (I + H) 2^-24) * M`` with
    ``M[t, h] = Σ_k w_k Σ_j |act_kj| |W2_k[h, j]|`` -- the magnitude sum through which a flipped
    intermediate rounding (``FLIP``, worst case all of them) or fp32 reordering (Higham's
    γ_K-style term) can reach the output. Rigorous and therefore loose (M is about sqrt(I)
    times |ref| on random data): a swapped gate/up or a misread scale layout, wrong by O(|ref|),
    can stay under it, so the check adds the norm tier of ``reference.bulk``. With ``kernel_input`` it adds
    ``input_tie_term`` (zero unless one of those activations sits on a rounding near-tie).
    """
    flip, absolute = moe_bound_terms(ops, intermediate, fc2_act_global_scale, kernel_input)
    return 2.0 ** -8 * ref.abs() + flip + absolute


def moe_bound_terms(ops: Operands, intermediate: Intermediate = "bf16",
                    fc2_act_global_scale: torch.Tensor | float | None = None,
                    kernel_input: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``moe_error_bound`` less its ``2^-8 |ref|`` term, in two parts: ``FLIP * M`` (flipped
    intermediate roundings through the magnitudes) and the absolute rest (fp32 reordering,
    ``tiny``, and the input near-tie term), which ``reference.bulk`` also uses."""
    _check(ops, "swiglu", intermediate, fc2_act_global_scale, kernel_input)
    p: MoEProblem = ops.problem
    x = _decoded_activations(ops)
    mag = torch.zeros((p.num_tokens, p.hidden), dtype=torch.float32, device=x.device)
    for e, tok_e, wts_e in _routed_groups(ops):
        act = _swiglu_input(ops, x, e, tok_e, intermediate).abs()
        mag.index_add_(0, tok_e, (act @ decoded_expert_weight(ops.qw2, ops.w2, e).abs().t()) * wts_e[:, None])
    absolute = (p.inter + p.hidden) * 2.0 ** -24 * mag + torch.finfo(torch.float32).tiny
    if kernel_input is not None:
        absolute = absolute + input_tie_term(ops, x, kernel_input, fc2_act_global_scale)
    return _FLIP[intermediate] * mag, absolute


def _check_kernel_input(ops: Operands, kernel_input: torch.Tensor) -> None:
    """``qa`` must be our quantization of what the kernel quantizes, but where a value is on a tie."""
    if not isinstance(ops.qa, formats.NVFP4):
        raise ValueError(f"reference_moe: kernel_input needs NVFP4 activations (Operands.qa), got {type(ops.qa).__name__}")
    if tuple(kernel_input.shape) != tuple(ops.a.shape):
        raise ValueError(f"reference_moe: kernel_input {tuple(kernel_input.shape)} is not [T, H] = {tuple(ops.a.shape)}")
    x = kernel_input.to(ops.qa.data.device)
    ours = formats.nvfp4_quantize(x, global_scale=ops.qa.global_scale)
    differs = ((ours.data != ops.qa.data).reshape(*ours.scales.shape, -1).any(-1)
               | (ours.scales.view(torch.uint8) != ops.qa.scales.view(torch.uint8)))
    tied = input_deviation(x, ops.qa.global_scale).reshape(*ours.scales.shape, -1).amax(-1) > 0
    if bool((differs & ~tied).any()):
        raise ValueError(f"reference_moe: Operands.qa is not the quantization of kernel_input in "
                         f"{int((differs & ~tied).sum())} blocks: the reference would not be on the kernel's bytes")


def input_tie_term(ops: Operands, x: torch.Tensor, kernel_input: torch.Tensor,
                   fc2_act_global_scale: torch.Tensor | float) -> torch.Tensor:
    """``[T, H]``: how far a correct kernel that quantizes ``kernel_input`` itself may move the output
    through a near-tie of that quantization (``input_ties.input_deviation`` ``dx``; zero for the
    tokens without one).

    With ``D = dx @ |W1|^T`` split into gate/up deviations ``Dg``, ``Du`` and the fp32 GEMM1
    outputs ``g``, ``u``: ``|silu(g')u' - silu(g)u| <= 1.1 Dg (|u| + Du) + |g| Du =: da`` (silu is
    1.1-Lipschitz, ``|silu(g)| <= |g|``). The GEMM2 input re-quantized from the moved activation
    then differs from ours by at most ``input_ties.requant_moves(a, da, gs_2)``, carried through
    ``Σ_k w_k |W2_k|`` to the output (fp32; the rounding of this term is far below its size).
    """
    dx = input_deviation(kernel_input.to(x.device), ops.qa.global_scale)
    out = torch.zeros((ops.problem.num_tokens, ops.problem.hidden), dtype=torch.float32, device=x.device)
    touched = dx.amax(dim=1) > 0
    if not bool(touched.any()):
        return out
    gs2 = torch.as_tensor(fc2_act_global_scale, dtype=torch.float32, device=x.device)
    inter = ops.problem.inter
    for e, tok_e, wts_e in _routed_groups(ops):
        keep = touched[tok_e]
        if not bool(keep.any()):
            continue
        tok_e, wts_e = tok_e[keep], wts_e[keep]
        w1 = decoded_expert_weight(ops.qw, ops.w, e)
        h, d = x[tok_e] @ w1.t(), dx[tok_e] @ w1.abs().t()
        g, u, dg, du = h[:, :inter], h[:, inter:], d[:, :inter], d[:, inter:]
        da = 1.1 * dg * (u.abs() + du) + g.abs() * du
        g2 = gs2 if gs2.dim() == 0 or gs2.numel() == 1 else gs2[e]
        dq = requant_moves(torch.nn.functional.silu(g) * u, da, g2.reshape(()))
        out.index_add_(0, tok_e, (dq @ decoded_expert_weight(ops.qw2, ops.w2, e).abs().t()) * wts_e[:, None])
    return out


def unquantized_moe(ops: Operands, activation: str = "swiglu") -> torch.Tensor:
    """The same layer on the bf16 originals in fp32 (quantization-loss metric, not pass/fail)."""
    plain = Operands(ops.problem, "bf16", "bf16", ops.a, ops.w, w2=ops.w2,
                     topk_ids=ops.topk_ids, topk_weights=ops.topk_weights, seed=ops.seed)
    return reference_moe(plain, activation=activation, intermediate="fp32")
