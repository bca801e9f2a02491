# Sourced by the device_run*.sh scripts: fp4bench on PYTHONPATH, the carried FlashInfer bundle installed
# into /tmp/site, and the pip-installed NVRTC on the loader path (FlashInfer's JIT and the MoE module need it).
export PYTHONPATH=$PWD/src:${PYTHONPATH:-} PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
bash .devbundle/install.sh >/dev/null && export PYTHONPATH=/tmp/site:$PYTHONPATH
NVLIB=$(python3 -c "import glob,sys,os; c=[os.path.dirname(f) for p in sys.path if p for f in glob.glob(p+'/nvidia/*/lib/libnvrtc.so.13*')]; print(c[0] if c else '')")
export LD_LIBRARY_PATH=$NVLIB:${LD_LIBRARY_PATH:-}
