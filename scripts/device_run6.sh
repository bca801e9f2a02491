#!/usr/bin/env bash
# GPU call 6 (run again as call 7 with --rounds 0 and the MoE module installed): timer fidelity with fp4bench's own timer and the eager profiler in adjacent, alternating
# windows (run 5 showed the clock moves up to 25 % between windows a second apart at M >= 1024),
# and a live A/A of the default sweep gated (with re-measure of suspects) against run 5's aa1.
# Needs carry [".devbundle", ".devstate"] with .devstate/run5/aa1.json. At most 8 files under $OUT.
set -uo pipefail
source scripts/device_env.sh
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT"
export FLASHINFER_DISABLE_JIT=1
timeout 200 python3 scripts/timing_fidelity.py --ms 1,16,64,256,1024,4096,16384 --budget 0.5 --rounds 0 > "$OUT/fidelity.log" 2>&1
grep -E "^(bf16|fp8)" "$OUT/fidelity.log" | sed -E 's/ +/ /g'
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
timeout -s INT 200 python3 -m pytest bench -q -rs -p no:cacheprovider $W --fp4-time-budget 0.5 \
  --fp4-baseline .devstate/run5/aa1.json --fp4-save-baseline "$OUT/aa2.json" > "$OUT/aa2.log" 2>&1; echo "aa2 rc=$?"; tail -1 "$OUT/aa2.log"
python3 -m fp4bench compare .devstate/run5/aa1.json "$OUT/aa2.json" > "$OUT/aa2_compare.txt" 2>&1; echo "compare rc=$?"; tail -3 "$OUT/aa2_compare.txt"
ls "$OUT"
