#!/usr/bin/env bash
# Run a command with fla-core 0.6.0 importable: the one place the fla wheel is installed. The wheel is staged in
# .whl/ (the GPU machine has no network); it goes into $FLA_SITE once and that folder joins PYTHONPATH. fla runs
# pure-Triton (FLA_DISABLE_BACKEND_DISPATCH=1), and its Triton cache is shared by every step of one machine so a
# second step reuses the binaries and autotune choices of the first.
#   bash workflow/scripts/with_fla.sh python3 experiments/gdn/fla_compare.py --out ...
set -eu
FLA_WHEEL=${FLA_WHEEL:-.whl/fla_core-0.6.0-py3-none-any.whl}
FLA_SITE=${FLA_SITE:-/tmp/site}
if [ ! -d "$FLA_SITE/fla" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$FLA_SITE" "$FLA_WHEEL"
fi
export PYTHONPATH="$FLA_SITE${PYTHONPATH:+:$PYTHONPATH}"
export FLA_DISABLE_BACKEND_DISPATCH=1
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/lethe-flacmp-triton-cache}
exec "$@"
