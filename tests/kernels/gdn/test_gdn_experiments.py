"""The two GPU experiment scripts also run end to end on the CPU (--cpu-smoke), so CI exercises their code."""

import importlib
import json
from pathlib import Path

import pytest

from lethe.kernels.gdn import ladder as L

ROOT = Path(__file__).resolve().parents[3]


def _load(name):
    """The driver experiments/gdn/<name>.py, imported (the repository root is on pytest's path)."""
    return importlib.import_module(f"experiments.gdn.{name}")


@pytest.mark.slow
def test_ladder_cpu_smoke(tmp_path):
    summary = _load("ladder").main(["--cpu-smoke", "--out", str(tmp_path), "--members", "gdn"])
    data = json.loads((tmp_path / "ladder_smoke.json").read_text())
    assert summary["tile_all_pass"]
    assert summary["e2e_pass"] == summary["e2e_arms"] == 4
    # float32 on the interpreter: everything within float32 rounding of the float64 oracle
    assert summary["e2e_worst"] < 1e-5 and summary["stage_worst"] < 1e-5
    assert {r["rung"] for r in data["rows"]} == {"tile", "stage", "e2e", "fla"}
    # the end-to-end rung pins the returned final state with the output and the gradients
    assert all("S_final" in r["errors"] for r in data["rows"] if r["rung"] == "e2e")
    assert (tmp_path / "ladder_smoke.provenance.json").exists()


@pytest.mark.slow
def test_ladder_cpu_smoke_with_the_row_inverse(tmp_path):
    # every rung (tile pin included) runs the forward option it is given; the interpreter's split kernels (the
    # default) are the row kernel bit for bit, so the summaries agree exactly
    summary = _load("ladder").main(["--cpu-smoke", "--out", str(tmp_path), "--members", "gdn", "--wy-inverse",
                                    "rows", "--name", "rows.json"])
    assert summary["wy_inverse"] == "rows" and summary["tile_all_pass"]
    assert summary["e2e_pass"] == summary["e2e_arms"] == 4 and summary["e2e_worst"] < 1e-5
    default = _load("ladder").main(["--cpu-smoke", "--out", str(tmp_path), "--members", "gdn"])
    assert default["wy_inverse"] == "split"
    assert summary["e2e_worst"] == default["e2e_worst"] and summary["stage_worst"] == default["stage_worst"]
    import pytest

    with pytest.raises(SystemExit, match="dot-precision"):
        _load("ladder").main(["--cpu-smoke", "--out", str(tmp_path), "--dot-precision", "tf32"])


def test_ladder_native_needs_the_gpu(tmp_path):
    import pytest

    with pytest.raises(SystemExit, match="needs the GPU|needs a CUDA GPU"):
        _load("ladder").main(["--cpu-smoke", "--backend", "native", "--out", str(tmp_path)])


def test_train_family_cpu_smoke(tmp_path):
    summary, results = _load("train_family").main(
        ["--cpu-smoke", "--out", str(tmp_path), "--members", "kda", "--steps", "3"])
    row = results["kda"]
    assert row["zero_nan"] and len(row["loss_fast"]) == 3
    # same seed, same batches, float32 on both paths: the curves agree to float32 rounding
    assert row["max_step_curve_dev_rel"] < 1e-4
    assert (tmp_path / "train_family_smoke.json").exists()
    assert summary["launch_overrides"] == {}
    assert summary["deterministic_algorithms"] and not summary["repeat_checked"]


def test_train_family_repeat_check_records_bitwise_repeats(tmp_path):
    import torch

    summary, results = _load("train_family").main(
        ["--cpu-smoke", "--out", str(tmp_path), "--members", "ssd", "--steps", "2", "--repeat"])
    row = results["ssd"]
    assert summary["repeat_checked"] and row["fast_repeat_bitwise"] is True and row["ref_repeat_bitwise"] is True
    assert summary["cublas_workspace_config"] == ":4096:8"
    assert not torch.are_deterministic_algorithms_enabled()  # switched off again for whoever runs next


def test_train_family_runs_and_records_launch_overrides(tmp_path, monkeypatch):
    # the attribution run of docs/gdn.md §5: the fast path with the pre-e746f01 precisions, named and recorded;
    # the override is in force while the models train and gone afterwards
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    mod = _load("train_family")
    seen = []
    real = mod.train

    def spy(member, backend, *a, **k):
        seen.append((backend, FWD_LAUNCH["state_fwd_kernel"]["PREC"]))
        return real(member, backend, *a, **k)

    monkeypatch.setattr(mod, "train", spy)
    summary, _ = mod.main(["--cpu-smoke", "--out", str(tmp_path), "--members", "la", "--steps", "2",
                           "--launch", "state_fwd_kernel:PREC=tf32x3", "--name", "t3x.json"])
    assert summary["launch_overrides"] == {"state_fwd_kernel": {"PREC": "tf32x3"}}
    assert seen == [("triton", "tf32x3"), ("torch", "tf32x3")]
    assert FWD_LAUNCH["state_fwd_kernel"]["PREC"] == "auto"
    assert (tmp_path / "t3x.json").exists()
    with pytest.raises(SystemExit, match="--launch"):
        mod.main(["--cpu-smoke", "--out", str(tmp_path), "--launch", "state_fwd_kernel:PRECC=tf32x3"])


def test_ladder_native_gpu_branch_plans_the_e2e_rung_only(tmp_path, monkeypatch):
    # the GPU branch of main() with the GPU faked and the rung (lethe.kernels.gdn.ladder) stubbed: native runs the end-to-end rung alone,
    # with repeats, into ladder_native.json
    import torch

    mod = _load("ladder")
    from lethe import provenance

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(provenance, "gpu_info", lambda: {"gpu": "faked for the test"})
    seen = []

    def fake_e2e(device, member, K, V, C, T, dtype, seed, backend="triton", repeats=1, fwd_options=None):
        seen.append((member, backend, repeats))
        assert fwd_options == {"dot_precision": "tf32x3", "wy_inverse": "split", "output_precision": "auto"}  # the defaults reach the rung
        return {"rung": "e2e", "member": member, "backend": backend, "V": V, "T": T, "dtype": str(dtype),
                "errors": {"o": 1e-3}, "worst_rel_err": 1e-3, "worst_tensor": "o", "pass": True,
                "bitwise_repeat": {"runs": repeats, "identical": True}}

    monkeypatch.setattr(L, "rung_e2e", fake_e2e)
    summary = mod.main(["--backend", "native", "--out", str(tmp_path), "--members", "gdn,la", "--lengths", "256"])
    # default dtypes: bf16 and fp16
    data = json.loads((tmp_path / "ladder_native.json").read_text())
    assert {r["rung"] for r in data["rows"]} == {"e2e", "fla"}
    assert summary["backend"] == "native" and summary["tile_all_pass"] is None
    # the native backend's forward is the torch chunked path: the summary does not claim Triton forward options
    assert summary["dot_precision"] == L.NATIVE_FORWARD and summary["fwd_launch"] is None
    with pytest.raises(SystemExit, match="native"):
        mod.main(["--backend", "native", "--out", str(tmp_path), "--launch", "state_fwd_kernel:KEND=0"])
    assert summary["bitwise_repeat_all_identical"] is True and summary["e2e_arms"] == 2 * 2 * 2
    assert set(seen) == {("gdn", "native", 3), ("la", "native", 3)}


def test_ladder_runs_inside_its_launch_overrides_and_records_them(tmp_path, monkeypatch):
    # --launch changes a launch-table entry for the whole run (the rung sees it), the summary records it, the table
    # is restored after; a misspelt kernel or key is refused before anything runs
    import torch

    mod = _load("ladder")
    from lethe import provenance
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(provenance, "gpu_info", lambda: {"gpu": "faked for the test"})
    before = dict(FWD_LAUNCH["state_fwd_kernel"])
    seen = []

    def fake_e2e(device, member, K, V, C, T, dtype, seed, backend="triton", repeats=1, fwd_options=None):
        seen.append(FWD_LAUNCH["state_fwd_kernel"]["PREC"])
        return {"rung": "e2e", "member": member, "backend": backend, "V": V, "T": T, "dtype": str(dtype),
                "errors": {"o": 1e-3}, "worst_rel_err": 1e-3, "worst_tensor": "o", "pass": True,
                "bitwise_repeat": {"runs": repeats, "identical": True}}

    monkeypatch.setattr(L, "rung_e2e", fake_e2e)
    summary = mod.main(["--backend", "hybrid-tc", "--out", str(tmp_path), "--members", "gdn", "--lengths", "256",
                        "--launch", "state_fwd_kernel:PREC=tf32rn"])
    assert summary["dot_precision"]["fwd_output"] == "tf32rn"  # bf16 and fp16 under the defaults
    assert seen and set(seen) == {"tf32rn"}
    assert summary["launch_overrides"] == {"state_fwd_kernel": {"PREC": "tf32rn"}}
    assert summary["fwd_launch"]["state_fwd_kernel"]["PREC"] == "tf32rn"
    assert FWD_LAUNCH["state_fwd_kernel"] == before
    for bad in ("state_fwd_kernel:PRECISION=tf32rn", "no_such_kernel:BV=8", "state_fwd_kernel"):
        with pytest.raises(SystemExit, match="--launch"):
            mod.main(["--backend", "hybrid-tc", "--out", str(tmp_path), "--launch", bad])


@pytest.mark.slow
def test_train_seeds_parses_variants_and_writes_one_row_per_seed_and_variant(tmp_path):
    mod = _load("train_seeds")
    assert mod.parse_variant("v=a_kernel:PREC=tf32x3,BV=32,b_kernel:PREC=tf32x3") == (
        "v", ["a_kernel:PREC=tf32x3,BV=32", "b_kernel:PREC=tf32x3"])
    with pytest.raises(SystemExit, match="--variant"):
        mod.parse_variant("novariant")
    doc = mod.main(["--cpu-smoke", "--member", "la", "--seeds", "1,2", "--steps", "2", "--out", str(tmp_path),
                    "--variant", "s3x=state_fwd_kernel:PREC=tf32x3", "--fp32-control"])
    assert [(r["seed"], r["variant"]) for r in doc["rows"]] == [
        (1, "default"), (1, "s3x"), (1, "fast_fp32"), (2, "default"), (2, "s3x"), (2, "fast_fp32")]
    assert doc["rows"][2]["fast_dtype"] == "float32"
    assert doc["rows"][1]["launch_overrides"] == {"state_fwd_kernel": {"PREC": "tf32x3"}}
    assert (tmp_path / "train_seeds.json").exists() and (tmp_path / "train_seeds.provenance.json").exists()


def test_intra_precision_parses_cells_and_variants_and_needs_the_gpu(tmp_path, monkeypatch):
    import torch

    mod = _load("intra_precision")
    assert mod.parse_cells("sgdn:128:4096,gdn:64:1024") == [("sgdn", 128, 4096), ("gdn", 64, 1024)]
    with pytest.raises(SystemExit, match="--cells"):
        mod.parse_cells("sgdn:128")
    assert mod.parse_variant("rn=intra_bwd_kernel:PREC=tf32rn,num_warps=4") == (
        "rn", {"intra_bwd_kernel": {"PREC": "tf32rn", "num_warps": 4}})
    for bad in ("default=intra_bwd_kernel:PREC=tf32rn", "rn", "rn=intra_bwd_kernel:PRECC=tf32rn"):
        with pytest.raises(SystemExit, match="--variant"):
            mod.parse_variant(bad)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="CUDA GPU"):
        mod.main(["--out", str(tmp_path)])


@pytest.mark.skipif(__import__("torch").cuda.is_available(),
                    reason="the smoke run drives the Triton interpreter on CPU tensors; on a GPU run the script")
@pytest.mark.slow
def test_intra_precision_cpu_smoke_checks_then_times_each_variant(tmp_path):
    summary, rows = _load("intra_precision").main([
        "--cpu-smoke", "--out", str(tmp_path), "--cells", "gdn:16:32,sgdn:16:32", "--dk", "16", "--heads", "1",
        "--sets", "2", "--warmup", "0", "--reps", "1", "--variant", "rn=intra_bwd_kernel:PREC=tf32rn"])
    cells = [r for r in rows if r["kind"] == "cell"]
    assert [(r["member"], r["variant"]) for r in cells] == [("gdn", "default"), ("gdn", "rn"), ("sgdn", "default"),
                                                           ("sgdn", "rn")]
    by = {(r["member"], r["variant"]): r for r in cells}
    assert by[("gdn", "default")]["intra_precision"] == "tf32" and by[("gdn", "rn")]["intra_precision"] == "tf32rn"
    for r in cells:
        assert r["bitwise_repeat"] and len(r["bwd_ms_median_per_set"]) == 2
        assert set(r["errors"]) == ({"o", "dq", "dk", "dv", "dg", "db", "dw"} if r["member"] == "gdn"
                                    else {"o", "dq", "dk", "dv", "dg", "dbeta"})
        # float32 through the interpreter (no TF32 truncation there): float32-grade, TF32-rn grade with rounding
        assert r["worst_rel_err"] < (5e-3 if r["variant"] == "rn" else 1e-4), r
    assert summary["n_cells"] == 4 and (tmp_path / "rows.jsonl").read_text().count("\n") == 4


def test_broadcast_sum_replay_small_cell():
    mod = _load("broadcast_sum_replay")
    row = mod.replay_cell("kda", 16, 64, K=16, H=1)
    e = row["gates"]["dbeta"]
    assert e["summed_then_rounded"] <= e["summed_after_rounding"]
    assert e["summed_then_rounded"] <= 1.02 * e["oracle_rounded"]
    with pytest.raises(SystemExit, match="sgdn and kda"):
        mod.replay_cell("gla", 16, 64, K=16, H=1)


@pytest.mark.slow
def test_ladder_smoke_covers_the_scalar_gate_member(tmp_path):
    """sgdn (KDA with a per-head g) is a ladder member: its arms run chunk_family(member="kda") on the scalar-gate
    kernels and are judged against KDA's float64 definition with the decay broadcast."""
    summary = _load("ladder").main(["--cpu-smoke", "--out", str(tmp_path), "--members", "sgdn"])
    assert summary["e2e_pass"] == summary["e2e_arms"] == 2 and summary["e2e_worst"] < 1e-5
