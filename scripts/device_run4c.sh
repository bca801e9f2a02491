#!/usr/bin/env bash
# GPU call 4c: two back-to-back A/A runs of the default sweep (~100 s each: GLM-5 batches 1/64/512, every
# available backend's default tactic), their compare, and an 8 % injected slowdown gated against the first
# (~110 s). Needs carry [".devbundle"]. Results under $OUT.
set -uo pipefail
source scripts/device_env.sh
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 4 --inter 128 --max-tactics 1 --skip-oracles 2>&1 | grep RESULT
export FLASHINFER_DISABLE_JIT=1
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
B="python3 -m pytest bench -q -rs -p no:cacheprovider $W --fp4-time-budget 0.5"
for r in aa1 aa2; do timeout -s INT 215 $B --fp4-save-baseline "$OUT/$r.json" > "$OUT/$r.log" 2>&1; echo "$r rc=$?"; tail -1 "$OUT/$r.log"; done
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/aa2.json" > "$OUT/aa_compare.txt" 2>&1; echo "A/A rc=$?"; tail -3 "$OUT/aa_compare.txt"
timeout -s INT 170 $B --fp4-baseline "$OUT/aa1.json" --fp4-no-confirm --fp4-inject-slowdown 0.08 \
  --fp4-save-baseline "$OUT/inj08.json" > "$OUT/inj08.log" 2>&1; echo "inj rc=$?"; tail -1 "$OUT/inj08.log"
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/inj08.json" > "$OUT/inj08_compare.txt" 2>&1; echo "rc=$?"; tail -3 "$OUT/inj08_compare.txt"
