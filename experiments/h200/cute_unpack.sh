#!/usr/bin/env bash
# Assemble the CuTe DSL on the device from carried parts (the 64 MiB travel limit splits it; see docs/native.md):
#   call 1: carry [".cute3a"]  command: mkdir -p /opt/cute-parts && cp .cute3a/* /opt/cute-parts/
#   call 2: carry [".cute3b"]  command: cp .cute3b/* /opt/cute-parts/
#   call 3: carry [".cute3c", ...]  command: cp .cute3c/* /opt/cute-parts/ && bash experiments/h200/cute_unpack.sh && ...
# The parts are one stream cut in pieces: a plain tar of the four py3.12 wheels (what .cute-a/.cute-b hold), or
# the xz-compressed tree that ../shared/tools/cute-dsl-device-bundle.sh makes. Either way the result is an
# importable tree in /opt/cute; then export PYTHONPATH=/opt/cute:/opt/cute/nvidia_cutlass_dsl/dsl_packages.
set -euo pipefail
parts=/opt/cute-parts dest=/opt/cute
mkdir -p "$dest"
magic=$(head -c 6 "$parts"/part00 | od -An -tx1 | tr -d ' \n')
if [ "$magic" = "fd377a585a00" ]; then
  cat "$parts"/part* | xz -d -T0 | tar -x -C "$dest"
else
  mkdir -p /opt/cute-wheels && cat "$parts"/part* | tar -x -C /opt/cute-wheels
  for w in /opt/cute-wheels/*.whl; do python3 -m zipfile -e "$w" "$dest"; done
fi
PYTHONPATH=$dest:$dest/nvidia_cutlass_dsl/dsl_packages python3 -c "import cutlass.cute; print('cute dsl importable')"
