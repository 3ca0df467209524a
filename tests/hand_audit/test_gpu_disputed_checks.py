"""The CPU reproductions behind the GPU hand-audit labels: each arithmetic claim a label rests on holds in torch,
and the committed checks.json is what lethe.hand_audit.gpu_checks computes now."""

from __future__ import annotations

import json
import math
from pathlib import Path

from lethe.hand_audit import gpu_checks as C

ROOT = Path(__file__).resolve().parents[2]


def test_unscaled_fp32_l2norm_is_nonfinite_on_subnormal_rows_and_the_scaled_form_is_not():
    r = C.l2norm_underflow()
    assert r["squares_flushed_to_zero"] and r["unscaled_nonfinite_fraction"] == 1.0
    assert r["float64_nonfinite_fraction"] == 0.0 and r["scaled_max_abs_err"] < 1e-6


def test_ordered_compare_max_and_fmax_relu_drop_nan_where_torch_keeps_it():
    m = C.nan_ignoring_max()
    assert math.isfinite(m["kernel_loop_with_nan"]) and math.isnan(m["torch_max_with_nan"])
    assert math.isfinite(m["kernel_loop_all_neg_inf"]) and m["torch_max_all_neg_inf"] == -math.inf
    r = C.nan_dropping_relu()
    assert r["fmaxf_nan"] == 0.0 and r["ternary_nan"] == 0.0 and math.isnan(r["torch_relu_nan"])


def test_worker_dtype_switch_double_rounds_bf16_weights():
    r = C.bf16_weight_double_rounding()
    assert r["weights_differing_fraction"] > 0 and r["bracketed_row_columns_affected"] > 0
    # one bf16 ulp of a weight below 2^-5, times 2^7 on the bracketed row and the multiplier 2: at most 2^-4
    assert 0 < r["bracketed_row_max_output_err"] <= 2 ** -4


def test_committed_checks_match_the_experiment():
    got = json.loads((ROOT / "results/hand_audit/gpu_disputed/checks.json").read_text())
    for name in ("l2norm_underflow", "nan_ignoring_max", "nan_dropping_relu", "bf16_weight_double_rounding"):
        assert got[name] == C.plain(getattr(C, name)()), name
    for key in ("battery_cpu L2/12:gemm_kblocked_leaky", "battery_cpu L3/1:mlp_split_k"):
        # run with the fixed worker: the two correct kernels pass PRC-02's bracketed bf16 rows
        assert got[key]["status"] == "pass" and all(v["status"] == "pass" for v in got[key]["probes"].values())
