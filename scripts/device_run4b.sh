#!/usr/bin/env bash
# GPU call 4b: `pytest bench --benchmark-compare` on the unchanged stack against the baseline approved in
# call 4a (carried in .devstate/bl, copied over baselines/ on the device only). ~260 s for 418 benchmarks.
# Needs carry [".devbundle", ".devstate"]. Results under $OUT. (Call 4c: A/A and injected slowdown.)
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-565}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
source scripts/device_env.sh
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT" | head -2
export FLASHINFER_DISABLE_JIT=1
BL=.devstate/bl/nvidia-h200/approved.json
[ -f $BL ] && cp $BL baselines/nvidia-h200/approved.json
sha256sum baselines/nvidia-h200/approved.json
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
echo "== unchanged-stack compare ($(left)s left)"
timeout -s INT $(( $(left) - 20 )) python3 -m pytest bench -q -rs -p no:cacheprovider $W --benchmark-compare \
  --fp4-time-budget 0.1 --fp4-min-samples 10 > /tmp/cmp.log 2>&1; echo "compare rc=$? ($(left)s left)"
{ grep -E "^(FAIL|AMBIGUOUS|INVALID|MISSING|NEW) |^FAILED|summary:|Δ of the medians|passed|failed|CUDA context|baseline" /tmp/cmp.log | head -80; } > "$OUT/compare.txt"
tail -5 "$OUT/compare.txt"
