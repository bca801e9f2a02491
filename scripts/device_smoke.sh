#!/usr/bin/env bash
# First call on the GPU machine: environment, FlashInfer import, backend availability,
# timing fidelity, and a quick bench of the comparison rows. Results under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
python3 -c "import sys, torch, pytest_benchmark, scipy; print(sys.version.split()[0], torch.__version__, torch.version.cuda, 'pytest-benchmark', pytest_benchmark.__version__, 'scipy', scipy.__version__)"
python3 -c "import pynvml; print('pynvml ok')" || echo "no pynvml"
if [ -d .devbundle ]; then bash .devbundle/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; fi
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
python3 -m fp4bench env 2>&1 | tee "$OUT/env.txt"
# cross-compile the Blackwell FP4 GEMM modules in the background while the GPU is measured
export FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" MAX_JOBS=7
for t in sm100 sm120; do
  setsid nohup python3 scripts/fi_cross_compile.py $t --json "$OUT/xc_$t.json" > /tmp/xc_$t.log 2>&1 &
done
unset FLASHINFER_CUDA_ARCH_LIST
timeout 200 python3 scripts/timing_fidelity.py --budget 0.5 2>&1 | tee "$OUT/fidelity.log"
timeout 240 python3 -m pytest bench -q -rs -p no:cacheprovider --fp4-batches 1,64 --fp4-kinds dense,grouped \
  --fp4-time-budget 0.5 --benchmark-json "$OUT/smoke.json" 2>&1 | tail -60 | tee "$OUT/bench.log"
for i in $(seq 1 36); do [ -f "$OUT/xc_sm100.json" ] && [ -f "$OUT/xc_sm120.json" ] && break; sleep 5; done
tail -3 /tmp/xc_sm100.log /tmp/xc_sm120.log
cat "$OUT"/xc_*.json 2>/dev/null
