#!/usr/bin/env bash
# GPU call 5 (next session, ~5 device minutes): what run 4 left open.
#  1. timing fidelity with the interleaved graph/eager reference (same power state for both), M = 1 … 16384;
#  2. an on-device 5 % injected slowdown under the guard-band gate (run 4's 5 % number came from scaled
#     samples), gated against a fresh run of the default sweep;
#  3. the MoE end-to-end metric (cosine/SQNR vs the bf16 layer) on the GLM-5 and gpt-oss-120b decode problems;
#  0. first: FlashInfer's block_scale_interleave / e2m1_and_ufp8sf_scale_to_float as oracles for our
#     swizzle and dequantize (fp4_quantization_90.so, built on the CPU box in 57 s, carried in .devbundle/fi_moe).
# Needs carry [".devbundle"]. Results under $OUT.
set -uo pipefail
source scripts/device_env.sh
timeout 90 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 2 2>&1 | grep -E "RESULT|oracles"
export FLASHINFER_DISABLE_JIT=1
timeout 120 python3 scripts/timing_fidelity.py --ms 1,64,256,1024,4096,16384 --budget 0.5 > "$OUT/fidelity.log" 2>&1
grep -E "^(bf16|fp8)" "$OUT/fidelity.log" | sed -E 's/ +/ /g' | cut -c1-260
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
B="python3 -m pytest bench -q -rs -p no:cacheprovider $W --fp4-time-budget 0.5"
timeout -s INT 150 $B --fp4-save-baseline "$OUT/aa1.json" > "$OUT/aa1.log" 2>&1; echo "aa1 rc=$?"; tail -1 "$OUT/aa1.log"
timeout -s INT 170 $B --fp4-baseline "$OUT/aa1.json" --fp4-no-confirm --fp4-inject-slowdown 0.05 \
  --fp4-save-baseline "$OUT/inj05.json" > "$OUT/inj05.log" 2>&1; echo "inj05 rc=$?"; tail -1 "$OUT/inj05.log"
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/inj05.json" > "$OUT/inj05_compare.txt" 2>&1; tail -3 "$OUT/inj05_compare.txt"
timeout -s INT 90 python3 -m pytest bench -q -p no:cacheprovider $W --fp4-time-budget 0.05 --fp4-models glm-5,gpt-oss-120b \
  --fp4-batches 64 --fp4-kinds moe --fp4-backends flashinfer-cutlass-moe --fp4-save-baseline "$OUT/moe_e2e.json" > /dev/null 2>&1
python3 - "$OUT/moe_e2e.json" <<'PY' 2>&1 | tail -4
import json, sys
for b in json.load(open(sys.argv[1]))["benchmarks"]:
    e = b["extra_info"]; print(e["problem"], e["tactic"], e["check"], "e2e cosine", e.get("e2e_cosine"), "e2e SQNR", e.get("e2e_sqnr_db"))
PY
