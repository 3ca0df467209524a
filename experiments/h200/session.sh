#!/usr/bin/env bash
# One device call, several experiments in priority order, each under its own time limit; everything lands in
# $OUT/results.tar.gz (the device returns at most 8 files) plus per-step logs.
#   LETHE_GIT_SHA=<sha> bash experiments/h200/session.sh "pc,sakana,fla" <seconds-total>
# flacmp (experiments/gdn/fla_compare.py, fla vs our GDN kernels) takes extra arguments from $FLACMP_ARGS.
set -u
steps=${1:-pc,sakana,fla}
budget=${2:-560}
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
mkdir -p $OUT/r
# Sandbox I/O (reference and candidate arrays) through memory when /dev/shm is large enough.
shm_free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
if [ "${shm_free:-0}" -gt 16000000 ]; then export TMPDIR=/dev/shm; fi
echo "TMPDIR=${TMPDIR:-/tmp} (shm free ${shm_free:-?} KiB)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/r/gpu.txt 2>&1
for step in ${steps//,/ }; do
  t=$(left); [ "$t" -gt 30 ] || { echo "skip $step: no time left"; continue; }
  echo "== $step ($t s left)"
  case $step in
    pc) timeout $((t-10)) python3 experiments/h200/suites.py --out $OUT/r/suites --suites positive_control > $OUT/r/pc.log 2>&1 ;;
    rt) timeout $((t-10)) python3 experiments/h200/suites.py --out $OUT/r/suites --suites red_team > $OUT/r/rt.log 2>&1 ;;
    sakana) w=${SAKANA_WORK:-.build/sakana}; mkdir -p $w
            timeout $((t-10)) python3 experiments/foreign/sakana_h200.py --out $OUT/r/sakana --work $w \
              --levels ${SAKANA_LEVELS:-1,2} --limit ${SAKANA_LIMIT:-0} --budget-s ${SAKANA_BUDGET:-0} \
              --phases ${SAKANA_PHASES:-compile,audit,kb,scaling} --workers 16 --scaling ${SAKANA_SCALING:-1,2,4} \
              --scaling-kernels ${SAKANA_SCALING_KERNELS:-8} > $OUT/r/sakana.log 2>&1
            cp $w/*.jsonl $OUT/r/sakana/ 2>/dev/null ;;
    fla) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 timeout $((t-10)) python3 experiments/fla640/run.py \
              --out $OUT/r/fla640 --budget-s $((t-40)) > $OUT/r/fla640.log 2>&1 ;;
    flacmp) { [ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl; } \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=/tmp/lethe-flacmp-triton-cache timeout $((t-10)) \
              python3 experiments/gdn/fla_compare.py --out $OUT/r/flacmp --budget-s $((t-40)) ${FLACMP_ARGS:-} > $OUT/r/flacmp.log 2>&1 ;;
  esac
  echo "   rc=$? after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/r/*.log 2>/dev/null | tail -n 8
done
tar -czf $OUT/results.tar.gz -C $OUT r && rm -rf $OUT/r
ls -la $OUT
