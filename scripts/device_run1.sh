#!/usr/bin/env bash
# GPU call 1: environment, FlashInfer import + Blackwell cross-compiles (background), timing fidelity,
# A/A runs of the comparison rows, injected-slowdown run, fault-injection sweep. Results under $OUT.
set -uo pipefail
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
python3 -c "import sys, torch, pytest_benchmark, scipy; print(sys.version.split()[0], torch.__version__, torch.version.cuda, 'pytest-benchmark', pytest_benchmark.__version__, 'scipy', scipy.__version__)"
if [ -d .devbundle ]; then bash .devbundle/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH; fi
python3 -c "import flashinfer; print('flashinfer', flashinfer.__version__)" 2>&1 | tail -1
python3 -m fp4bench env 2>&1 | tee "$OUT/env.txt"
export FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" MAX_JOBS=6
for t in sm100 sm120; do
  setsid nohup python3 scripts/fi_cross_compile.py $t --json "$OUT/xc_$t.json" > /tmp/xc_$t.log 2>&1 &
done
unset FLASHINFER_CUDA_ARCH_LIST MAX_JOBS
timeout 150 python3 scripts/timing_fidelity.py --budget 0.4 2>&1 | tee "$OUT/fidelity.log"
B="python3 -m pytest bench -q -rs -p no:cacheprovider --fp4-backends torch-bf16,torch-fp8 --fp4-kinds dense,grouped --fp4-time-budget 0.5"
timeout 150 $B --fp4-save-baseline "$OUT/aa1.json" 2>&1 | tail -25 > "$OUT/aa1.log"; tail -4 "$OUT/aa1.log"
timeout 150 $B --fp4-save-baseline "$OUT/aa2.json" 2>&1 | tail -25 > "$OUT/aa2.log"; tail -4 "$OUT/aa2.log"
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/aa2.json" > "$OUT/aa_compare.txt" 2>&1; echo "A/A compare rc=$?"; tail -45 "$OUT/aa_compare.txt"
timeout 150 $B --fp4-baseline "$OUT/aa1.json" --fp4-no-confirm --fp4-inject-slowdown 0.05 \
  --benchmark-json "$OUT/inject05.json" 2>&1 | grep -E "FAIL|passed|failed" | tail -40 > "$OUT/inject05.log"; tail -3 "$OUT/inject05.log"
timeout 100 python3 -m pytest bench -q -p no:cacheprovider --fp4-plugin fp4bench.testing.faults --fp4-backends fault-zero-band \
  --fp4-full --fp4-kinds dense --fp4-batches 1 --benchmark-disable 2>&1 | grep -E "all-zero|passed|failed" | tail -40 > "$OUT/fault.log"; tail -3 "$OUT/fault.log"
for i in $(seq 1 40); do [ -f "$OUT/xc_sm100.json" ] && [ -f "$OUT/xc_sm120.json" ] && break; sleep 5; done
tail -2 /tmp/xc_sm100.log /tmp/xc_sm120.log; cat "$OUT"/xc_*.json 2>/dev/null
