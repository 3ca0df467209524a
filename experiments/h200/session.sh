#!/usr/bin/env bash
# One device call, several experiments in priority order, each under its own time limit; everything lands in
# $OUT/results.tar.gz (the device returns at most 8 files) plus per-step logs.
#   LETHE_GIT_SHA=<sha> bash experiments/h200/session.sh "pc,sakana,fla" <seconds-total>
# flacmp (experiments/gdn/fla_compare.py, fla vs our GDN kernels) takes extra arguments from $FLACMP_ARGS.
# fla640ctl: the K=128 control pair of the #640 verifier run; ladder_native: the ladder's end-to-end rung on the
# native backend (LADDER_ARGS: extra arguments, several runs separated by ';'); profile: experiments/native/kernel_profile.py (extra arguments from $PROFILE_ARGS). The last two need
# the CuTe DSL on PYTHONPATH for their native rows.
# gputests: the GPU tests of the native backends and of the Triton forward's launch options
# (tests/kernels/gdn_native/test_native_gpu.py, tests/kernels/gdn/test_gdn_triton_gpu.py), all the step's time for them; sweep: experiments/gdn/triton_launch_sweep.py (extra arguments from $SWEEP_ARGS).
# A step may carry its own cap in seconds, "step:cap" (e.g. "sakana_bg,fla640q:150,native:100,sakana,flacmp").
# sakana_bg starts the sakana compile phase in the background (CPU only: nvcc on 16 workers) so that GPU steps
# run meanwhile; the next sakana step waits for it. native needs the CuTe DSL on PYTHONPATH (/opt/cute: see
# experiments/h200/cute_unpack.sh; without it the GPU tests skip and the native stages record an import error).
set -u
steps=${1:-pc,sakana,fla}
budget=${2:-560}
# an incoming PYTHONPATH is kept (e.g. the CuTe DSL unpacked under /opt/cute, for fla_compare.py --impls native)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}
start=$(date +%s)
left() { echo $(( budget - ($(date +%s) - start) )); }
mkdir -p $OUT/r
# Sandbox I/O (reference and candidate arrays) through memory when /dev/shm is large enough.
shm_free=$(df -Pk /dev/shm 2>/dev/null | awk 'NR==2 {print $4}')
if [ "${shm_free:-0}" -gt 16000000 ]; then export TMPDIR=/dev/shm; fi
echo "TMPDIR=${TMPDIR:-/tmp} (shm free ${shm_free:-?} KiB)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > $OUT/r/gpu.txt 2>&1
bg_pid=""
for spec in ${steps//,/ }; do
  step=${spec%%:*}; cap=${spec#*:}; [ "$cap" = "$spec" ] && cap=0
  case $cap in ''|*[!0-9]*) echo "bad cap in '$spec' (seconds expected): ignored"; cap=0 ;; esac
  t=$(left); [ "$cap" -gt 0 ] && [ "$cap" -lt "$t" ] && t=$cap
  [ "$t" -gt 30 ] || { echo "skip $step: no time left"; continue; }
  echo "== $step ($t s for it)"; step_t0=$(date +%s)
  case $step in
    pc) timeout $((t-10)) python3 experiments/h200/suites.py --out $OUT/r/suites --suites positive_control > $OUT/r/pc.log 2>&1 ;;
    rt) timeout $((t-10)) python3 experiments/h200/suites.py --out $OUT/r/suites --suites red_team > $OUT/r/rt.log 2>&1 ;;
    sakana_bg) w=${SAKANA_WORK:-.build/sakana}; mkdir -p $w $OUT/r
            timeout $((t-20)) python3 experiments/foreign/sakana_h200.py --out $OUT/r/sakana_compile --work $w \
              --levels ${SAKANA_LEVELS:-1,2} --limit ${SAKANA_LIMIT:-0} --phases compile --workers 16 \
              > $OUT/r/sakana_compile.log 2>&1 &
            bg_pid=$! ;;
    fla640q) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 timeout $((t-10)) python3 experiments/fla640/run.py \
              --quick --out $OUT/r/fla640 --budget-s $((t-40)) > $OUT/r/fla640.log 2>&1 ;;
    native) timeout $((t/2)) python3 -m pytest -q -m gpu -p no:cacheprovider tests/kernels/gdn_native/test_native_gpu.py \
              > $OUT/r/native_pytest.log 2>&1
            t=$(left); [ "$cap" -gt 0 ] && { c=$(( cap - ($(date +%s) - step_t0) )); [ "$c" -lt "$t" ] && t=$c; }
            [ "$t" -gt 20 ] && timeout $((t - 10)) python3 experiments/native/bench.py --out $OUT/r/native \
              --merge results/native/bench.json --stages ${NATIVE_STAGES:-k2_correctness,k2_timing,backward_timing} \
              --budget-s $((t > 40 ? t - 30 : 10)) > $OUT/r/native.log 2>&1 ;;
    sakana) w=${SAKANA_WORK:-.build/sakana}; mkdir -p $w
            [ -n "$bg_pid" ] && { echo "   waiting for the background compile"; wait $bg_pid; bg_pid=""; }
            t=$(left); [ "$cap" -gt 0 ] && [ "$cap" -lt "$t" ] && t=$cap
            [ "$t" -gt 30 ] || { echo "skip $step: no time left after the background compile"; continue; }
            timeout $((t-10)) python3 experiments/foreign/sakana_h200.py --out $OUT/r/sakana --work $w \
              --levels ${SAKANA_LEVELS:-1,2} --limit ${SAKANA_LIMIT:-0} --budget-s ${SAKANA_BUDGET:-0} \
              --phases ${SAKANA_PHASES:-compile,audit,kb,scaling} --workers 16 --scaling ${SAKANA_SCALING:-1,2,4} \
              --scaling-kernels ${SAKANA_SCALING_KERNELS:-8} > $OUT/r/sakana.log 2>&1
            cp $w/*.jsonl $OUT/r/sakana/ 2>/dev/null ;;
    fla640ctl) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 timeout $((t-10)) python3 experiments/fla640/run.py \
              --quick --only-verifier --task 'verify fla640/gdn/K128/bfloat16' --ignore-estimates \
              --verify-timeout-s $((t-30)) --out $OUT/r/fla640ctl --budget-s $((t-20)) > $OUT/r/fla640ctl.log 2>&1 ;;
    gputests) timeout $((t-5)) python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/kernels/gdn_native/test_native_gpu.py \
              tests/kernels/gdn/test_gdn_triton_gpu.py > $OUT/r/gpu_tests.log 2>&1 ;;
    sweep) timeout $((t-10)) python3 experiments/gdn/triton_launch_sweep.py --out $OUT/r/sweep --budget-s $((t-40)) \
              ${SWEEP_ARGS:-} > $OUT/r/sweep.log 2>&1 ;;
    ladder_native) # LADDER_ARGS may hold several runs separated by ';' (give each its own --name)
            IFS=';' read -ra ladder_runs <<< "${LADDER_ARGS:-}"; [ ${#ladder_runs[@]} -gt 0 ] || ladder_runs=("")
            for la in "${ladder_runs[@]}"; do
              t=$(left); [ "$cap" -gt 0 ] && { c=$(( cap - ($(date +%s) - step_t0) )); [ "$c" -lt "$t" ] && t=$c; }
              [ "$t" -gt 30 ] || { echo "   ladder run '$la' skipped: no time left"; continue; }
              echo "   ladder run: $la"
              timeout $((t-10)) python3 experiments/gdn/ladder.py --backend native --out $OUT/r/ladder_native $la \
                >> $OUT/r/ladder_native.log 2>&1
            done ;;
    profile) { [ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl; } \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=/tmp/lethe-flacmp-triton-cache timeout $((t-10)) \
              python3 experiments/native/kernel_profile.py --out $OUT/r/profile --budget-s $((t-60)) ${PROFILE_ARGS:-} > $OUT/r/profile.log 2>&1 ;;
    fla) python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 timeout $((t-10)) python3 experiments/fla640/run.py \
              --out $OUT/r/fla640 --budget-s $((t-40)) > $OUT/r/fla640.log 2>&1 ;;
    flacmp) { [ -d /tmp/site/fla ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-0.6.0-py3-none-any.whl; } \
           && PYTHONPATH=/tmp/site:$PYTHONPATH FLA_DISABLE_BACKEND_DISPATCH=1 TRITON_CACHE_DIR=/tmp/lethe-flacmp-triton-cache timeout $((t-10)) \
              python3 experiments/gdn/fla_compare.py --out $OUT/r/flacmp --budget-s $((t-40)) ${FLACMP_ARGS:-} > $OUT/r/flacmp.log 2>&1 ;;
  esac
  echo "   rc=$? after $(( $(date +%s) - start )) s"; tail -n 4 $OUT/r/*.log 2>/dev/null | tail -n 8
done
# a background compile no later step waited for must not write while the results are packed
[ -n "$bg_pid" ] && { kill $bg_pid 2>/dev/null; wait $bg_pid 2>/dev/null; echo "background compile stopped"; }
# a second run in the same device call must not replace the first one's archive (a lost call, twice): next free name
archive=$OUT/results.tar.gz; n=2
while [ -e "$archive" ]; do archive=$OUT/results_$n.tar.gz; n=$((n + 1)); done
tar -czf "$archive" -C $OUT r && rm -rf $OUT/r && echo "packed $archive"
ls -la $OUT
