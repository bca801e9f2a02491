#!/usr/bin/env bash
# GPU call 8 (run 8): a live back-to-back A/A of the default sweep under the current gate (guard band, re-measure
# of suspects): aa3 saved, aa4 gated against it in the same session, then `fp4bench compare`.
# Needs carry [".devbundle"]. At most 8 files under $OUT.
set -uo pipefail
source scripts/device_env.sh
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT"
export FLASHINFER_DISABLE_JIT=1
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
B="python3 -m pytest bench -q -rs -p no:cacheprovider $W --fp4-time-budget 0.5"
timeout -s INT 200 $B --fp4-save-baseline "$OUT/aa3.json" > /tmp/aa3.log 2>&1; echo "aa3 rc=$?"; tail -1 /tmp/aa3.log
timeout -s INT 230 $B --fp4-baseline "$OUT/aa3.json" --fp4-save-baseline "$OUT/aa4.json" > "$OUT/aa4.log" 2>&1; echo "aa4 rc=$?"; tail -1 "$OUT/aa4.log"
python3 -m fp4bench compare "$OUT/aa3.json" "$OUT/aa4.json" > "$OUT/aa34_compare.txt" 2>&1; echo "compare rc=$?"; tail -3 "$OUT/aa34_compare.txt"
