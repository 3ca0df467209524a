"""The committed H200 results behind the Triton forward's defaults, checked on the CPU: the launch sweeps are
well-formed and the launch table follows what they measured, the committed ladders ran with the forward the code
now defaults to, and the CPU error-source replay supports what docs/native.md says of it. A default changed
without its measurement, or a result edited by hand, fails here."""

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SWEEPS = ROOT / "results" / "gdn" / "launch_sweep"


def _sweep(name):
    return json.loads((SWEEPS / name / "sweep.json").read_text())


@pytest.mark.parametrize("folder", sorted(p.name for p in SWEEPS.iterdir() if (p / "sweep.json").exists()))
def test_launch_sweeps_are_well_formed(folder):
    doc = _sweep(folder)
    prov = json.loads((SWEEPS / folder / "provenance.json").read_text())
    assert doc["schema"] == "lethe.gdn.launch_sweep/1" and prov["gpu"] == "NVIDIA H200" and prov["git_sha"]
    for r in doc["rows"]:
        if r.get("status") != "ok":
            continue
        assert r["kernel_ms"] > 0 and r["fwd_bwd_wall_ms"] > r["kernel_ms"]
        assert r["max_rel_vs_default"] <= doc["same_rel"]
        if r["bitwise_equal_to_default"]:
            assert r["max_rel_vs_default"] == 0.0
    for key, best in doc["best"].items():  # the summary is the rows' minimum
        kernel, v, t = key.split("|")
        ok = [r for r in doc["rows"] if r.get("status") == "ok" and r["kernel"] == kernel
              and f"V{r['V']}" == v and f"T{r['T']}" == t]
        assert best["best_ms"] == min(r["kernel_ms"] for r in ok)


def test_launch_table_follows_the_sweeps():
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    def best(folder, key):
        return _sweep(folder)["best"][key]["best_config"]

    for name in ("wy_a_kernel", "wy_apply_kernel"):
        assert FWD_LAUNCH[name]["num_warps"] == best("state_fwd", f"{name}|V128|T4096")["num_warps"]
    assert FWD_LAUNCH["wy_inverse_kernel"]["num_warps"] == best("split",
                                                                "wy_inverse_kernel|V128|T4096")["num_warps"]
    out = best("output_nvl", "output_fwd_kernel|V128|T4096")
    assert {k: FWD_LAUNCH["output_fwd_kernel"][k] for k in ("BV", "NVL", "num_warps")} == \
        {k: out[k] for k in ("BV", "NVL", "num_warps")}
    # the output kernel writes o itself: bitwise the buffer-and-copy path's on the H200, and faster
    direct = _sweep("output_direct")
    assert FWD_LAUNCH["output_fwd_kernel"]["DIRECT"] == best("output_direct",
                                                             "output_fwd_kernel|V128|T4096")["DIRECT"] == 1
    assert all(r["bitwise_equal_to_default"] for r in direct["rows"] if r["status"] == "ok")
    # PREC "auto" (TF32-rn on the ladder's 16-bit inputs) timed against 3xTF32 at the adopting commit: faster in
    # every kernel and cell (same_rel widened there on purpose: a precision change is not the same computation, the
    # ladders are what decided it)
    for key, b in _sweep("prec_auto")["best"].items():
        assert b["best_config"]["PREC"] == FWD_LAUNCH[key.split("|")[0]]["PREC"] == "auto", key
    # the state kernel: the configuration fastest at T 32k, both d_v (BV 64 wins at T 4k only; docs/native.md)
    for v in (64, 128):
        got = best("state_kend", f"state_fwd_kernel|V{v}|T32768")
        assert {k: FWD_LAUNCH["state_fwd_kernel"][k] for k in got} == got


@pytest.mark.parametrize("name", ["ladder.json", "ladder_hybrid_tc.json"])
def test_committed_ladders_ran_the_default_forward(name):
    from lethe.kernels.gdn.fwd_options import (
        DOT_PRECISION_DEFAULT,
        OUTPUT_PRECISION_DEFAULT,
        WY_INVERSE_DEFAULT,
        resolve_output_precision,
    )

    s = json.loads((ROOT / "results" / "gdn" / name).read_text())["summary"]
    assert s["wy_inverse"] == WY_INVERSE_DEFAULT
    assert s["dot_precision"]["fwd"] == DOT_PRECISION_DEFAULT
    # the GPU ladder's inputs are bf16 and fp16; ladders from before the option existed ran the output kernel at
    # the forward's precision
    assert s["dot_precision"].get("fwd_output", DOT_PRECISION_DEFAULT) == resolve_output_precision(
        OUTPUT_PRECISION_DEFAULT, DOT_PRECISION_DEFAULT, sixteen_bit_inputs=True)
    from lethe.kernels.gdn.fwd_options import resolve_precision
    from lethe.kernels.gdn.triton_fwd import FWD_LAUNCH

    # the PREC kernels as they ran on the 16-bit inputs (recorded since e746f01)
    for kernel, key in (("wy_a_kernel", "fwd_wy_a"), ("wy_apply_kernel", "fwd_wy_apply"),
                        ("state_fwd_kernel", "fwd_state")):
        assert s["dot_precision"][key] == resolve_precision(FWD_LAUNCH[kernel]["PREC"], DOT_PRECISION_DEFAULT,
                                                            sixteen_bit_inputs=True), key

    # recorded since fc35227 (KEND changes GPU roundings); an opt-in switch added after the run may be missing from
    # the record only while it is off (0 or None: the code path the ladder ran)
    ran = s["fwd_launch"]
    assert set(ran) == set(FWD_LAUNCH)
    for kernel, cfg in FWD_LAUNCH.items():
        assert set(ran[kernel]) <= set(cfg), kernel
        assert {k: v for k, v in cfg.items() if k in ran[kernel] or v not in (0, None)} == ran[kernel], kernel
    assert not s.get("launch_overrides")
    assert s["e2e_pass"] == s["e2e_arms"] == 28 and s["complete"]
    # since 99a165f the end-to-end rung pins the returned final state as well
    rows = [r for r in json.loads((ROOT / "results" / "gdn" / name).read_text())["rows"] if r["rung"] == "e2e"]
    assert all(r["errors"]["S_final"] <= r["pin"] for r in rows)


def test_error_source_replay_supports_the_documented_conclusions():
    doc = json.loads((ROOT / "results" / "gdn" / "fwd_error_sources.json").read_text())
    pin = doc["pin_e2e"]
    rows = {(r["member"], r["d_v"], r["T"], r["case"]): r for r in doc["rows"]}
    arms = {k[:3] for k in rows}
    assert len(arms) == 14
    # the summary's bound is recomputed from the rows and the committed H200 ladder with every product at 3xTF32
    base = {(r["member"], r["V"], r["T"]): r["errors"] for r in json.loads(
        (ROOT / "results/gdn/fwd_variants/ladder_htc_split_otf32x3.json").read_text())["rows"]
        if r.get("rung") == "e2e" and r.get("dtype") == "bfloat16"}
    for (m, v, t, _case), r in rows.items():
        want = max(base[(m, v, t)][n] + r["alone"][n] for n in r["alone"])
        assert r["bound_with_h200_default"] == pytest.approx(want, rel=1e-12)
    s = doc["summary"]
    # the H200 tf32 variant is not safe by the bound; the output kernel alone is, and rounding to nearest helps
    assert s["all four + K1's P (the H200 tf32 variant)"]["within_pin_by_bound"] < 14
    assert s["output only"]["within_pin_by_bound"] == 14
    for m, v, t in arms:
        out = rows[(m, v, t, "output only")]
        assert all(out["alone"][n] == 0.0 or n == "o" or out["alone"][n] < 1e-12 for n in out["alone"])
        assert base[(m, v, t)]["o"] + out["alone"]["o"] <= pin
        assert rows[(m, v, t, "output only, round-to-nearest")]["alone"]["o"] < out["alone"]["o"]
    # the next candidates beside the (now default) rounded output kernel: A, W/U or the state scan rounded to nearest
    # stay within the pin by the bound, the backward's K1 operand P does not (docs/native.md)
    for group in ("A", "WU", "state"):
        assert s[f"output + {group}, round-to-nearest"]["within_pin_by_bound"] == 14, group
    assert s["output + K1_P, round-to-nearest"]["within_pin_by_bound"] < 14
    # calibration: o's measured increase under TF32 never exceeds the replayed o error (truncation model)
    for c in doc["calibration"]:
        assert c["bound_holds"]["o"], (c["member"], c["d_v"], c["T"])
