#!/usr/bin/env bash
# GPU call 4a: the H200 baseline candidate (comparison rows + every SM90 W4A16 MoE tactic for GLM-5 and
# gpt-oss-120b at decode batch 64), approved by the project's own command into .devstate/bl (git-ignored;
# call 4b gates against it), timing fidelity against a sustained-load profiler reference, and the SM120
# FlashInfer FP4 GEMM cross-compile in the background. Needs carry [".devbundle"]. Results under $OUT.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-565}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
source scripts/device_env.sh
( export FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" MAX_JOBS=12; setsid nohup python3 scripts/fi_cross_compile.py sm120 \
    --json "$OUT/xc_sm120.json" > /tmp/xc_sm120.log 2>&1 & )
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv
  timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT|tactics|error" | head -5
  python3 -m fp4bench env; } > "$OUT/env.txt" 2>&1; tail -3 "$OUT/env.txt"
export FLASHINFER_DISABLE_JIT=1
echo "== baseline candidate ($(left)s left)"
timeout -s INT $(( $(left) - 110 )) python3 -m pytest bench -q -rs -p no:cacheprovider -W ignore::pytest_benchmark.logger.PytestBenchmarkWarning \
  --fp4-time-budget 0.1 --fp4-min-samples 10 --fp4-models glm-5,gpt-oss-120b --fp4-batches 64 --fp4-tactics all \
  --fp4-save-baseline "$OUT/candidate.json" > /tmp/candidate.log 2>&1; echo "candidate rc=$? ($(left)s left)"
{ grep -E "^(FAILED|ERROR)|passed|failed|CUDA context|Error" /tmp/candidate.log | head -40; echo ...; tail -60 /tmp/candidate.log; } > "$OUT/candidate.txt"
grep -E "passed|failed|CUDA context" /tmp/candidate.log | tail -3
mkdir -p .devstate && python3 -m fp4bench baseline approve "$OUT/candidate.json" --root .devstate/bl \
  && cp .devstate/bl/nvidia-h200/approved.json "$OUT/approved.json"
echo "== fidelity ($(left)s left)"
timeout $(( $(left) - 15 )) python3 scripts/timing_fidelity.py --ms 1,16,64,256,1024,4096,16384 --budget 0.6 > "$OUT/fidelity.log" 2>&1
grep -E "^(bf16|fp8)" "$OUT/fidelity.log" | cut -c1-120
while [ ! -f "$OUT/xc_sm120.json" ] && [ "$(left)" -gt 5 ]; do sleep 2; done
cat "$OUT/xc_sm120.json" 2>/dev/null || { echo "sm120 not finished:"; tail -c 400 /tmp/xc_sm120.log; }
