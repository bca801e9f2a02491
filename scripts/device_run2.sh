#!/usr/bin/env bash
# GPU call 2 (about 5 minutes of device time were left): prebuilt SM90 W4A16 fused-MoE module (tactic
# counts, layout models vs FlashInfer's real interleave helpers), timing fidelity of the CUPTI timer,
# the H200 baseline candidate (comparison rows + every MoE tactic for GLM-5 and gpt-oss-120b) and the
# unchanged-stack compare against it, SM120 cross-compile in the background. One deadline; pytest phases
# are stopped with SIGINT so pytest-benchmark still writes its JSON.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-300}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .devbundle/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH
NVLIB=$(python3 -c "import glob,sys,os; c=[os.path.dirname(f) for p in sys.path if p for f in glob.glob(p+'/nvidia/*/lib/libnvrtc.so.13*')]; print(c[0] if c else '')")
export LD_LIBRARY_PATH=$NVLIB:${LD_LIBRARY_PATH:-}
( export FLASHINFER_CUDA_ARCH_LIST="10.0a 12.0f" MAX_JOBS=10; setsid nohup python3 scripts/fi_cross_compile.py sm120 \
    --json "$OUT/xc_sm120.json" > /tmp/xc_sm120.log 2>&1 & )
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 2 --skip-oracles 2>&1 | tail -14
export FLASHINFER_DISABLE_JIT=1
echo "== fidelity ($(left)s left)"
timeout 40 python3 scripts/timing_fidelity.py --ms 1,64,1024,16384 --budget 0.15 2>&1 | grep -E "^(bf16|fp8)"
B="python3 -m pytest bench -q -rs -p no:cacheprovider --fp4-time-budget 0.05 --fp4-min-samples 10"
echo "== baseline candidate ($(left)s left)"
timeout -s INT $(( $(left) * 55 / 100 )) $B --fp4-models glm-5,gpt-oss-120b --fp4-batches 64 --fp4-tactics all \
  --fp4-save-baseline "$OUT/candidate.json" > "$OUT/candidate.log" 2>&1; echo "rc=$?"
grep -E "passed|failed|^FAILED|Error" "$OUT/candidate.log" | tail -8
python3 -m fp4bench baseline approve "$OUT/candidate.json" --root /tmp/bl || python3 -m fp4bench baseline approve "$OUT/candidate.json" --root /tmp/bl --force
echo "== unchanged-stack compare ($(left)s left)"
timeout -s INT $(( $(left) - 8 )) $B --benchmark-compare --fp4-baselines /tmp/bl > /tmp/cmp.log 2>&1; echo "compare rc=$?"
grep -E "^(FAIL|AMBIGUOUS|INVALID|MISSING|NEW) |summary:|passed|failed|CUDA" /tmp/cmp.log | tail -40 > "$OUT/compare.txt"; tail -12 "$OUT/compare.txt"
cat "$OUT/xc_sm120.json" 2>/dev/null || tail -c 300 /tmp/xc_sm120.log
