"""What distinguishes the FlashInfer releases the fakes simulate (0.7.2.post1 and 0.7.4).

Recorded from the released wheels (``flashinfer_python-<v>-py3-none-any.whl``), so that a fake
accepts exactly the keywords the real function accepts (``inspect.Signature.bind`` raises the
same ``TypeError`` Python raises for an unexpected keyword) and an adapter that passes a keyword
one release lacks fails in CPU tests as it would on the GPU:

* ``flashinfer.fused_moe.cutlass_fused_moe``: flashinfer/fused_moe/core.py:1277 (0.7.2.post1),
  :1540 (0.7.4); 0.7.4 adds the keyword-only ``nvfp4_4over6`` (default: read the
  ``FLASHINFER_NVFP4_4OVER6*`` environment; ``None``: 4over6 off).
* ``cutlass_fused_moe_workspace_size``: core.py:1655 / :1967, the same parameters.
* ``MoERunner.__init__``: core.py:678 / :936, the same parameters, all required.
* ``get_cutlass_fused_moe_module(backend, use_fast_build=False)``: core.py:629 / :887.
* ``CutlassFp4GemmRunner.forward(inputs, tactic=-1, do_preparation=False, **kwargs)``:
  gemm/gemm_base.py:2833 / :3230 (the real one takes ``**kwargs``).
* the activation quantizers ``flashinfer.fp4_quantize`` / ``nvfp4_quantize`` (re-exported from
  flashinfer/quantization/fp4_quantization.py): ``fp4_quantize`` :1053 (0.7.2.post1) / :1089
  (0.7.4), ``nvfp4_quantize`` :1578 / :1646. 0.7.4 adds the keyword-only
  ``batch_invariant=False`` to both and changes ``backend``'s default from ``"cuda"`` to
  ``"auto"``, which means ``"cuda"`` unless ``batch_invariant`` (:1232-1233 / :1781-1782);
  0.7.2.post1 raises ``ValueError("Unknown backend: ...")`` for ``"auto"`` (:1193 / :1860). These
  signatures keep their real defaults (the fake reads them: ``bind_call``).

* ``flashinfer.mm_fp4``: gemm/gemm_base.py:9538 (0.7.2.post1), :10096 (0.7.4); 0.7.4 adds the
  keyword-only ``batch_invariant=False`` (the batch-invariant GEMM class in place of the backends).
  ``_heuristic_func_mm_fp4`` (:9301 / :9853) and the backends' requirement checks (:7872-8095 /
  :8416-8640) decide alike in both.
* ``flashinfer.autotune``: autotuner/autotuner.py:835 (0.7.2.post1), :906 (0.7.4); 0.7.4 adds
  ``tie_tolerance=None`` (near-tied tactics enumerated before the fastest are re-timed and the first
  that stays within the tolerance is kept: ``AutoTuner._settle_near_ties``, :3400).

Unchanged between the two (byte-identical files): the dense config tables and the SM120 default
(include/flashinfer/gemm/fp4_gemm_cutlass_template*.h, csrc/fp4_gemm_cutlass*.cu), the runners'
error texts (fp4_gemm_template_sm120.h:166-192, moe_gemm_tma_ws_launcher.inl).

Changed by design: the dense CUTLASS launchers call ``gemm.run(stream, ...)`` after
``gemm.initialize(args, workspace, stream)`` in 0.7.4 where 0.7.2.post1 called
``gemm.run(args, workspace, stream, ...)`` (fp4_gemm_template_sm120.h:188, sm100.h:299,
sm103.h:281), which initializes a second time. For CUTLASS's stream-K scheduler, initializing
clears its workspace (one memset per call); the data-parallel and SM100 persistent schedulers
have no workspace to clear, so only SM120 stream-K tactics get faster. ``streamk_reinit`` marks
the release whose stream-K launches pay that memset.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from enum import IntEnum

_MOE_REQUIRED = ("input", "token_selected_experts", "token_final_scales", "fc1_expert_weights",
                 "fc2_expert_weights", "output_dtype", "quant_scales")
_MOE_OPTIONAL = ("fc1_expert_biases", "fc2_expert_biases", "input_sf", "swiglu_alpha", "swiglu_beta",
                 "swiglu_limit", "tp_size", "tp_rank", "ep_size", "ep_rank", "cluster_size", "cluster_rank",
                 "output", "enable_alltoall", "use_deepseek_fp8_block_scale", "use_w4_group_scaling",
                 "use_mxfp8_act_scaling", "min_latency_mode", "use_packed_weights", "use_wfp4afp8_humming",
                 "tune_max_num_tokens", "enable_pdl", "activation_type", "swizzled_input_sf",
                 "use_fused_finalize", "profile_ids", "workspace_buffer")
_MOE_KWONLY = ("clamped_relu2_limit", "situ_beta", "situ_linear_beta", "backend")
_WS_REQUIRED = ("max_num_tokens", "hidden_size", "intermediate_size", "num_experts_total", "top_k")
_WS_KWONLY = ("x_dtype", "weight_dtype", "output_dtype", "activation_type", "tp_size", "tp_rank", "ep_size",
              "ep_rank", "min_latency_mode", "use_deepseek_fp8_block_scale", "use_w4_group_scaling",
              "use_mxfp8_act_scaling", "use_fused_finalize", "use_packed_weights", "use_wfp4afp8_humming",
              "device", "backend")
_RUNNER_REQUIRED = ("x_dtype", "weight_dtype", "output_dtype", "top_k", "tp_size", "tp_rank", "ep_size", "ep_rank",
                    "cluster_size", "cluster_rank", "enable_alltoall", "use_deepseek_fp8_block_scale",
                    "use_w4_group_scaling", "use_mxfp8_act_scaling", "min_latency_mode", "enable_pdl",
                    "activation_type", "use_packed_weights", "use_fused_finalize", "use_wfp4afp8_humming")

_P = inspect.Parameter


class _Unset:
    """FlashInfer's ``_UNSET`` default of ``nvfp4_4over6`` (quantization/nvfp4_quantization_utils.py):
    "not passed", i.e. the ``FLASHINFER_NVFP4_4OVER6*`` environment picks the recipe."""

    def __repr__(self) -> str:
        return "_UNSET"


UNSET = _Unset()


class SfLayout(IntEnum):
    """``flashinfer.SfLayout`` (flashinfer/tllm_enums.py:232 / :239, the same in both releases)."""

    layout_128x4 = 0
    layout_8x4 = 1
    layout_linear = 2


#: fp4_quantize's parameters before ``backend`` and nvfp4_quantize's around it, with their defaults
_FP4Q_HEAD = (("input", _P.empty), ("global_scale", None), ("sf_vec_size", 16), ("sf_use_ue8m0", False),
              ("is_sf_swizzled_layout", True), ("is_sf_8x4_layout", False), ("is_global_scale_inversed", False),
              ("enable_pdl", None))
_NVFP4Q_HEAD = (("a", _P.empty), ("a_global_sf", _P.empty), ("sfLayout", SfLayout.layout_128x4), ("do_shuffle", False),
                ("sf_vec_size", 16), ("enable_pdl", None))
_NVFP4Q_TAIL = (("per_token_activation", False), ("expanded_idx_to_permuted_idx", None), ("out_scale", None))


def signature(required: tuple[str, ...], optional: tuple[str, ...] = (), kwonly: tuple[str, ...] = ()
              ) -> inspect.Signature:
    """A signature with these parameter names (defaults are placeholders: only names and kinds matter)."""
    return inspect.Signature(
        [_P(n, _P.POSITIONAL_OR_KEYWORD) for n in required]
        + [_P(n, _P.POSITIONAL_OR_KEYWORD, default=None) for n in optional]
        + [_P(n, _P.KEYWORD_ONLY, default=None) for n in kwonly])


def with_defaults(positional: tuple[tuple[str, object], ...], kwonly: tuple[tuple[str, object], ...] = ()
                  ) -> inspect.Signature:
    """A signature with these ``(name, default)`` parameters (``_P.empty``: required)."""
    return inspect.Signature([_P(n, _P.POSITIONAL_OR_KEYWORD, default=d) for n, d in positional]
                             + [_P(n, _P.KEYWORD_ONLY, default=d) for n, d in kwonly])


def _quantizers(backend: str, kwonly: tuple[tuple[str, object], ...]) -> tuple[inspect.Signature, inspect.Signature]:
    """``fp4_quantize`` and ``nvfp4_quantize`` of a release whose ``backend`` defaults to ``backend``."""
    fp4 = with_defaults(_FP4Q_HEAD + (("backend", backend), ("nvfp4_4over6", UNSET)), kwonly)
    nvfp4 = with_defaults(_NVFP4Q_HEAD + (("backend", backend),) + _NVFP4Q_TAIL + (("nvfp4_4over6", UNSET),), kwonly)
    return fp4, nvfp4


@dataclass(frozen=True)
class Release:
    version: str
    cutlass_fused_moe: inspect.Signature
    workspace_size: inspect.Signature
    moe_runner: inspect.Signature
    #: stream-K launches re-initialize (one workspace memset per call): see the module docstring
    streamk_reinit: bool
    fp4_quantize: inspect.Signature
    nvfp4_quantize: inspect.Signature
    #: the quantizers resolve ``backend="auto"`` to ``"cuda"`` (0.7.4; 0.7.2.post1 has no "auto")
    quant_auto: bool
    #: each quantizer's ``ValueError`` text for a backend it does not know (``{backend}``: the name)
    quant_unknown_backend: dict[str, str]
    mm_fp4: inspect.Signature
    autotune: inspect.Signature


#: mm_fp4's parameters with their defaults (``out_dtype`` is torch.bfloat16: left to the fake, which fills it)
_MM_FP4 = (("a", _P.empty), ("b", _P.empty), ("a_descale", _P.empty), ("b_descale", _P.empty), ("alpha", None),
           ("out_dtype", None), ("out", None), ("block_size", 16), ("use_8x4_sf_layout", False), ("backend", "auto"),
           ("use_nvfp4", True), ("enable_pdl", True))
_AUTOTUNE = (("tune_mode", True), ("cache", None), ("tuning_buckets", None), ("round_up", None), ("skip_ops", None),
             ("cuda_graph_profile_replays", None))
_Q072 = _quantizers("cuda", ())
_Q074 = _quantizers("auto", (("batch_invariant", False),))
RELEASES = {
    "0.7.2.post1": Release("0.7.2.post1", signature(_MOE_REQUIRED, _MOE_OPTIONAL, _MOE_KWONLY),
                           signature(_WS_REQUIRED, (), _WS_KWONLY), signature(_RUNNER_REQUIRED), streamk_reinit=True,
                           fp4_quantize=_Q072[0], nvfp4_quantize=_Q072[1], quant_auto=False,
                           # fp4_quantization.py:1193, :1860
                           quant_unknown_backend={
                               "fp4_quantize": "Unknown backend: {backend}. Must be 'cuda' or 'cute-dsl'.",
                               "nvfp4_quantize": "Unknown backend: {backend}. Must be 'cuda', 'cute-dsl' or 'cake'."},
                           mm_fp4=with_defaults(_MM_FP4), autotune=with_defaults(_AUTOTUNE)),
    "0.7.4": Release("0.7.4", signature(_MOE_REQUIRED, _MOE_OPTIONAL, _MOE_KWONLY + ("nvfp4_4over6",)),
                     signature(_WS_REQUIRED, (), _WS_KWONLY), signature(_RUNNER_REQUIRED), streamk_reinit=False,
                     fp4_quantize=_Q074[0], nvfp4_quantize=_Q074[1], quant_auto=True,
                     # fp4_quantization.py:1265, :1991
                     quant_unknown_backend={
                         "fp4_quantize": "Unknown backend: {backend}. Must be 'auto', 'cuda' or 'cute-dsl'.",
                         "nvfp4_quantize": "Unknown backend: {backend}. Must be 'cuda', 'cute-dsl' or 'cake'."},
                     mm_fp4=with_defaults(_MM_FP4, (("batch_invariant", False),)),
                     autotune=with_defaults(_AUTOTUNE + (("tie_tolerance", None),))),
}
DEFAULT = "0.7.2.post1"


def release(version: str) -> Release:
    try:
        return RELEASES[version]
    except KeyError:
        raise ValueError(f"no simulated FlashInfer {version!r}: one of {sorted(RELEASES)}") from None


def bind(sig: inspect.Signature, name: str, kwargs: dict) -> None:
    """Raise the TypeError Python raises when ``name(**kwargs)`` does not fit ``sig``."""
    bind_call(sig, name, (), kwargs)


def bind_call(sig: inspect.Signature, name: str, args: tuple, kwargs: dict) -> dict:
    """``name(*args, **kwargs)`` bound to ``sig``: every parameter's value, defaults filled in; the
    TypeError Python raises when the call does not fit."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"{name}() {exc}") from None
    bound.apply_defaults()
    return dict(bound.arguments)
