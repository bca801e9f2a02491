#!/usr/bin/env bash
# GPU call 2: prebuilt SM90 W4A16 fused-MoE module, the committed H200 baseline (comparison rows +
# every MoE tactic for GLM-5 and gpt-oss-120b), the unchanged-stack compare against it, injected
# slowdown, timing fidelity, FlashInfer layout oracles, SM120 cross-compile. Phases run in priority
# order against one deadline; each writes under $OUT (at most 8 files come back).
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-480}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .devbundle/install.sh && export PYTHONPATH=/tmp/site:$PYTHONPATH
NVLIB=$(python3 -c "import glob,sys,os; c=[os.path.dirname(f) for p in sys.path if p for f in glob.glob(p+'/nvidia/*/lib/libnvrtc.so.13*')]; print(c[0] if c else '')")
export LD_LIBRARY_PATH=$NVLIB:${LD_LIBRARY_PATH:-}
echo "nvrtc from: $NVLIB"
# SM120 FP4 GEMM cross-compile in the background (CPU only)
( export FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" MAX_JOBS=12; setsid nohup python3 scripts/fi_cross_compile.py sm120 \
    --json "$OUT/xc_sm120.json" > /tmp/xc_sm120.log 2>&1 & )
# prebuilt module -> FlashInfer's AOT location; tactic counts; layout models vs the real helpers; oracles
timeout 150 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 4 2>&1 | tail -25
export FLASHINFER_DISABLE_JIT=1
B="python3 -m pytest bench -q -rs -p no:cacheprovider"
echo "== baseline candidate ($(left)s left)"
timeout -s INT $(( $(left) * 45 / 100 )) $B --fp4-models glm-5,gpt-oss-120b --fp4-batches 64 --fp4-tactics all \
  --fp4-time-budget 0.15 --fp4-save-baseline "$OUT/candidate.json" > /tmp/cand.log 2>&1; echo "rc=$?"
grep -E "passed|failed|FAIL|Error|error" /tmp/cand.log | tail -15
python3 -m fp4bench baseline approve "$OUT/candidate.json" --root /tmp/bl || python3 -m fp4bench baseline approve "$OUT/candidate.json" --root /tmp/bl --force
echo "== unchanged-stack compare ($(left)s left)"
timeout -s INT $(( $(left) - 60 )) $B --benchmark-compare --fp4-baselines /tmp/bl --fp4-time-budget 0.15 > /tmp/cmp.log 2>&1; echo "compare rc=$?"
grep -E "^(FAIL|AMBIGUOUS|INVALID|MISSING|NEW) |summary:|passed|failed|CUDA" /tmp/cmp.log | tail -30 > "$OUT/compare.txt"; cat "$OUT/compare.txt"
echo "== injected slowdown 8% on the comparison rows ($(left)s left)"
[ $(left) -gt 40 ] && timeout 40 $B --fp4-baseline "$OUT/candidate.json" --fp4-backends torch-bf16,torch-fp8 --fp4-kinds dense,grouped \
  --fp4-no-confirm --fp4-allow-missing --fp4-inject-slowdown 0.08 --fp4-time-budget 0.15 2>&1 | grep -E "^(FAIL|PASS|AMBIGUOUS|INVALID)|summary:" > "$OUT/inject.txt"; cat "$OUT/inject.txt" 2>/dev/null | tail -20
echo "== timing fidelity ($(left)s left)"
[ $(left) -gt 25 ] && timeout $(( $(left) - 10 )) python3 scripts/timing_fidelity.py --ms 1,16,256,4096,16384 --budget 0.25 2>&1 | grep -v Warn
for i in $(seq 1 30); do [ -f "$OUT/xc_sm120.json" ] && break; [ $(left) -lt 5 ] && break; sleep 3; done
cat "$OUT/xc_sm120.json" 2>/dev/null || tail -3 /tmp/xc_sm120.log
cp /tmp/cand.log "$OUT/candidate.log"
