"""Labels of FlashInfer's SM90 W4A16 (BF16 x MXFP4) fused-MoE GEMM tactics, derived from the C++
source of FlashInfer 0.7.2.post1 (the tactics of ``flashinfer-cutlass-moe``)."""

from __future__ import annotations

import itertools

# cutlass_heuristic.cpp get_candidate_tiles_sm90(GROUPED_GEMM | WEIGHT_ONLY) lists these CTA
# tiles (M x N x K, K in bytes as the C++ enum names it); get_candidate_configs_sm90 gives each
# cluster 1x1, 2x1, 1x2, 2x2 with the cooperative mainloop where sm90_supports_coop() else
# ping-pong; getTmaWarpSpecializedConfigs keeps only the swap_ab copies for mixed input. Used
# only when the runner reports exactly this many tactics per GEMM (checked on the H200).
_SM90_W4A16_TILES = (
    [(64, n, k) for n in (16, 32, 64, 128) for k in (128, 256, 512)]
    + [(128, n, k) for n in (16, 32, 64, 128) for k in (128, 256, 512)]
    + [(128, 256, 128), (128, 256, 256), (256, 128, 128), (256, 128, 256), (256, 256, 128)]
)
_SM90_CLUSTERS = ((1, 1), (2, 1), (1, 2), (2, 2))


def _sm90_coop(m: int, n: int, k: int) -> bool:
    if m == 128 and n in (16, 32, 64):
        return k in (128, 256, 512)
    if m == 128 and n in (128, 256) or m == 256 and n == 128:
        return k in (128, 256)
    return m == 256 and n == 256 and k == 128


def sm90_w4a16_tactic_descriptions() -> list[str]:
    """One label per SM90 W4A16 tactic, in the runner's order (derived from the C++ source)."""
    out = []
    for (m, n, k), (cm, cn) in itertools.product(_SM90_W4A16_TILES, _SM90_CLUSTERS):
        out.append(f"{m}x{n}x{k}B_c{cm}x{cn}_{'coop' if _sm90_coop(m, n, k) else 'pingpong'}_swapab")
    return out
