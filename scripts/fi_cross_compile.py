"""Cross-compile FlashInfer's SM100 and SM120 CUTLASS FP4 GEMM modules on a non-Blackwell GPU
machine (an H200) and report build time and tactic count (host-only ``fp4_gemm_tactic_num``).

Usage: FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" python scripts/fi_cross_compile.py sm100|sm120 [--json PATH]
Run the two targets as two processes to build them concurrently. Nothing is launched on the GPU:
loading a cross-compiled module and querying its tactic count is host code (backends.md §3.1).
"""

from __future__ import annotations

import argparse
import json
import os
import time


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", choices=("sm100", "sm120"))
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    os.environ.setdefault("FLASHINFER_CUDA_ARCH_LIST", "10.0a 12.0f")
    import flashinfer
    from flashinfer.jit.gemm import core

    gen = {"sm100": core.gen_gemm_sm100_module_cutlass_fp4, "sm120": core.gen_gemm_sm120_module_cutlass_fp4}[args.target]
    t0 = time.time()
    spec = gen()
    mod = spec.build_and_load()
    build_s = time.time() - t0
    n = int(mod.fp4_gemm_tactic_num())
    rec = {"target": args.target, "flashinfer": flashinfer.__version__, "arch_list": os.environ["FLASHINFER_CUDA_ARCH_LIST"],
           "max_jobs": os.environ.get("MAX_JOBS"), "build_s": round(build_s, 1), "tactics": n,
           "module": getattr(spec, "name", None), "sources": len(getattr(spec, "sources", []) or [])}
    print(json.dumps(rec), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f)


if __name__ == "__main__":
    main()
