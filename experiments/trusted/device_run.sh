#!/usr/bin/env bash
# One device call of the trusted corpus (the compute rule `trusted`'s command, both columns at once): the CPU
# column (float64 reference and candidates on the host's cores) and the GPU column (CUDA candidates, CUDA float64
# reference) run side by side, each resuming from its checkpoint, until the call's wall budget; then both result
# folders (rows, summary, provenance, checkpoint) are packed into $OUT/trusted.tgz. Run it again with the folders
# it returned put back under .carry/trusted/ and carried: it resumes where the last call stopped.
#
#   bash experiments/trusted/device_run.sh [WALL_S] [CPU_WORKERS] [GPU_WORKERS]
#   FRESH=1 bash experiments/trusted/device_run.sh ...   # the first call of a new run (no checkpoints yet)
#
# A call that finds no carried checkpoint stops at once unless FRESH=1: the device machine keeps nothing between
# calls, so a forgotten `carry` would otherwise redo the last call's kernels and spend its device time on them.
# Needs: KernelBench's pinned copy in .kb/ (git-ignored, carried), the checkpoints in .carry/trusted/ (carried).
# The call is stopped with SIGTERM before the device's per-command limit: the runner then folds every finished
# kernel into its checkpoint and writes its results folder as for a run that reached its deadline.
set -u
wall=${1:-540}; cpu_workers=${2:-8}; gpu_workers=${3:-6}
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1 LETHE_REF_CACHE=off
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c "import lethe.kernels" 2>/dev/null; then
  ln -sfn ../../kernels src/lethe/kernels
  export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
fi
if [ "${FRESH:-0}" != 1 ] && ! [ -s .carry/trusted/cpu/checkpoint.jsonl ] && ! [ -s .carry/trusted/cuda/checkpoint.jsonl ]; then
  echo "no carried checkpoint in .carry/trusted/: carry it, or set FRESH=1 for the first call of a new run" >&2
  exit 2
fi
mkdir -p .carry/trusted/cpu .carry/trusted/cuda "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > .carry/trusted/gpu.txt 2>&1
stop=$((wall - 70))   # no kernel starts after this; in-flight ones get until the SIGTERM at $wall
common=(--kb-root .kb --stop-after-s "$stop")
timeout -s TERM "$wall" "$PYTHON" -m lethe.trusted.run --device cpu "${common[@]}" --workers "$cpu_workers" \
  --out .carry/trusted/cpu --checkpoint .carry/trusted/cpu/checkpoint.jsonl > .carry/trusted/cpu.log 2>&1 &
timeout -s TERM "$wall" "$PYTHON" -m lethe.trusted.run --device cuda --reference-device cuda "${common[@]}" \
  --workers "$gpu_workers" --out .carry/trusted/cuda --checkpoint .carry/trusted/cuda/checkpoint.jsonl \
  > .carry/trusted/cuda.log 2>&1 &
wait
tail -n 3 .carry/trusted/cpu.log .carry/trusted/cuda.log
tar -czf "$OUT/trusted.tgz" .carry/trusted && ls -l "$OUT/trusted.tgz"
