"""Fake NVFP4 activation quantizers (FlashInfer ``fp4_quantize`` / ``nvfp4_quantize``, sgl_kernel
``scaled_fp4_quant``) computing real NVFP4 bytes with an encoder written here, independent of
``fp4bench.formats`` (the recipe of docs/formats.md, as the CUDA kernels implement it with
exact division): per 16-block ``sf = e4m3(min(gs·amax_b/6, 448))``, codes
``RNE_e2m1_sat(x·(gs/sf))`` by explicit midpoint thresholds (ties to the even code), sign bit
kept, a zero-scale block all code 0; scales written 128x4-swizzled through the offset formula
of ``fakes.decode``, padding zero (or, with ``stale_padding``, left unwritten: sgl_kernel).

``zero_scales`` reproduces FlashInfer #3398 (``nvfp4_quantize`` read a bf16 global scale as fp32
and wrote all-zero block scales for some M, e.g. 384/512/1024 at K = 2048, while the GEMMs were
innocent): for M in the set (and K in ``zero_scales_k`` when given) every scale byte is 0.

``fp4_quantize`` / ``nvfp4_quantize`` take exactly the parameters of their release
(``fakes.flashinfer_releases``, ``version``): a keyword the release lacks raises Python's
``TypeError``, a ``backend`` it does not know the release's ``ValueError``; the defaults are the
release's (0.7.4's ``backend="auto"`` is ``"cuda"``, 0.7.2.post1 has no ``"auto"``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from fakes import flashinfer_releases as releases
from fakes.decode import offsets_128x4, pad, require

BLOCK = 16
# |x| thresholds between consecutive E2M1 magnitudes, and whether a value exactly on the
# threshold rounds up (the code above it has an even mantissa) or down
_MIDPOINTS = ((0.25, False), (0.75, True), (1.25, False), (1.75, True), (2.5, False), (3.5, True), (5.0, False))
#: the M values of FlashInfer #3398 (K = 2048 upstream)
ISSUE_3398_M = frozenset({384, 512, 1024})


def e2m1_codes(v: torch.Tensor) -> torch.Tensor:
    """float32 -> uint8 E2M1 codes: round to nearest, ties to even, saturate at 6, sign in bit 3."""
    a = v.abs()
    mag = torch.zeros(v.shape, dtype=torch.uint8)
    for t, up in _MIDPOINTS:
        mag += (a >= t if up else a > t).to(torch.uint8)
    return mag + torch.signbit(v).to(torch.uint8) * 8


def encode(x: torch.Tensor, gs: float) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16/fp16 ``[M, K]`` and an fp32 encode scale -> (uint8 ``[M, K/2]``, uint8 scales ``[M, K/16]``)."""
    m, k = x.shape
    blocks = x.float().reshape(m, k // BLOCK, BLOCK)
    g = torch.tensor(gs, dtype=torch.float32)
    amax = blocks.abs().amax(dim=-1)
    sf = torch.clamp(g * (amax / 6.0), max=448.0).to(torch.float8_e4m3fn)
    sf32 = sf.float()
    oscale = torch.where(sf32 > 0, g / torch.where(sf32 > 0, sf32, torch.ones_like(sf32)), torch.zeros_like(sf32))
    codes = e2m1_codes(blocks * oscale.unsqueeze(-1))
    codes[sf32 == 0] = 0
    codes = codes.reshape(m, k)
    return codes[:, 0::2] | (codes[:, 1::2] << 4), sf.view(torch.uint8)


def swizzle(sf: torch.Tensor, padding: int = 0) -> torch.Tensor:
    """uint8 ``[M, C]`` -> uint8 ``[pad128(M), pad4(C)]`` in 128x4 order, ``padding`` in the padding."""
    m, c = sf.shape
    out = torch.full((pad(m, 128) * pad(c, 4),), padding, dtype=torch.uint8)
    out[offsets_128x4(m, c).reshape(-1)] = sf.reshape(-1)
    return out.reshape(pad(m, 128), pad(c, 4))


@dataclass
class FakeQuantizer:
    zero_scales: frozenset[int] = frozenset()
    zero_scales_k: frozenset[int] | None = None
    #: None: the padding of the scale buffer is written (zeros); a byte: it is left as it was,
    #: holding that stale byte (sgl_kernel allocates with ``torch.empty`` and writes [M, K/16] only)
    stale_padding: int | None = None
    #: the FlashInfer release whose quantizer signatures the FlashInfer entry points take
    version: str = releases.DEFAULT
    calls: int = 0
    kernels: list[str] = field(default_factory=list)

    def _quantize(self, x: torch.Tensor, gs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        require(x.dtype in (torch.float16, torch.bfloat16), f"input.dtype needs to be fp16 or bf16 but got {x.dtype}.")
        require(x.dim() == 2 and x.is_contiguous(), "input must be a contiguous [M, K] matrix")
        require(x.shape[-1] % BLOCK == 0, f"last dim has to be multiple of 16, but got {x.shape[-1]}.")
        require(isinstance(gs, torch.Tensor) and gs.dtype == torch.float32 and gs.numel() == 1,
                f"global scale must be a float32 tensor of one element, got {getattr(gs, 'dtype', type(gs))}")
        data, sf = encode(x, float(gs.reshape(-1)[0]))
        m, k = x.shape
        if m in self.zero_scales and (self.zero_scales_k is None or k in self.zero_scales_k):
            sf = torch.zeros_like(sf)
        self.kernels.append("quantize_with_block_size")
        return data, swizzle(sf, 0 if self.stale_padding is None else self.stale_padding)

    def _backend(self, name: str, args: dict) -> None:
        """The release's backend resolution; the fake implements the CUDA kernel only."""
        release = releases.release(self.version)
        if args.get("batch_invariant"):
            raise NotImplementedError(f"the fake {name} does not model batch_invariant=True")
        backend = "cuda" if args["backend"] == "auto" and release.quant_auto else args["backend"]
        if backend in ("cute-dsl", "cake"):
            raise NotImplementedError(f"the fake {name} implements backend 'cuda' only, got {backend!r}")
        if backend != "cuda":
            raise ValueError(release.quant_unknown_backend[name].format(backend=args["backend"]))

    def fp4_quantize(self, *args, **kwargs):
        """``flashinfer.fp4_quantize`` of the release (its parameters only)."""
        a = releases.bind_call(releases.release(self.version).fp4_quantize, "fp4_quantize", args, kwargs)
        self._backend("fp4_quantize", a)
        require(a["sf_vec_size"] == 16 and not a["sf_use_ue8m0"], "the fake implements NVFP4 (sf_vec_size=16, e4m3) only")
        require(a["is_sf_swizzled_layout"] and not a["is_sf_8x4_layout"] and not a["is_global_scale_inversed"],
                "the fake implements the 128x4 swizzled layout with an encode global scale")
        require(a["nvfp4_4over6"] is None, "pass nvfp4_4over6=None: otherwise FLASHINFER_NVFP4_4OVER6* pick the recipe")
        return self._quantize(a["input"], a["global_scale"].to(torch.float32))

    def nvfp4_quantize(self, *args, **kwargs):
        """``flashinfer.nvfp4_quantize`` of the release: the 128x4, per-tensor-scale path, which
        quantizes as ``fp4_quantize`` does."""
        a = releases.bind_call(releases.release(self.version).nvfp4_quantize, "nvfp4_quantize", args, kwargs)
        self._backend("nvfp4_quantize", a)
        if not isinstance(a["sfLayout"], releases.SfLayout):
            raise TypeError(f"sfLayout must be a SfLayout, got {a['sfLayout']!r}")
        require(a["sfLayout"] == releases.SfLayout.layout_128x4 and not a["do_shuffle"]
                and not a["per_token_activation"] and a["out_scale"] is None,
                "the fake implements layout_128x4 without shuffle, per-tensor scale")
        return self.fp4_quantize(a["a"], a["a_global_sf"], a["sf_vec_size"], enable_pdl=a["enable_pdl"],
                                 backend="cuda", nvfp4_4over6=a["nvfp4_4over6"])

    # sgl-kernel python/sgl_kernel/gemm.py
    def scaled_fp4_quant(self, input, input_global_scale):
        data, sf = self._quantize(input, input_global_scale)
        return data, sf.view(torch.float8_e4m3fn)
