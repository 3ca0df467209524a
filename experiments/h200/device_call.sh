#!/usr/bin/env bash
# One device call: the GPU experiments are Snakemake compute rules (resources: gpu=1); this wrapper only prepares
# the machine, runs the requested targets on the gpu profile, and packs what they wrote into $OUT/results.tar.gz
# (a second call in the same device session gets results_2.tar.gz: an earlier archive is never replaced).
#   LETHE_GIT_SHA=<sha> bash experiments/h200/device_call.sh <stage[,stage]> [snakemake arguments and targets]
# e.g.  ... device_call.sh native --config gpu_run=r1 gpu_args='{"native_profile": "--cells gdn:128:4096:128"}' \
#           -- results/native/profile/profile.json
# fla is installed by workflow/scripts/with_fla.sh (the rules that need it call it); the CuTe DSL, where a rule
# needs it, comes on an incoming PYTHONPATH (kept).
set -u
stages=${1:?usage: device_call.sh <stage[,stage]> [snakemake arguments]}; shift
PYTHON=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$OUT/r"
touch "$OUT/r/.start"
# lethe.kernels is the repository's kernels/ (pyproject package-dir): an install maps it under lethe; without a
# build backend on the machine, the source tree serves as the package with kernels/ linked where the install maps it
if ! "$PYTHON" -c "import lethe.kernels" 2>/dev/null; then
  if ! "$PYTHON" -m pip install -q --no-deps --no-build-isolation -e . > "$OUT/r/install.log" 2>&1; then
    ln -sfn ../../kernels src/lethe/kernels
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
  fi
  "$PYTHON" -c "import lethe.kernels" || echo "lethe.kernels is not importable: see install.log"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv > "$OUT/r/gpu.txt" 2>&1
"$PYTHON" -m snakemake --profile workflow/profiles/gpu --config compute="$stages" "$@" > "$OUT/r/snakemake.log" 2>&1
echo "snakemake rc=$?" | tee -a "$OUT/r/snakemake.log"
# what the rules wrote: results, logs and run folders newer than the start of this call
find results logs .build/runs -type f -newer "$OUT/r/.start" 2>/dev/null | while read -r f; do
  mkdir -p "$OUT/r/files/$(dirname "$f")" && cp "$f" "$OUT/r/files/$f"; done
rm -f "$OUT/r/.start"
archive=$OUT/results.tar.gz; n=2
while [ -e "$archive" ]; do archive=$OUT/results_$n.tar.gz; n=$((n + 1)); done
tar -czf "$archive" -C "$OUT" r && rm -rf "$OUT/r" && echo "packed $archive"
