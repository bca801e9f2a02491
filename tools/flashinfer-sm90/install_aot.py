#!/usr/bin/env python3
"""Install prebuilt SM90 modules where FlashInfer loads AOT modules from, so it never JIT-builds them.

FlashInfer's ``JitSpec`` loads ``<flashinfer>/data/aot/<name>/<name>.so`` without building when
that file exists (flashinfer 0.7.2.post1, ``flashinfer/jit/env.py`` lines 238 and 296-298:
``FLASHINFER_AOT_DIR`` and the fallback path of ``get_aot_artifacts``). ``fused_moe_90_w4a16.so`` (build.sh's
default module) is installed under FlashInfer's own name ``fused_moe_90``, so the unmodified
``flashinfer.fused_moe.cutlass_fused_moe`` picks it up. Run with the python that serves the
benchmarks; then set ``FLASHINFER_DISABLE_JIT=1`` so a missing module is an error, not a
half-hour compile.

    python install_aot.py SO_DIR      # SO_DIR: build.sh's WORK/out or its --install folder
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

#: built file -> FlashInfer's module name
MODULES = {"fused_moe_90_w4a16.so": "fused_moe_90", "fp4_quantization_90.so": "fp4_quantization_90"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("so_dir", type=Path, help="folder with fused_moe_90_w4a16.so and/or fp4_quantization_90.so")
    args = ap.parse_args()
    found = {f: n for f, n in MODULES.items() if (args.so_dir / f).is_file()}
    if not found:
        print(f"install_aot.py: none of {', '.join(MODULES)} in {args.so_dir}", file=sys.stderr)
        return 2
    import flashinfer.jit.env as env

    for f, name in found.items():
        dst = Path(env.FLASHINFER_AOT_DIR) / name / f"{name}.so"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(args.so_dir / f, dst)
        print(f"{args.so_dir / f} -> {dst}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
