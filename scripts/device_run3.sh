#!/usr/bin/env bash
# GPU call 3 (last ~4 minutes of device time): the H200 baseline candidate with every SM90 W4A16 MoE
# tactic for GLM-5 and gpt-oss-120b plus the bf16/fp8 comparison rows, after chunked quantization fixed
# the out-of-memory of call 2. SIGINT at the deadline so pytest-benchmark still writes the JSON.
set -uo pipefail
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .devbundle/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH
NVLIB=$(python3 -c "import glob,sys,os; c=[os.path.dirname(f) for p in sys.path if p for f in glob.glob(p+'/nvidia/*/lib/libnvrtc.so.13*')]; print(c[0] if c else '')")
export LD_LIBRARY_PATH=$NVLIB:${LD_LIBRARY_PATH:-}
timeout 30 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 4 --inter 128 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT|tactics:"
export FLASHINFER_DISABLE_JIT=1
timeout -s INT ${BUDGET:-110} python3 -m pytest bench -q -rs -p no:cacheprovider --fp4-time-budget 0.03 --fp4-min-samples 10 \
  --fp4-models glm-5,gpt-oss-120b --fp4-batches 16 --fp4-tactics all --fp4-backends torch-bf16,torch-fp8,flashinfer-cutlass-moe \
  --fp4-save-baseline "$OUT/candidate.json" > "$OUT/candidate.log" 2>&1; echo "rc=$?"
grep -E "passed|failed|^FAILED|Error|CUDA context" "$OUT/candidate.log" | tail -12
