"""FlashInfer CUTLASS fused MoE (``flashinfer.cutlass_fused_moe``, flashinfer-python 0.7.2.post1).

Two backends share one adapter, because the kernel FlashInfer picks depends on the GPU and
the contract fixes the operand formats per backend:

``flashinfer-cutlass-moe`` (SM90, Hopper: runs on the H200)
    BF16 activations x MXFP4 weights, "W4A16" (``use_w4_group_scaling=True``): uint8 packed
    E2M1 weights and UE8M0 group-32 scales, both interleaved for the SM90 mixed-input GEMM
    (``interleave_moe_weights_for_sm90_mixed_gemm`` / ``interleave_moe_scales_for_sm90_mixed_gemm``),
    ``quant_scales=[fc1_scales.view(int32), fc2_scales.view(int32)]``. Needs H % 128 and I % 128
    (scale interleave: rows % 64, K % 128; serving stacks zero-pad H and I up instead, which
    changes the problem, so we report the shape as unsupported).
``flashinfer-cutlass-moe-nvfp4`` (SM100/103/110/120/121, Blackwell; contract-tested only)
    NVFP4 x NVFP4: our pre-quantized activation bytes + swizzled ``input_sf`` (so kernel and
    reference see the same bytes), weights viewed as int64, swizzled weight scales viewed as
    int32, six ``quant_scales``. The kernel re-quantizes the SwiGLU output to NVFP4 with the
    fc2 activation global scale; we calibrate it once in ``prepare`` from the reference's
    intermediate (as a serving stack calibrates ``input_scale``) and hand it to the reference.

Gate/up: our operands store the gate rows first; the kernel reads the *up* rows first (its
activation kernel takes the gate from the second half), so ``prepare`` swaps the halves of
the fc1 weight bytes and scales. ``reference_moe`` documents the convention.

Finalize: ``use_fused_finalize=False`` (the library-choice rows of ``flashinfer_moe_tuned.py`` keep
the library's default). The fused finalize reduces the top-k rows with
atomics in the GEMM2 epilogue (run-to-run non-deterministic); SM90 mixed-input GEMMs never
have it anyway (``mayHaveFinalizeFused`` is false for them), and on Blackwell we want the same
deterministic finalize the reference models.

Tactics: the runner exposes GEMM1 and GEMM2 tactic lists (``get_gemm1_tactic_count`` /
``get_gemm2_tactic_count``; ``profile_ids`` take absolute indices, GEMM2 ones in
``[n1, n1 + n2)``, -1 = default). Timing every (g1, g2) pair is quadratic, so ``tactics()``
is the sweep policy: each GEMM1 tactic with the default GEMM2, then each GEMM2 tactic with
the default GEMM1 -- every tactic runs once. ``tactic_lists()`` gives the full per-GEMM lists.
A tactic the autotuner would never try (zero occupancy; for W4A16 also one
``get_valid_tactics_for_shape`` marks invalid for the shape: ``MoERunner.get_valid_tactics``) or
that raises at initialization raises ``TacticUnsupported``.

All library calls go through ``_moe_api.FlashInferMoEApi`` (constructor ``api=``): CPU contract tests
substitute a fake that decodes the arguments in the library's layout. Imports are lazy. This
adapter never calls FlashInfer's FP4 quantize helpers (they return uninitialized memory on
SM90: the kernel body is ``#if __CUDA_ARCH__ >= 1000``): operands are quantized by ``fp4bench.formats``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from fp4bench import formats
from fp4bench.backends.builtin import _numerics_env as numerics_env
from fp4bench.backends.builtin import _gating
from fp4bench.backends.builtin._marshal import fp4_pair
from fp4bench.backends.builtin._moe_api import TACTIC_FAILURES, FlashInferMoEApi, swap_gate_up
from fp4bench.backends.builtin._sm90_moe_tactics import sm90_w4a16_tactic_descriptions
from fp4bench.backends._errors import tactic_failure
from fp4bench.backends.alignment import FLASHINFER_MXFP4_PAD
from fp4bench.backends.base import DEFAULT_TACTIC, Availability, Backend, Prepared, Tactic, TacticUnsupported
from fp4bench.workload.operands import Operands
from fp4bench.workload.problems import MoEProblem, Problem
from fp4bench.reference.moe import routed_intermediate_amax

DEFAULT = -1


# --- the backends ------------------------------------------------------------------------
@dataclass(frozen=True)
class _TacticSpace:
    n1: int
    n2: int
    labels1: list[str]
    labels2: list[str]


class _FlashInferCutlassMoE(Backend):
    """Shared adapter; subclasses fix the format pair and the compute capabilities."""

    kinds: ClassVar[frozenset[str]] = frozenset({"moe"})
    supported_ccs: ClassVar[frozenset[int]]
    #: what the reference must model between the GEMMs (reference_moe ``intermediate``)
    intermediate: ClassVar[str]
    api = "flashinfer.cutlass_fused_moe"
    #: ``use_fused_finalize`` passed (False: the deterministic unfused finalize); None: not passed,
    #: the library's default (True)
    fused_finalize: ClassVar[bool | None] = False

    def __init__(self, api: FlashInferMoEApi | None = None) -> None:
        self.lib = api if api is not None else FlashInferMoEApi()
        self._spaces: dict[tuple[Any, ...], _TacticSpace] = {}

    # -- availability ------------------------------------------------------------------
    def availability(self, device: torch.device) -> Availability:
        info = _gating.device_info(device)
        if info is None:
            return Availability.no(f"{self.name} needs a CUDA GPU")
        cc = info.sm
        if cc not in self.supported_ccs:
            return Availability.no(f"{self.name} runs on compute capability "
                                   f"{sorted(self.supported_ccs)}; this GPU is sm_{cc}")
        try:
            version = self.lib.version()
        except ImportError as exc:
            return Availability.no(f"flashinfer is not importable: {exc}")
        return Availability.yes(version=version, reason=f"flashinfer {version} on sm_{cc}")

    def _arch(self, device: torch.device) -> str:
        return self.lib.device_arch(device)

    # -- shapes ------------------------------------------------------------------------
    #: hidden and inter must be multiples of this, for the reason in ``dim_why``
    dim_multiple: ClassVar[int]
    dim_why: ClassVar[str]

    def _shape_reason(self, p: MoEProblem) -> str | None:
        bad = [f"{n}={v}" for n, v in (("hidden", p.hidden), ("inter", p.inter)) if v % self.dim_multiple]
        if bad:
            return (f"{self.name} needs hidden and inter divisible by {self.dim_multiple} ({self.dim_why}); "
                    f"got {', '.join(bad)}")
        return None

    def unsupported_reason(self, problem: Problem) -> str | None:
        why = super().unsupported_reason(problem)
        if why is not None:
            return why
        assert isinstance(problem, MoEProblem)
        return self._shape_reason(problem)

    # -- tactics -----------------------------------------------------------------------
    def _runner_args(self) -> tuple[torch.dtype, torch.dtype, bool]:
        raise NotImplementedError

    def _space(self, problem: MoEProblem, device: torch.device) -> _TacticSpace:
        arch = self._arch(device)
        key = (arch, problem.top_k)
        if key not in self._spaces:
            x_dtype, w_dtype, w4 = self._runner_args()
            r = self.lib.tactic_runner(arch, x_dtype, w_dtype, problem.top_k, w4)
            n1, n2 = int(r.get_gemm1_tactic_count()), int(r.get_gemm2_tactic_count())
            self._spaces[key] = _TacticSpace(n1, n2, *self._labels(n1, n2))
        return self._spaces[key]

    def _labels(self, n1: int, n2: int) -> tuple[list[str], list[str]]:
        return [f"g1-{i:03d}" for i in range(n1)], [f"g2-{j:03d}" for j in range(n2)]

    def tactic_lists(self, problem: Problem, device: torch.device) -> tuple[list[Tactic], list[Tactic]]:
        """Every GEMM1 tactic (value ``(g1, -1)``) and every GEMM2 tactic (``(-1, n1 + j)``)."""
        assert isinstance(problem, MoEProblem)
        sp = self._space(problem, torch.device(device))
        g1 = [Tactic((i, DEFAULT), f"{lab}+g2-default") for i, lab in enumerate(sp.labels1)]
        g2 = [Tactic((DEFAULT, sp.n1 + j), f"g1-default+{lab}") for j, lab in enumerate(sp.labels2)]
        return g1, g2

    def tactics(self, problem: Problem, device: torch.device) -> list[Tactic]:
        """Sweep policy: the library's default (profile ids ``[-1, -1]``, what a caller passing
        none gets), each GEMM1 tactic with the default GEMM2, then each GEMM2 tactic with the
        default GEMM1 (n1 + n2 + 1 runs instead of n1 * n2)."""
        g1, g2 = self.tactic_lists(problem, device)
        return [DEFAULT_TACTIC] + g1 + g2

    # -- prepare / run -----------------------------------------------------------------
    def _check_operands(self, ops: Operands) -> None:
        if ops.act_format != self.act_format or ops.weight_format != self.weight_format:
            raise ValueError(f"{self.name} consumes {self.act_format} x {self.weight_format} operands, "
                             f"got {ops.act_format} x {ops.weight_format}")
        if ops.topk_ids is None or ops.topk_weights is None or ops.qw2 is None:
            raise ValueError(f"{self.name}: operands are not MoE operands (no routing or fc2 weights)")

    def _marshal(self, ops: Operands, device: torch.device) -> dict[str, Any]:
        raise NotImplementedError

    def prepare(self, problem: Problem, operands: Operands, device: torch.device) -> Prepared:
        why = self.unsupported_reason(problem)
        if why is not None:
            raise ValueError(f"{self.name}: {why}")
        assert isinstance(problem, MoEProblem)
        self._check_operands(operands)
        device = torch.device(device)
        args = self._marshal(operands, device)
        x_dtype, w_dtype, w4 = self._runner_args()
        t, h, i, e, k = problem.num_tokens, problem.hidden, problem.inter, problem.num_experts, problem.top_k
        ws = self.lib.workspace_size(
            max_num_tokens=t, hidden_size=h, intermediate_size=i, num_experts_total=e, top_k=k,
            x_dtype=x_dtype, weight_dtype=w_dtype, use_w4_group_scaling=w4, device=device, **self._finalize())
        args["workspace_buffer"] = torch.empty(ws, dtype=torch.uint8, device=device)
        args["token_selected_experts"] = operands.topk_ids.to(device=device, dtype=torch.int32).contiguous()
        args["token_final_scales"] = operands.topk_weights.to(device=device, dtype=torch.float32).contiguous()
        out = torch.empty((t, h), dtype=torch.bfloat16, device=device)
        meta: dict[str, Any] = {"unusable": self._unusable_tactics(problem, device)}
        meta.update({name[1:]: args.pop(name) for name in [n for n in args if n.startswith("_")]})
        return Prepared(problem=problem, out=out, args={"call": args, "meta": meta})

    def _unusable_tactics(self, p: MoEProblem, device: torch.device) -> dict[int, str]:
        """Tactic id -> why the library cannot run it here (asked once, outside the timed region).

        Per GEMM, as FlashInfer's own tactic filter does (flashinfer/fused_moe/core.py,
        ``MoERunner.get_valid_tactics``): tactics reporting zero occupancy are dropped unless
        *all* of them do ("fall back to all tactics if occupancy check eliminated everything",
        e.g. an architecture whose occupancy query is not implemented); for W4A16
        (``use_w4_group_scaling``) only, tactics ``get_valid_tactics_for_shape`` leaves out are
        dropped unless that would leave nothing (0.7.2.post1 core.py:803-905, 0.7.4 :1061-1163)."""
        x_dtype, w_dtype, w4 = self._runner_args()
        r = self.lib.tactic_runner(self._arch(device), x_dtype, w_dtype, p.top_k, w4)
        n1, n2 = int(r.get_gemm1_tactic_count()), int(r.get_gemm2_tactic_count())
        bad: dict[int, str] = {}
        for gemm, ids, n, k in ((1, range(n1), 2 * p.inter, p.hidden), (2, range(n1, n1 + n2), p.hidden, p.inter)):
            zero = {t for t in ids if int(r.get_tactic_occupancy(t)) <= 0}
            if len(zero) < len(ids):
                bad.update({t: f"GEMM{gemm} tactic {t} has zero occupancy on this GPU" for t in zero})
            if not w4:
                continue
            valid = {int(v) for v in r.get_valid_tactics_for_shape(gemm, n, k)}
            invalid = [t for t in ids if t not in valid and t not in bad]
            if len(invalid) < len(ids) - len(bad):
                bad.update({t: f"FlashInfer marks GEMM{gemm} tactic {t} invalid for N={n}, K={k}" for t in invalid})
        return bad

    def _finalize(self) -> dict[str, Any]:
        return {} if self.fused_finalize is None else {"use_fused_finalize": self.fused_finalize}

    def _profile_ids(self, prepared: Prepared, tactic: Tactic) -> list[int] | None:
        if tactic.value is None:  # DEFAULT_TACTIC: the library's defaults, no autotuning
            return [DEFAULT, DEFAULT]
        try:
            g1, g2 = (int(v) for v in tactic.value)
        except (TypeError, ValueError):
            raise ValueError(f"{self.name}: tactic value must be a (gemm1, gemm2) pair, got {tactic.value!r}") from None
        unusable = prepared.args["meta"]["unusable"]
        for tid in (g1, g2):
            if tid in unusable:
                raise TacticUnsupported(f"{tactic.label}: {unusable[tid]}")
        return [g1, g2]

    def run(self, prepared: Prepared, tactic: Tactic) -> torch.Tensor:
        ids = self._profile_ids(prepared, tactic)
        try:
            self.lib.cutlass_fused_moe(output=prepared.out, output_dtype=torch.bfloat16, profile_ids=ids,
                                       **self._finalize(), **prepared.args["call"])
        except RuntimeError as exc:
            unsupported = tactic_failure(exc, tactic.label, TACTIC_FAILURES)
            if unsupported is None:
                raise  # an argument check or anything else is our bug: an error, never "unsupported"
            raise unsupported from exc
        return prepared.out

    def reference_options(self, prepared: Prepared) -> dict[str, Any]:
        """The kernel's rounding between the GEMMs (bf16, or NVFP4 with the calibrated fc2 scale)."""
        return {"intermediate": self.intermediate,
                "fc2_act_global_scale": prepared.args["meta"].get("fc2_act_global_scale")}


class FlashInferCutlassMoEW4A16(_FlashInferCutlassMoE):
    """SM90: BF16 activations x MXFP4 weights (the only FP4-weight GEMM that runs on Hopper)."""

    name = "flashinfer-cutlass-moe"
    act_format = "bf16"
    weight_format = "mxfp4"
    supported_ccs = frozenset({90})
    intermediate = "bf16"
    #: gpt-oss H = I = 2880 is zero-padded to 3072 by the serving stacks that run this kernel
    padding = FLASHINFER_MXFP4_PAD

    dim_multiple = 128
    dim_why = "SM90 W4A16 scale interleave: rows % 64, K % 128; serving stacks zero-pad to 128/256"

    def _runner_args(self) -> tuple[torch.dtype, torch.dtype, bool]:
        return torch.bfloat16, torch.uint8, True

    def _labels(self, n1: int, n2: int) -> tuple[list[str], list[str]]:
        desc = sm90_w4a16_tactic_descriptions()
        if n1 == n2 == len(desc):
            return ([f"g1-{i:03d}:{d}" for i, d in enumerate(desc)],
                    [f"g2-{j:03d}:{d}" for j, d in enumerate(desc)])
        return super()._labels(n1, n2)

    def _marshal(self, ops: Operands, device: torch.device) -> dict[str, Any]:
        if not isinstance(ops.qw, formats.MXFP4) or not isinstance(ops.qw2, formats.MXFP4):
            raise TypeError(f"{self.name}: weights must be MXFP4, got {type(ops.qw).__name__}")
        inter = ops.problem.inter
        w1 = swap_gate_up(ops.qw.data, inter).to(device)
        s1 = swap_gate_up(ops.qw.scales, inter).to(device)
        w2 = ops.qw2.data.to(device).contiguous()
        s2 = ops.qw2.scales.to(device).contiguous()
        return {
            "input": ops.a.to(device=device, dtype=torch.bfloat16).contiguous(),
            "fc1_expert_weights": self.lib.interleave_weights(w1),
            "fc2_expert_weights": self.lib.interleave_weights(w2),
            "quant_scales": [self.lib.interleave_scales(s1).view(torch.int32),
                             self.lib.interleave_scales(s2).view(torch.int32)],
            "use_w4_group_scaling": True,
        }


class FlashInferCutlassMoENVFP4(_FlashInferCutlassMoE):
    """Blackwell: NVFP4 activations (our bytes + input_sf) x NVFP4 weights."""

    name = "flashinfer-cutlass-moe-nvfp4"
    act_format = "nvfp4"
    weight_format = "nvfp4"
    supported_ccs = frozenset({100, 103, 110, 120, 121})
    intermediate = "nvfp4"

    dim_multiple = 64
    dim_why = "NVFP4 fused MoE: one 128x4 scale tile covers 64 K elements; fc1 scale rows are 2*align64(inter)"

    def _runner_args(self) -> tuple[torch.dtype, torch.dtype, bool]:
        return torch.uint8, torch.int64, False

    def _marshal(self, ops: Operands, device: torch.device) -> dict[str, Any]:
        qa, qw = fp4_pair(ops, formats.NVFP4, self.name)
        qw2 = ops.qw2
        if not isinstance(qw2, formats.NVFP4):
            raise TypeError(f"{self.name}: needs NVFP4 fc2 weights, got {type(qw2).__name__}")
        p: MoEProblem = ops.problem
        inter = p.inter
        e = p.num_experts
        gs_a = qa.global_scale.to(device=device, dtype=torch.float32).reshape(())
        gs_w1 = qw.global_scale.to(device=device, dtype=torch.float32).expand(e, 1, 1).reshape(e)
        gs_w2 = qw2.global_scale.to(device=device, dtype=torch.float32).expand(e, 1, 1).reshape(e)
        # fc2 activation (encode) global scale, calibrated on this batch's routed intermediate.
        amax = float(routed_intermediate_amax(ops))
        gs_2 = formats.nvfp4_global_scale(amax).to(device)
        w1 = swap_gate_up(qw.data, inter).to(device).view(torch.int64)
        s1 = formats.swizzle_128x4(swap_gate_up(qw.scales, inter)).to(device)
        s2 = formats.swizzle_128x4(qw2.scales).to(device)
        return {
            "input": qa.data.to(device).contiguous(),
            "input_sf": formats.swizzle_128x4(qa.scales).view(torch.uint8).to(device),
            "swizzled_input_sf": True,
            "fc1_expert_weights": w1.contiguous(),
            "fc2_expert_weights": qw2.data.to(device).contiguous().view(torch.int64),
            "quant_scales": [
                gs_a,
                s1.view(torch.uint8).view(torch.int32),
                (1.0 / (gs_a * gs_w1)).contiguous(),
                gs_2.reshape(()),
                s2.view(torch.uint8).view(torch.int32),
                (1.0 / (gs_2 * gs_w2)).contiguous(),
            ],
            "_fc2_act_global_scale": gs_2,
            **self._pinned_recipe(),
        }

    def _pinned_recipe(self) -> dict[str, Any]:
        """``nvfp4_4over6=None`` where the installed library takes it (0.7.4: flashinfer/fused_moe/
        core.py:1580, "None: 4over6 off, environment ignored"), so the kernel re-quantizes the
        intermediate with the recipe the reference models whatever ``FLASHINFER_NVFP4_4OVER6*`` says;
        0.7.2.post1 has no such keyword (TypeError) and reads the environment."""
        return {"nvfp4_4over6": None} if self.lib.accepts("nvfp4_4over6") else {}

    def failure_hint(self, prepared: Prepared) -> str:
        """The set FlashInfer variables that change this kernel's NVFP4 re-quantization."""
        pinned = "nvfp4_4over6" in prepared.args["call"]
        return numerics_env.hint(numerics_env.unpinned(pinned_4over6=pinned))


BACKENDS = [FlashInferCutlassMoEW4A16(), FlashInferCutlassMoENVFP4()]
