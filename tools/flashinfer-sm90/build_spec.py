#!/usr/bin/env python3
"""Write FlashInfer's SM90 fused-MoE JIT build, reduced to what BF16 x MXFP4 (W4A16) needs.

Why: ``fused_moe_90`` as FlashInfer JIT-builds it compiles 220 generated CUTLASS translation
units plus 26 hand-written sources; only 23 of the generated TUs (184 kernel launchers,
``sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_bfloat16, SafeFP4, ...>``) serve the
W4A16 path (``use_w4_group_scaling=True``, bf16 activations, uint8 MXFP4 weights). We take
FlashInfer's own JitSpec (same flags, include paths and sources, produced by
``flashinfer.jit.fused_moe.gen_cutlass_fused_moe_sm90_module``), drop the other 197
generated TUs and the 13 hand-written ``moe_gemm_kernels_<act>_<weight>.cu`` of other dtype
pairs (each only instantiates that pair's ``MoeGemmRunner``), and write the ninja file under
our own module name. Nothing is copied from
FlashInfer: every source compiled is the installed package's own file.

The functions of the dropped TUs stay *undefined* in the .so (the binding still
instantiates every ``CutlassMoeFCRunner`` type: their vtables live in the kept
``cutlass_fused_moe_instantiation.cu``, so no *data* symbol goes missing). tvm-ffi opens modules with
``dlopen(RTLD_LAZY | RTLD_LOCAL)`` and we link with ``-z lazy``, so the module loads and
every function of the W4A16 path works; calling any other dtype path of this module ends
the process with "symbol lookup error". README.md in this folder and docs/flashinfer-moe.md explain the recipe.

``--module fp4_quantization_90`` writes FlashInfer's own, unreduced spec of that module
instead (7 sources; it holds ``block_scale_interleave`` and ``e2m1_and_ufp8sf_scale_to_float``,
the SM90-safe helpers tests/backends/test_gpu_flashinfer_sm90.py uses as oracles).

Usage (env: PYTHONPATH with flashinfer, FLASHINFER_WORKSPACE_BASE, FLASHINFER_CUDA_ARCH_LIST=9.0a)::

    python build_spec.py write [--module NAME]  # writes build.ninja, prints a JSON manifest
    python build_spec.py count                  # TU counts only
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from pathlib import Path

MODULE_NAME = "fused_moe_90_w4a16"
#: the explicit instantiations the W4A16 runner (CutlassMoeFCRunner<__nv_bfloat16, Fp4Type>) calls
W4A16_LAUNCHER = re.compile(r"sm90_generic_mixed_moe_gemm_kernelLauncher<__nv_bfloat16,\s*SafeFP4\b")
INSTANTIATION = re.compile(r"^\s*template void |INSTANTIATE_TMA_WARP_SPECIALIZED_MOE_GEMM\(", re.M)


#: hand-written ``moe_gemm_kernels_<act>_<weight>.cu`` each instantiate one MoeGemmRunner (no
#: virtual functions, so nothing but functions goes missing without them); W4A16 uses bf16_fp4.
MOE_GEMM_RUNNER_TU = re.compile(r"^moe_gemm_kernels_(\w+)\.cu$")
W4A16_RUNNER = "bf16_fp4"


def _classify(sources: list[Path]) -> dict[str, list[Path]]:
    """Split the full source list into what the W4A16 path needs and what it does not."""
    out: dict[str, list[Path]] = {"handwritten": [], "handwritten_dropped": [],
                                  "generated_w4a16": [], "generated_dropped": []}
    for src in sources:
        if not src.name.endswith(".generated.cu"):
            m = MOE_GEMM_RUNNER_TU.match(src.name)
            out["handwritten_dropped" if m and m.group(1) != W4A16_RUNNER else "handwritten"].append(src)
            continue
        text = src.read_text()
        n_all = len(INSTANTIATION.findall(text))
        n_w4a16 = len(W4A16_LAUNCHER.findall(text))
        if n_w4a16 and n_w4a16 != n_all:
            # generate_kernels.py groups by (kind, arch, M tile, mixed) in files of 8: a
            # mixed file would pull in other kernels; keep it but say so.
            print(f"warning: {src.name} mixes W4A16 and other launchers ({n_w4a16}/{n_all})", file=sys.stderr)
        out["generated_w4a16" if n_w4a16 else "generated_dropped"].append(src)
    return out


def _instantiations(paths: list[Path]) -> int:
    return sum(len(INSTANTIATION.findall(p.read_text())) for p in paths)


def reduced_spec():
    """FlashInfer's fused_moe_90 JitSpec with only the W4A16 generated TUs, renamed."""
    from flashinfer.jit.fused_moe import gen_cutlass_fused_moe_sm90_module

    full = gen_cutlass_fused_moe_sm90_module()
    if full.name != "fused_moe_90":
        raise SystemExit(f"unexpected module variant {full.name!r} (H20 prebuilt-D?); refusing")
    parts = _classify(list(full.sources))
    ldflags = list(full.extra_ldflags or []) + ["-Wl,-z,lazy"]
    spec = dataclasses.replace(
        full,
        name=MODULE_NAME,
        sources=parts["handwritten"] + parts["generated_w4a16"],
        extra_ldflags=ldflags,
    )
    return full, spec, parts


def fp4_quantization_spec():
    """FlashInfer's fp4_quantization_90 JitSpec, as FlashInfer builds it."""
    from flashinfer.jit.fp4_quantization import gen_fp4_quantization_sm90_module

    return gen_fp4_quantization_sm90_module()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("action", choices=["write", "count"])
    ap.add_argument("--module", default=MODULE_NAME, choices=[MODULE_NAME, "fp4_quantization_90"])
    args = ap.parse_args()
    if args.module == "fp4_quantization_90":
        spec = fp4_quantization_spec()
        if args.action == "write":
            spec.write_ninja()
        print(json.dumps({"module": spec.name, "build_dir": str(spec.build_dir),
                          "library": str(spec.jit_library_path), "ninja": str(spec.ninja_path),
                          "sources": [str(s) for s in spec.sources]}, indent=1))
        return
    full, spec, parts = reduced_spec()
    manifest = {
        "module": spec.name,
        "build_dir": str(spec.build_dir),
        "library": str(spec.jit_library_path),
        "ninja": str(spec.ninja_path),
        "full_sources": len(full.sources),
        "handwritten_sources": len(parts["handwritten"]) + len(parts["handwritten_dropped"]),
        "handwritten_kept": len(parts["handwritten"]),
        "handwritten_dropped": [p.name for p in parts["handwritten_dropped"]],
        "generated_total": len(parts["generated_w4a16"]) + len(parts["generated_dropped"]),
        "generated_w4a16": len(parts["generated_w4a16"]),
        "instantiations_total": _instantiations(parts["generated_w4a16"] + parts["generated_dropped"]),
        "instantiations_w4a16": _instantiations(parts["generated_w4a16"]),
        "reduced_sources": len(spec.sources),
    }
    if args.action == "write":
        spec.write_ninja()
        manifest["sources"] = [str(s) for s in spec.sources]
    print(json.dumps(manifest, indent=1))


if __name__ == "__main__":
    main()
