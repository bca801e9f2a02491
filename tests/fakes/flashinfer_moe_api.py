"""A fake ``FlashInferMoEApi`` for the fused-MoE adapters' contract tests (test-only).

It mirrors ``flashinfer.cutlass_fused_moe`` as the 0.7.2.post1 binding reads its arguments
(flashinfer_cutlass_fused_moe_binding.cu: dtypes, ranks, quant-scale lists, profile-id ranges) and
computes the MoE the way the kernel does: it *decodes the arguments in the library's layout*
(SM90: de-interleaved weight bytes and folded scales; Blackwell: int64 weight views, 128x4-swizzled
scales, alphas), takes the gate from the second half of fc1 (TRT-LLM's w3_w1 order), stores GEMM
outputs in bf16 and finalizes in fp32. Without ``profile_ids`` it asks ``tuner``
(``fakes.flashinfer_mm_fp4.FakeAutoTuner``) for the GEMM1 and GEMM2 tactics as core.py does
(``choose_one("trtllm::fused_moe::gemm1", [runner], ..., gemm_idx=1)``, then ``gemm2``); the tuner
finds ``fastest`` (per GEMM) fastest.
"""

from __future__ import annotations

import torch

from fakes.flashinfer_mm_fp4 import FakeAutoTuner, moe_valid_tactics
from fp4bench import formats
from fp4bench.formats import sm90_interleave as sm90
from fp4bench.measure.verify import classify
from fp4bench.reference.bound import Reference, reference_and_bound
from fp4bench.workload.problems import MoEProblem


class FakeRunner:
    def __init__(self, n1: int, n2: int, invalid: set[int] = frozenset(), zero_occ: set[int] = frozenset()):
        self.n1, self.n2, self.invalid, self.zero_occ = n1, n2, set(invalid), set(zero_occ)

    def get_gemm1_tactic_count(self) -> int:
        return self.n1

    def get_gemm2_tactic_count(self) -> int:
        return self.n2

    def get_tactic_occupancy(self, t: int) -> int:
        return 0 if t in self.zero_occ else 2

    def get_valid_tactics_for_shape(self, stage: int, n: int, k: int) -> list[int]:
        lo, hi = (0, self.n1) if stage == 1 else (self.n1, self.n1 + self.n2)
        return [t for t in range(lo, hi) if t not in self.invalid]


class FakeFlashInfer:
    """Stands in for ``FlashInferMoEApi``; ``mistake`` makes it decode wrongly (negative tests):
    ``no_weight_deinterleave``, ``no_scale_deinterleave`` (W4A16), ``scales_linear`` (NVFP4: the 128x4-swizzled
    weight scales read row-major), ``gate_first``."""

    def __init__(self, arch: str = "90", n1: int = 116, n2: int = 116, mistake: str | None = None,
                 failing: set[int] = frozenset(), invalid: set[int] = frozenset(),
                 zero_occ: set[int] = frozenset(), fastest: tuple[int, int] | None = None):
        self.arch, self.mistake, self.failing = arch, mistake, set(failing)
        self.runner = FakeRunner(n1, n2, invalid, zero_occ)
        self.calls: list[dict] = []
        self.workspace_calls: list[dict] = []
        self.tune = FakeAutoTuner()
        #: the (GEMM1, GEMM2) profile ids the tuner measures fastest (default: the first of each)
        self.fastest = fastest if fastest is not None else (0, n1)

    def autotune(self, tune_mode: bool = True):
        return self.tune.tuning(tune_mode)

    def tuner(self) -> FakeAutoTuner:
        return self.tune

    def get_valid_tactics(self, inputs: list, profile: object, gemm_idx: int = 1) -> list[int]:
        """The ``MoERunner`` as the tuner sees it: each GEMM's usable profile ids (``inputs``: the input
        and the fc1 / fc2 weights, whose shapes give each GEMM's N and K as core.py reads them)."""
        x, fc1, _, fc2, _ = inputs
        h = fc2.shape[1]
        n, k = (fc1.shape[1], h) if gemm_idx == 1 else (h, fc1.shape[1] // 2)
        return moe_valid_tactics(self.runner, gemm_idx, n, k, w4_group_scaling=self.arch == "90")

    def measured_time(self, tactic: int, gemm_idx: int = 1) -> float:
        return 0.5 if tactic == self.fastest[gemm_idx - 1] else 1.0 + tactic * 1e-3

    def version(self) -> str:
        return "0.7.2.post1-fake"

    def device_arch(self, device: torch.device) -> str:
        return self.arch

    def accepts(self, keyword: str) -> bool:
        return False  # 0.7.2.post1's cutlass_fused_moe: no nvfp4_4over6

    def workspace_size(self, **kw) -> int:
        assert kw.get("use_fused_finalize", "library default") in (False, "library default")
        self.workspace_calls.append(kw)
        return 4096

    def interleave_weights(self, w: torch.Tensor) -> torch.Tensor:
        assert w.dtype == torch.uint8 and w.dim() == 3 and w.is_contiguous()
        return sm90.sm90_interleave_fp4_weights(w)

    def interleave_scales(self, s: torch.Tensor) -> torch.Tensor:
        assert s.dtype == torch.uint8 and s.dim() == 3
        return sm90.sm90_interleave_mxfp4_scales(s)

    def tactic_runner(self, arch, x_dtype, weight_dtype, top_k, use_w4_group_scaling):
        assert arch == self.arch
        return self.runner

    # -- the op ------------------------------------------------------------------------
    def cutlass_fused_moe(self, *, input, token_selected_experts, token_final_scales,
                          fc1_expert_weights, fc2_expert_weights, output_dtype, quant_scales,
                          output, workspace_buffer, profile_ids=None, use_fused_finalize=True,
                          use_w4_group_scaling=False, input_sf=None, swizzled_input_sf=True):
        if profile_ids is None:  # core.py: the tuner picks each GEMM's tactic
            ins = [input, fc1_expert_weights, None, fc2_expert_weights, None]
            profile_ids = [self.tune.choose_one(f"trtllm::fused_moe::gemm{g}", [self], None, ins, gemm_idx=g)[1]
                           for g in (1, 2)]
        self.calls.append({"profile_ids": list(profile_ids), "use_fused_finalize": use_fused_finalize})
        n1, n2 = self.runner.n1, self.runner.n2
        g1, g2 = profile_ids
        if not (g1 == -1 or 0 <= g1 < n1) or not (g2 == -1 or n1 <= g2 < n1 + n2):
            raise RuntimeError(f"Invalid gemm profile id: {profile_ids}")
        if g1 in self.failing or g2 in self.failing:
            raise RuntimeError("[TensorRT-LLM][ERROR] Failed to initialize cutlass TMA WS grouped gemm.\nmore")
        assert output_dtype == torch.bfloat16 and output.dtype == torch.bfloat16
        assert token_selected_experts.dtype == torch.int32 and token_final_scales.dtype == torch.float32
        assert workspace_buffer.dtype == torch.uint8 and workspace_buffer.numel() >= 4096
        if self.arch == "90":
            w1, w2, x = self._decode_w4a16(input, fc1_expert_weights, fc2_expert_weights, quant_scales,
                                           use_w4_group_scaling)
            fc2_quant = None
        else:
            w1, w2, x, fc2_quant = self._decode_nvfp4(input, input_sf, swizzled_input_sf,
                                                      fc1_expert_weights, fc2_expert_weights, quant_scales)
        output.copy_(self._moe(x, w1, w2, token_selected_experts, token_final_scales, fc2_quant))

    def _decode_w4a16(self, x, fc1, fc2, quant_scales, use_w4):
        assert use_w4 is True and x.dtype == torch.bfloat16
        assert fc1.dtype == fc2.dtype == torch.uint8 and len(quant_scales) == 2
        assert all(q.dtype == torch.int32 for q in quant_scales)
        e, two_i, hb = fc1.shape
        h, inter = hb * 2, fc2.shape[2] * 2
        assert fc2.shape == (e, h, inter // 2) and two_i == 2 * inter
        if self.mistake != "no_weight_deinterleave":
            fc1, fc2 = sm90.sm90_deinterleave_fp4_weights(fc1), sm90.sm90_deinterleave_fp4_weights(fc2)
        s1, s2 = (q.view(torch.uint8) for q in quant_scales)
        if self.mistake == "no_scale_deinterleave":
            s1, s2 = s1.reshape(e, two_i, h // 32), s2.reshape(e, h, inter // 32)
        else:
            s1 = sm90.sm90_deinterleave_mxfp4_scales(s1, two_i, h // 32)
            s2 = sm90.sm90_deinterleave_mxfp4_scales(s2, h, inter // 32)
        w1 = formats.mxfp4_dequantize(formats.MXFP4(fc1, s1))
        w2 = formats.mxfp4_dequantize(formats.MXFP4(fc2, s2))
        return w1, w2, x.float()

    def _decode_nvfp4(self, x, input_sf, swizzled, fc1, fc2, quant_scales):
        assert x.dtype == torch.uint8 and input_sf is not None and swizzled is True
        assert fc1.dtype == fc2.dtype == torch.int64 and len(quant_scales) == 6
        a_gs, s1, alpha1, gs2, s2, alpha2 = quant_scales
        assert s1.dtype == s2.dtype == torch.int32 and a_gs.dim() == 0 and gs2.dim() == 0
        e = fc1.shape[0]
        h, inter = fc2.shape[1], fc2.shape[2] * 16
        assert fc1.shape == (e, 2 * inter, h // 16) and alpha1.shape == alpha2.shape == (e,)

        def weights(w, s, rows, k):
            if self.mistake == "scales_linear":  # the 128x4-swizzled bytes read row-major
                flat = s.view(torch.uint8).reshape(s.shape[0], -1)[:, :rows * (k // 16)]
                sf = flat.reshape(-1, rows, k // 16).view(torch.float8_e4m3fn)
            else:
                sf = formats.unswizzle_128x4(s.view(torch.uint8), rows, k // 16).view(torch.float8_e4m3fn)
            return formats.nvfp4_dequantize(formats.NVFP4(w.view(torch.uint8), sf, torch.ones(())))

        a_sf = formats.unswizzle_128x4(input_sf, x.shape[0], h // 16).view(torch.float8_e4m3fn)
        a = formats.nvfp4_dequantize(formats.NVFP4(x, a_sf, torch.ones(())))        # e2m1 * sf, no gs
        w1 = weights(fc1, s1, 2 * inter, h) * alpha1[:, None, None]   # alpha folded per expert
        w2 = weights(fc2.view(torch.int64), s2, h, inter) * alpha2[:, None, None]
        return w1, w2, a, gs2

    def _moe(self, x, w1, w2, ids, scales, fc2_quant_gs):
        inter = w2.shape[2]
        out = torch.zeros(x.shape[0], w2.shape[1])
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            h = (x[tok] @ w1[e].t()).to(torch.bfloat16).float()        # GEMM1 stores bf16
            linear, gate = h[:, :inter], h[:, inter:]                  # kernel: up first, gate second
            if self.mistake == "gate_first":
                linear, gate = gate, linear
            act = torch.nn.functional.silu(gate) * linear
            if fc2_quant_gs is None:
                act = act.to(torch.bfloat16).float()
            else:                                                      # in-kernel NVFP4 requant; alpha2 holds 1/gs2
                q = formats.nvfp4_quantize(act, global_scale=fc2_quant_gs)
                act = formats.nvfp4_dequantize(formats.NVFP4(q.data, q.scales, torch.ones(())))
            y = (act @ w2[e].t()).to(torch.bfloat16).float()           # GEMM2 stores bf16
            out.index_add_(0, tok, y * scales[tok, slot][:, None])     # fp32 finalize
        return out.to(torch.bfloat16)


def moe_problem(t=5, e=6, k=2, h=256, i=128, seed=0) -> MoEProblem:
    g = torch.Generator().manual_seed(seed)
    ids = tuple(tuple(torch.randperm(e, generator=g)[:k].tolist()) for _ in range(t))
    return MoEProblem(hidden=h, inter=i, num_experts=e, top_k=k, topk_ids=ids)


def matches(out: torch.Tensor, ref: Reference) -> bool:
    """Kernel-vs-reference on the *same bytes*, by the production check (``verify.classify`` with
    ``ref``'s elementwise bound and bulk tolerance, ``reference.bound.reference_and_bound``)."""
    got = out.float()
    return classify(got, got, ref.out.float(), ref.bound, ref.bulk).ok


def check_moe(be, prep, ops, out) -> bool:
    return matches(out, reference_and_bound(ops, be.reference_options(prep)))
