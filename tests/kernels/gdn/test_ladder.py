"""The GDN ladder's rungs and summary (lethe.kernels.gdn.ladder) on the CPU; the driver's smoke runs are in
test_gdn_experiments.py."""

import math

import torch

from lethe.kernels.gdn import ladder as L


def test_e2e_repeat_records_bitwise_identity():
    # the repeat check the native ladder relies on, exercised on the CPU torch path (deterministic on one thread)
    row = L.rung_e2e("cpu", "gdn", 16, 16, 16, 32, torch.float32, 7, backend="torch", repeats=2)
    assert row["backend"] == "torch" and row["bitwise_repeat"] == {"runs": 2, "identical": True}
    assert row["pass"] and row["worst_rel_err"] < 1e-5
    assert set(row["errors"]) == {"o", "S_final", "dq", "dk", "dv", "dg", "db", "dw"}


def test_guarded_turns_an_exception_into_an_error_row():
    def boom():
        raise ValueError("no")

    row = L.guarded(boom, "stage", V=16)
    assert row["status"] == "error" and row["reason"] == "ValueError: no" and row["V"] == 16
    assert math.isnan(row["worst_rel_err"]) and row["pass"] is False
    assert L.guarded(lambda: {"rung": "tile"}, "tile") == {"rung": "tile"}


def test_fla_rung_is_skipped_without_fla():
    try:
        import fla  # noqa: F401
    except Exception:
        rows = L.rung_fla("cpu", 16, 16, 32, torch.float32, 0, 1.0)
        assert rows[0]["rung"] == "fla" and rows[0]["status"] == "skipped"


def test_kernel_precisions_and_launch_table():
    table = L.fwd_launch_table()
    assert set(L.PREC_KERNEL_KEYS) <= set(table)
    split = L.kernel_precisions_ran("tf32x3", (torch.bfloat16, torch.float16))
    assert set(split) == set(L.PREC_KERNEL_KEYS.values())
    # the row and blocked inverses run only the state kernel with a PREC of its own
    assert set(L.kernel_precisions_ran("tf32x3", (torch.bfloat16,), "rows")) == {"fwd_state"}


def _summary(rows, **kw):
    args = dict(cpu_smoke=False, backend="triton", complete=True, dot_precision="tf32x3",
                output_precision_ran="tf32rn", kernels_ran={"fwd_state": "tf32rn"}, wy_inverse="split", launch={},
                members=["gdn", "la"], repeats=1, seconds=1.0)
    return L.summarise(rows, **{**args, **kw})


def test_summary_counts_and_worsts():
    rows = [{"rung": "tile", "pass": True, "worst_rel_err": 1e-7},
            {"rung": "stage", "worst_rel_err": 2e-3},
            {"rung": "e2e", "member": "gdn", "worst_rel_err": 4e-3, "pass": True},
            {"rung": "e2e", "member": "gdn", "worst_rel_err": 6e-3, "pass": False},
            {"rung": "e2e", "status": "error", "worst_rel_err": float("nan"), "pass": False}]
    s = _summary(rows)
    assert s["tile_all_pass"] and s["stage_worst"] == 2e-3 and s["e2e_worst"] == 6e-3
    assert s["e2e_pass"] == 1 and s["e2e_arms"] == 3 and s["error_rows"] == 1
    assert s["e2e_worst_per_member"] == {"gdn": 6e-3, "la": None}
    assert s["dot_precision"] == {"fwd": "tf32x3", "fwd_output": "tf32rn", "fwd_state": "tf32rn",
                                  "bwd_scan": "tf32x3", "bwd_intra": "tf32"}
    assert s["bitwise_repeat_all_identical"] is None and s["mode"] == "gpu"
    for r in rows[2:4]:
        r["bitwise_repeat"] = {"runs": 3, "identical": True}
    native = _summary(rows, backend="native", repeats=3)
    assert native["bitwise_repeat_all_identical"] is True
    assert native["dot_precision"] == L.NATIVE_FORWARD and native["fwd_launch"] is None
    assert native["wy_inverse"] is None
    assert _summary([], cpu_smoke=True)["dot_precision"] == "interpreter (numpy float32)"
    assert _summary([])["tile_all_pass"] is None
