"""lethe.kernels.gdn.native.kernel_profile on the CPU: the kernel-trace summary on synthetic events, the
implementation names and their forward options, the floors, one cell and the cell loop on the torch path (the
driver, experiments/native/kernel_profile.py, needs a GPU)."""

from types import SimpleNamespace

import pytest

from lethe.kernels.gdn import bench
from lethe.kernels.gdn.native import kernel_profile


@pytest.fixture(scope="module")
def prof():
    return kernel_profile


def ev(name, start_us, end_us):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start_us, end=end_us))


def test_families(prof):
    assert prof.family("sm90_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x32") == "matmul (cuBLAS)"
    assert prof.family("nvjet_tst_64x8_64x16_4x1_v_bz_TNT") == "matmul (cuBLAS)"
    assert prof.family("kernel_cutlass_kernel_ReverseStateScan_0") == "CuTe DSL (native K1/K2)"
    assert prof.family("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>") == "torch reduction / scan"
    assert prof.family("void at::native::elementwise_kernel<128, 2, copy_kernel>") == "torch copy / index / fill"
    assert prof.family("void at::native::vectorized_elementwise_kernel<4, MulFunctor>") == "torch elementwise"
    assert prof.family("intra_bwd_kernel") == "Triton"
    assert prof.family("chunk_gdn2_bwd_kernel_dqkwg") == "Triton"
    assert prof.family("void some::other_kernel<int>") == "other"


def test_kernel_summary_sums_union_and_idle(prof):
    # two overlapping kernels (0-10, 5-12), a gap of 8 us, then one more (20-30)
    s = prof.kernel_summary([ev("a_kernel", 0, 10), ev("void at::native::vectorized_elementwise_kernel", 5, 12),
                             ev("a_kernel", 20, 30)])
    assert s["kernels"] == 3
    assert s["kernel_sum_ms"] == pytest.approx(0.027)
    assert s["busy_ms"] == pytest.approx(0.022)
    assert s["span_ms"] == pytest.approx(0.030)
    assert s["idle_in_span_ms"] == pytest.approx(0.008)
    assert s["families"]["Triton"] == {"kernels": 2, "ms": pytest.approx(0.020)}
    assert s["top_kernels"][0] == {"name": "a_kernel", "family": "Triton", "calls": 2, "ms": pytest.approx(0.020)}
    assert prof.kernel_summary([]) == {"kernels": 0}


def test_profile_cell_runs_on_the_cpu_torch_path(prof):
    # the GPU script's control flow (check, timing, profile, summary) on the CPU torch path, tiny sizes
    from types import SimpleNamespace as NS

    args = NS(seed=1, warmup=1, reps=2, sets=2, profile_reps=2, check_rel=0.05)
    row, grads = prof.profile_cell("ours", "gdn", 1, 2, 128, 16, 16, args, device="cpu")
    assert row["status"] == "ok" and row["bwd_wall_ms"] > 0 and row["profile_reps"] == 2
    assert row["timed_iterations"] == 4 and row["input_sets"] == 2
    assert row["profile"]["kernels"] > 0 and row["profile"]["top_kernels"]
    again, _ = prof.profile_cell("ours", "gdn", 1, 2, 128, 16, 16, args, ref_grads=grads, device="cpu")
    assert again["status"] == "ok" and max(again["check_vs_ours_rel"].values()) == 0.0


def test_floors_use_the_benchmark_counts_and_the_measured_ceilings(prof):
    ceil = {"measured": True, "bf16_matmul_tflops": 800.0, "copy_tbps": 4.0}
    f = prof.floors("gdn", 128, 4096, 128, ceil)
    c = bench.chunk_counts("gdn", 128, 2, 4096, 128, 128)
    assert f["counts"]["bwd_flops"] == c["bwd_flops"] and f["counts"]["bwd_bytes"] == c["bwd_bytes"]
    want = max(c["bwd_flops"] / 800e12, c["bwd_bytes"] / 4e12) * 1e3
    assert f["bwd_floor_ms"] == pytest.approx(want) and f["fwd_bwd_floor_ms"] > f["bwd_floor_ms"]
    assert "bwd_floor_ms" not in prof.floors("gdn", 128, 4096, 128, {"measured": False})


def test_impl_names_carry_forward_options(prof):
    assert prof.parse_impl("hybrid-tc") == ("hybrid-tc", {})
    assert prof.parse_impl("hybrid-tc@blocked+tf32") == ("hybrid-tc", {"wy_inverse": "blocked",
                                                                       "dot_precision": "tf32"})
    assert prof.parse_impl("ours@rows") == ("ours", {"wy_inverse": "rows"})
    with pytest.raises(ValueError, match="no Triton forward"):
        prof.parse_impl("fla@tf32")
    with pytest.raises(ValueError, match="unknown forward option"):
        prof.parse_impl("hybrid-tc@bf16")
    with pytest.raises(ValueError, match="unknown implementation"):
        prof.parse_impl("hybird-tc")


def test_rows_record_the_forward_options_with_defaults_filled_in(prof):
    from lethe.kernels.gdn.fwd_options import WY_INVERSE_DEFAULT

    rn = dict.fromkeys(("wy_a_kernel", "wy_apply_kernel", "state_fwd_kernel"), "tf32rn")
    assert prof.resolved_fwd_options("hybrid-tc") == {"dot_precision": "tf32x3", "wy_inverse": WY_INVERSE_DEFAULT,
                                                      "output_precision": "auto", "output_precision_bf16": "tf32rn",
                                                      "gate_form": "auto", "kernel_precisions_bf16": rn}
    # a chosen dot_precision is honoured by the output kernel and the "auto" kernels too, unless chosen on their own
    assert prof.resolved_fwd_options("ours@rows+tf32") == {"dot_precision": "tf32", "wy_inverse": "rows",
                                                           "output_precision": "auto", "output_precision_bf16": "tf32",
                                                           "gate_form": "auto",
                                                           "kernel_precisions_bf16": dict.fromkeys(rn, "tf32")}
    assert prof.resolved_fwd_options("hybrid-tc@general")["gate_form"] == "general"
    # launch words reach the recorded precisions (the pre-ninth-build forward: every PREC kernel at 3xTF32)
    assert prof.resolved_fwd_options("hybrid-tc@a3x+wu3x+s3x")["kernel_precisions_bf16"] == dict.fromkeys(rn, "tf32x3")
    assert prof.resolved_fwd_options("hybrid-tc@otf32")["output_precision_bf16"] == "tf32"
    assert prof.resolved_fwd_options("hybrid-tc@otf32x3")["output_precision_bf16"] == "tf32x3"
    assert prof.resolved_fwd_options("fla") == {}


def test_forward_option_words_cover_every_wy_inverse(prof):
    from lethe.kernels.gdn.triton_fwd import WY_INVERSES

    assert {v for k, v in prof.FWD_OPTION_WORDS.values() if k == "wy_inverse"} == set(WY_INVERSES)


def test_launch_words_become_launch_table_overrides(prof):
    from lethe.kernels.gdn.launch_tables import check_overrides

    assert prof.launch_overrides("hybrid-tc") == {}
    assert prof.parse_impl("hybrid-tc@srn+otf32x3") == ("hybrid-tc", {"output_precision": "tf32x3"})
    assert prof.launch_overrides("hybrid-tc@srn+direct+otf32x3") == {"state_fwd_kernel": {"PREC": "tf32rn"},
                                                                   "output_fwd_kernel": {"DIRECT": 1}}
    assert prof.launch_overrides("hybrid-tc@srn+kend0") == {"state_fwd_kernel": {"PREC": "tf32rn", "KEND": 0}}
    for word in prof.LAUNCH_WORDS:  # every word names real kernels and keys
        check_overrides(prof.launch_overrides(f"hybrid-tc@{word}"))
    with pytest.raises(ValueError):
        prof.launch_overrides("fla@srn")  # fla has no Triton forward of ours
    with pytest.raises(ValueError, match="unknown forward option"):
        prof.launch_overrides("hybrid-tc@srnx")


def test_the_figures_calls_timed_the_current_default_forward(prof):
    # the speed figure and table's newest block must describe the code as it is: the figure's calls (the newest
    # commit with enough cells) ran "hybrid-tc" with the forward options the code now defaults to, and -- where a
    # row records it (calls after 00a3a02) -- the current launch table. A default changed without a new profile
    # fails here, as the committed ladders do in tests/kernels/gdn/test_committed_forward_results.py.
    from pathlib import Path

    from lethe.kernels.gdn.native.render import figure_versus_fla_call
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH
    from lethe.results import load_runs

    calls = load_runs(Path(__file__).resolve().parents[3] / "results" / "native" / "profile" / "profile.json")
    name, cells = figure_versus_fla_call(calls)
    assert name and cells
    rows = [got["hybrid-tc"] for got in cells.values()]
    # gate_form (recorded since the scalar-gate path) decides only sgdn cells, and the figure leaves out sgdn cells
    # that ran before it (kernels/gdn/native/render.member_label): every other option must be today's default
    now = prof.resolved_fwd_options("hybrid-tc")
    for r in rows:
        opts = dict(r["fwd_options"])
        if r["member"] == "sgdn" or "gate_form" in opts:
            assert opts.get("gate_form") == now["gate_form"]
        opts.setdefault("gate_form", now["gate_form"])
        assert opts == now
    for r in rows:
        if "fwd_launch" in r:
            assert r["fwd_launch"] == {n: dict(c) for n, c in FWD_LAUNCH.items()}


def test_family_labels_are_the_render_tables_columns(prof):
    # profile.json lists every family a summary can name; the rendered table has one column per family
    from lethe.kernels.gdn.native.render import PROFILE_FAMILIES

    assert set(prof.FAMILY_LABELS) == {f for f, _ in PROFILE_FAMILIES}
    assert prof.FAMILY_LABELS[-2:] == ["Triton", "other"]


def _loop_args(**kw):
    base = dict(seed=1, warmup=0, reps=1, sets=1, profile_reps=1, check_rel=0.05, budget_s=1e9,
                native_max_head_tokens=65536)
    return SimpleNamespace(**{**base, **kw})


def test_profile_cells_runs_ours_first_and_records_what_did_not_run(prof, capsys):
    # on the CPU torch path: "ours" is run first (the reference) although listed last; native above its head-token
    # cap is skipped; fla (not installed here, or no CUDA) is an error row; every row carries the cell's floors
    # and a save follows every row
    import time

    rows, saves = [], []
    prof.profile_cells(["gdn:16:128:1"], ["native", "fla", "ours"], _loop_args(native_max_head_tokens=100), {},
                       rows, time.time(), lambda: saves.append(len(rows)), device="cpu")
    by = {r["impl"]: r for r in rows}
    assert [r["impl"] for r in rows] == ["ours", "native", "fla"]
    assert by["ours"]["status"] == "ok" and by["ours"]["H"] == 2 and by["ours"]["K"] == 128
    assert by["ours"]["fwd_options"] == prof.resolved_fwd_options("ours")
    assert "fwd_launch" in by["ours"] and "counts" in by["ours"]
    assert by["native"] == {"impl": "native", "member": "gdn", "B": 1, "H": 2, "T": 128, "K": 128, "V": 16,
                            "status": "skipped", "reason": "native above 100 head-tokens (memory)"}
    assert by["fla"]["status"] == "error" and "counts" in by["fla"]
    assert saves == [1, 3]  # after each profiled row (skips are saved with the next one or by the caller)
    assert "gdn:16:128:1 ours: ok" in capsys.readouterr().out


def test_profile_cells_skips_past_the_budget_and_ours_as_reference_only(prof):
    import time

    rows = []
    prof.profile_cells(["gdn:16:128:1"], ["hybrid"], _loop_args(budget_s=-1), {}, rows, time.time(), lambda: None,
                       device="cpu")
    # past the budget every implementation, the reference included, is recorded as skipped
    assert [(r["impl"], r["status"], r["reason"]) for r in rows] == [("ours", "skipped", "time budget"),
                                                                     ("hybrid", "skipped", "time budget")]


def test_profile_doc(prof):
    import time

    doc = prof.profile_doc([{"impl": "ours"}], {"measured": False}, "cpu", time.time())
    assert doc["schema"] == "lethe.native.profile/1" and doc["rows"] == [{"impl": "ours"}]
    assert doc["families"] == prof.FAMILY_LABELS and doc["device"] == "cpu" and doc["seconds"] >= 0


def test_profile_cells_takes_the_heads_from_the_cell(prof):
    # member:d_v:T:B:H profiles at H heads (model shapes); the head-token cap and the floors use that H
    import time

    rows = []
    prof.profile_cells(["gdn:16:64:1:3"], ["native", "ours"], _loop_args(native_max_head_tokens=150), {}, rows,
                       time.time(), lambda: None, device="cpu")
    by = {r["impl"]: r for r in rows}
    assert by["ours"]["status"] == "ok" and by["ours"]["H"] == 3
    assert by["native"]["status"] == "skipped" and by["native"]["H"] == 3  # 1*3*64 = 192 > 150
    assert by["ours"]["counts"] == prof.floors("gdn", 1, 64, 16, {}, H=3)["counts"]
    assert by["ours"]["counts"] != prof.floors("gdn", 1, 64, 16, {}, H=2)["counts"]
