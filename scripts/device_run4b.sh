#!/usr/bin/env bash
# GPU call 4b: `pytest bench --benchmark-compare` on the unchanged stack against the baseline approved in
# call 4a (carried in .devstate/bl, copied over baselines/ on the device only), then two back-to-back A/A
# runs of the default sweep and an 8 % injected slowdown gated against the first. Needs carry
# [".devbundle", ".devstate"]. Results under $OUT.
set -uo pipefail
T0=$(date +%s); DEADLINE=${DEADLINE:-565}
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .devbundle/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH
NVLIB=$(python3 -c "import glob,sys,os; c=[os.path.dirname(f) for p in sys.path if p for f in glob.glob(p+'/nvidia/*/lib/libnvrtc.so.13*')]; print(c[0] if c else '')")
export LD_LIBRARY_PATH=$NVLIB:${LD_LIBRARY_PATH:-}
timeout 60 python3 scripts/fi_moe_smoke.py --so-dir .devbundle/fi_moe --tokens 16 --inter 256 --max-tactics 1 --skip-oracles 2>&1 | grep -E "RESULT" | head -2
export FLASHINFER_DISABLE_JIT=1
BL=.devstate/bl/nvidia-h200/approved.json
[ -f $BL ] && cp $BL baselines/nvidia-h200/approved.json
sha256sum baselines/nvidia-h200/approved.json
W="-W ignore::pytest_benchmark.logger.PytestBenchmarkWarning"
echo "== unchanged-stack compare ($(left)s left)"
timeout -s INT $(( $(left) * 45 / 100 )) python3 -m pytest bench -q -rs -p no:cacheprovider $W --benchmark-compare \
  --fp4-time-budget 0.1 --fp4-min-samples 10 > /tmp/cmp.log 2>&1; echo "compare rc=$? ($(left)s left)"
{ grep -E "^(FAIL|AMBIGUOUS|INVALID|MISSING|NEW) |^FAILED|summary:|Δ of the medians|passed|failed|CUDA context|baseline" /tmp/cmp.log | head -80; } > "$OUT/compare.txt"
tail -5 "$OUT/compare.txt"
B="python3 -m pytest bench -q -rs -p no:cacheprovider $W --fp4-time-budget 0.5"
for r in aa1 aa2; do
  echo "== $r default sweep ($(left)s left)"
  timeout -s INT $(( $(left) * 30 / 100 )) $B --fp4-save-baseline "$OUT/$r.json" > /tmp/$r.log 2>&1; echo "$r rc=$?"; grep -E "passed|failed" /tmp/$r.log | tail -1
done
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/aa2.json" > "$OUT/aa_compare.txt" 2>&1; echo "A/A compare rc=$?"; tail -3 "$OUT/aa_compare.txt"
echo "== injected 8% ($(left)s left)"
timeout -s INT $(( $(left) - 10 )) $B --fp4-baseline "$OUT/aa1.json" --fp4-no-confirm --fp4-inject-slowdown 0.08 \
  --fp4-save-baseline "$OUT/inj08.json" > /tmp/inj.log 2>&1; echo "inj rc=$?"
{ grep -E "^FAILED|passed|failed|summary:|Δ of the medians" /tmp/inj.log | tail -60; } > "$OUT/inj08.txt"; tail -3 "$OUT/inj08.txt"
python3 -m fp4bench compare "$OUT/aa1.json" "$OUT/inj08.json" > "$OUT/inj08_compare.txt" 2>&1; echo "inj compare rc=$?"; tail -3 "$OUT/inj08_compare.txt"
