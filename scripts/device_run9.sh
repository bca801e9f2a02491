#!/usr/bin/env bash
# GPU call 9: the bare `pytest bench --benchmark-compare` against the committed baseline
# (baselines/nvidia-h200/approved.json, run 4, session 2) on a later machine lease, unchanged stack;
# also shows the GPU UUID the fingerprint now records. Needs carry [".devbundle"]. ≤ 8 files under $OUT.
set -uo pipefail
source scripts/device_env.sh
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT"
export FLASHINFER_DISABLE_JIT=1
python3 -c "from fp4bench.env import collect_fingerprint as c; f=c(); print('gpu_uuid', f.gpu_uuid)"
sha256sum baselines/nvidia-h200/approved.json | cut -c1-16
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
timeout -s INT ${T:-340} python3 -m pytest bench -q -rs -p no:cacheprovider $W --benchmark-compare \
  --fp4-time-budget 0.1 --fp4-min-samples 10 --fp4-save-baseline "$OUT/cmp9.json" > "$OUT/cmp9.log" 2>&1; echo "compare rc=$?"
grep -E "^(FAIL|MISSING) |^FAILED|summary:|Δ of the medians|passed|failed|what changed|policy:" "$OUT/cmp9.log" | cut -c1-250 | tail -12
