#!/usr/bin/env bash
# One H200 call for the GDN results: ladder, family training, then the optional fla rung (carried wheel).
# Usage (device tool, repo root): bash experiments/gdn/run_h200.sh  -- writes under $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src:$PWD" FLA_DISABLE_BACKEND_DISPATCH=1
python3 -c 'import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name(0))'
timeout "${LADDER_S:-300}" python3 experiments/gdn/ladder.py --out "$OUT" 2>&1 | tee "$OUT/ladder.log"
timeout "${TRAIN_S:-180}" python3 experiments/gdn/train_family.py --out "$OUT" 2>&1 | tee "$OUT/train.log"
if ls .whl/fla_core-*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/fla_core-*.whl \
    && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
timeout "${FLA_S:-90}" python3 experiments/gdn/ladder.py --fla only --fla-budget-s 60 --out "$OUT" 2>&1 | tail -40
exit 0
