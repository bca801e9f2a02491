#!/usr/bin/env bash
# Build FlashInfer's SM90 fused-MoE module reduced to the BF16 x MXFP4 (W4A16) path
# (--module fused_moe_90_w4a16, default), or FlashInfer's fp4_quantization_90 as is
# (--module fp4_quantization_90: the oracles block_scale_interleave / e2m1_and_ufp8sf_scale_to_float).
# Runs on a CPU-only box (nvcc cross-compiles sm_90a) or on the GPU machine. README.md explains each step.
#
# usage: build.sh --flashinfer-site DIR --work DIR --python PY [--module M] [--jobs N] [--nice N]
#                 [--cuda-home DIR] [--install DIR]
#   --flashinfer-site  the directory that holds the installed flashinfer package (put on PYTHONPATH)
#   --work             scratch directory: FlashInfer workspace, logs, out/<module>.so and its report
#   --python           python with torch and apache-tvm-ffi (FlashInfer's build imports both)
#   --install          also copy out/<module>.so and its report there (then run install_aot.py)
# Output: WORK/out/MODULE.so (stripped) + MODULE.report.json; marker WORK/BUILD_DONE[.MODULE] with
# "ok <seconds> <time>" or "failed rc=N ..."; log WORK/build[.MODULE].log; per-TU CPU seconds
# WORK/tu_times[.MODULE].txt; ninja's own log <build dir>/.ninja_log.
set -euo pipefail

usage() { sed -n '7,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
MODULE=fused_moe_90_w4a16 JOBS=2 NICE=19 FI_SITE="" FIMOE_ROOT="" PY="" INSTALL_DIR=""
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
while [ $# -gt 0 ]; do
  case "$1" in
    --module) MODULE=$2; shift 2 ;;
    --work) FIMOE_ROOT=$2; shift 2 ;;
    --jobs) JOBS=$2; shift 2 ;;
    --nice) NICE=$2; shift 2 ;;
    --flashinfer-site) FI_SITE=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --cuda-home) CUDA_HOME=$2; shift 2 ;;
    --install) INSTALL_DIR=$2; shift 2 ;;
    -h|--help) usage ;;
    *) echo "build.sh: unknown argument $1" >&2; usage ;;
  esac
done
for req in FI_SITE:--flashinfer-site FIMOE_ROOT:--work PY:--python; do
  var=${req%%:*}
  [ -n "${!var}" ] || { echo "build.sh: ${req#*:} is required" >&2; usage; }
done
[ -d "$FI_SITE/flashinfer" ] || { echo "build.sh: no flashinfer package in $FI_SITE" >&2; exit 2; }
case "$MODULE" in fused_moe_90_w4a16|fp4_quantization_90) ;; *) echo "build.sh: unknown --module $MODULE" >&2; exit 2 ;; esac
FIMOE_ROOT=$(mkdir -p "$FIMOE_ROOT" && cd "$FIMOE_ROOT" && pwd)
export CUDA_HOME
export PYTHONPATH="$FI_SITE${PYTHONPATH:+:$PYTHONPATH}"
export FLASHINFER_WORKSPACE_BASE="$FIMOE_ROOT/ws"
export FLASHINFER_CUDA_ARCH_LIST="9.0a"

suffix=""
[ "$MODULE" = fused_moe_90_w4a16 ] || suffix=".$MODULE"
marker="$FIMOE_ROOT/BUILD_DONE$suffix"
mkdir -p "$FIMOE_ROOT/out" "$FIMOE_ROOT/link"
rm -f "$marker"
log="$FIMOE_ROOT/build$suffix.log"
exec > >(tee -a "$log") 2>&1
start=$(date +%s)
finish() {
  local rc=$?
  local status="ok"
  [ $rc -eq 0 ] || status="failed rc=$rc"
  echo "$status $(( $(date +%s) - start ))s $(date -u +%FT%TZ)" > "$marker"
  echo "== $status; marker $marker"
}
trap finish EXIT

# Headers a minimal CUDA toolkit (this CPU box: nvcc + cudart only) lacks, and libnvrtc.so.13
# (the MoE binding links -lnvrtc for DeepGEMM's NVRTC JIT). A full toolkit has them all; else
# take them from the CUDA 13.0 PyPI wheels (headers; the .so only to link against).
extra_inc=""
need_wheels=()
[ -f "$CUDA_HOME/include/nvrtc.h" ] || need_wheels+=("nvidia-cuda-nvrtc>=13.0,<13.1")
[ -f "$CUDA_HOME/include/cublasLt.h" ] || need_wheels+=("nvidia-cublas>=13.0,<13.1")
[ -f "$CUDA_HOME/include/curand_kernel.h" ] || need_wheels+=("nvidia-curand>=10.4,<10.5")
if [ ${#need_wheels[@]} -gt 0 ]; then
  cudax="$FIMOE_ROOT/cudax/nvidia/cu13"
  if [ ! -f "$FIMOE_ROOT/cudax/.done" ]; then
    mkdir -p "$FIMOE_ROOT/wheels"
    "$PY" -m pip download -q --no-deps -d "$FIMOE_ROOT/wheels" "${need_wheels[@]}"
    "$PY" - "$FIMOE_ROOT" <<'PYEOF'
import pathlib, sys, zipfile
root = pathlib.Path(sys.argv[1])
for whl in sorted((root / "wheels").glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if "/include/" in n or "/lib/libnvrtc.so" in n]
        z.extractall(root / "cudax", names)
(root / "cudax" / ".done").touch()
PYEOF
    rm -rf "$FIMOE_ROOT/wheels"
  fi
  extra_inc="-I$cudax/include"
  [ -f "$cudax/lib/libnvrtc.so.13" ] && ln -sf "$cudax/lib/libnvrtc.so.13" "$FIMOE_ROOT/link/libnvrtc.so"
fi
# libcuda.so.1 is the driver: absent on a GPU-less box. Link against an empty stub with the
# driver's SONAME; the real driver resolves the cu* symbols at load time on the GPU machine.
if ! ls "$CUDA_HOME"/lib64/stubs/libcuda.so >/dev/null 2>&1 && ! ldconfig -p | grep -q 'libcuda.so.1 '; then
  echo '' | cc -x c -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$FIMOE_ROOT/link/libcuda.so" -
fi
export FLASHINFER_EXTRA_CUDAFLAGS="$extra_inc"
export FLASHINFER_EXTRA_CFLAGS="$extra_inc"
export FLASHINFER_EXTRA_LDFLAGS="-L$FIMOE_ROOT/link"
# Per-TU wall / user / sys seconds and peak RSS (KB) via a compiler launcher (FlashInfer's own
# hook), so a contended 2-core box still yields CPU seconds to extrapolate from.
times="$FIMOE_ROOT/tu_times$suffix.txt"
export FLASHINFER_NVCC_LAUNCHER="/usr/bin/time -a -o $times -f '%e %U %S %M %C'"
export FLASHINFER_CXX_LAUNCHER="$FLASHINFER_NVCC_LAUNCHER"

echo "== writing spec for $MODULE ($(date -u +%T))"
"$PY" "$here/build_spec.py" write --module "$MODULE" > "$FIMOE_ROOT/out/$MODULE.build.json"
field() { "$PY" -c "import json,sys;print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$FIMOE_ROOT/out/$MODULE.build.json" "$1"; }
build_dir=$(field build_dir)
lib=$(field library)

echo "== ninja -j$JOBS (nice $NICE) in $build_dir ($(date -u +%T))"
nice -n "$NICE" ninja -C "$build_dir" -f "$build_dir/build.ninja" -j "$JOBS" -k 0

echo "== linked $(du -h "$lib" | cut -f1) $lib"
so="$FIMOE_ROOT/out/$MODULE.so"
cp "$lib" "$so"
strip --strip-unneeded "$so"
"$PY" "$here/inspect_so.py" "$so" "$build_dir/.ninja_log" "$times" > "$FIMOE_ROOT/out/$MODULE.report.json" \
  || echo "warning: inspection failed"
if [ -n "$INSTALL_DIR" ]; then
  mkdir -p "$INSTALL_DIR"
  cp "$so" "$FIMOE_ROOT/out/$MODULE.report.json" "$INSTALL_DIR/"
  echo "== installed into $INSTALL_DIR"
fi
ls -la "$FIMOE_ROOT/out"
