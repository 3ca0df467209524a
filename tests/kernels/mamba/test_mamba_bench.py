"""The Mamba benchmark's shared code (lethe.kernels.mamba.bench) and its driver's CPU dry run."""

import json
import math
from pathlib import Path

import pytest
import torch
from lethe.kernels.mamba import bench
from lethe.kernels.mamba.complex_scan_rope.reference import complex_scan_rope_ref

ROOT = Path(__file__).resolve().parents[3]
PUBLISHED = ROOT / "data" / "published"


def mamba3_siso_as_documented(Q, K, V, ADT, DT, Trap, Q_bias, K_bias, Angles):
    """mamba3_siso_fwd's output written from its documented equations (not its code), float64, no D / Z / initial
    state: with gamma_t = DT_t sigmoid(Trap_t) and the trapezoid's shifted term DT_{t+1} (1 - sigmoid(Trap_{t+1})),
    K_s is biased, rotated by Angles_s and scaled by their sum; Q_t biased and rotated by Angles_t;
    y_t = sum_{s<=t} exp(sum_{s<r<=t} ADT_r) (Q_t . K_s) V_s."""
    f = lambda t: t.double()  # noqa: E731
    Q, K, V, ADT, DT, Trap, Angles = map(f, (Q, K, V, ADT, DT, Trap, Angles))
    b, L, H, N = Q.shape
    sig = torch.sigmoid(Trap)
    gam = DT * sig
    shifted = torch.zeros_like(DT)
    shifted[..., :-1] = DT[..., 1:] * (1 - sig[..., 1:])
    scale = (gam + shifted).transpose(1, 2)[..., None]  # [b, L, H, 1]

    def rot(X, ang):
        S = ang.shape[-1]
        out = X.clone()
        c, s = torch.cos(ang), torch.sin(ang)
        e, o = X[..., 0:2 * S:2], X[..., 1:2 * S:2]
        out[..., 0:2 * S:2], out[..., 1:2 * S:2] = c * e - s * o, s * e + c * o
        return out

    q = rot(Q + f(Q_bias), Angles)
    k = rot(K + f(K_bias), Angles) * scale
    cs = torch.cumsum(ADT, -1).transpose(1, 2)  # [b, L, H]
    y = torch.zeros_like(V)
    for t in range(L):
        w = torch.exp(cs[:, t:t + 1] - cs[:, :t + 1])  # [b, t+1, H]
        sc = (q[:, t:t + 1] * k[:, :t + 1]).sum(-1) * w
        y[:, t] = (sc[..., None] * V[:, :t + 1]).sum(1)
    return y


def test_c4_official_mapping_is_our_rotary_scan():
    """C4's arguments mapped to mamba3_siso_fwd's convention (sign of the cumulative angle, Euler trapezoid, K = B,
    Q = C) give our rotary scan exactly under the official op's documented equations (float64)."""
    shape = dict(batch=2, seq_len=9, nheads=2, headdim=3, n_state=6, num_angles=2)
    x = {k: v.double() for k, v in bench.make_inputs("C4", shape, torch.float32, "cpu").items()}
    args = [x[k] for k in ("x", "dt", "A", "B", "C", "theta")]
    got = mamba3_siso_as_documented(*bench.c4_official_args(*args))
    want = complex_scan_rope_ref(*args)
    # the angles were reduced mod 2 pi in float32 and Trap's sigmoid is 1 - 2^-14427: float32 rounding is all
    assert (got - want).abs().max() <= 1e-5 * want.abs().max()


def test_c4_official_mapping_with_the_other_sign_differs():
    """The check above can fail: the opposite angle sign is a different op."""
    shape = dict(batch=1, seq_len=9, nheads=2, headdim=3, n_state=6, num_angles=2)
    x = {k: v.double() for k, v in bench.make_inputs("C4", shape, torch.float32, "cpu").items()}
    args = [x[k] for k in ("x", "dt", "A", "B", "C", "theta")]
    off = list(bench.c4_official_args(*args))
    off[-1] = -off[-1]
    got = mamba3_siso_as_documented(*off)
    want = complex_scan_rope_ref(*args)
    assert (got - want).abs().max() > 1e-2 * want.abs().max()


def test_plan_takes_record_shapes_and_model_shapes():
    cells = bench.plan(["C1", "C5"], "default", PUBLISHED)
    c1 = [s for op, s, _ in cells if op == "C1"]
    assert c1[0] == bench.record_shapes("C1", PUBLISHED)[0]
    for s in bench.MODEL_SHAPES["scan"]:
        assert s in c1
    assert all(model == (s in bench.MODEL_SHAPES[bench.OPS[op]["family"]]) for op, s, model in cells)
    every = bench.plan(["C1"], "records", PUBLISHED)
    assert len(every) == len({json.dumps(s, sort_keys=True) for _, s, _ in every}) >= 5


def test_check_rejects_a_side_off_by_a_relative_1e_3():
    """A side whose output is ours times (1 + 1e-3) is outside the float32 bound at a short sequence; the torch
    path is inside it."""
    shape = dict(batch=2, seq_len=12, d_model=8, n_state=4)
    x = bench.make_inputs("C1", shape, torch.float32, "cpu")
    impls = bench.sides("C1", {})
    impls = {"ours_triton": impls["torch_path"], "torch_path": impls["torch_path"],
             "wrong": bench.Side(lambda x_, s: tuple(y * (1 + 1e-3) for y in impls["torch_path"].run(x_, s)))}
    res = bench.check("C1", shape, torch.float32, x, impls, oracle=True)
    assert res["pairs"]["torch_path"]["pass"] and res["pairs"]["float64_oracle"]["pass"]
    assert not res["pairs"]["wrong"]["pass"] and not res["pass"]


def test_min_bytes_counts_inputs_and_outputs():
    s = dict(batch=1, seq_len=10, d_model=4, n_state=2)
    # u, delta, y: 3 * 40; B, C: 2 * 20; A: 8, D: 4 -> 172 elements of 4 bytes
    assert bench.min_bytes("C1", s, torch.float32) == 4 * 172
    assert bench.min_bytes("C1", s, torch.bfloat16) == 2 * 172


def run_driver(tmp_path, *extra):
    from experiments.mamba import bench as driver

    rc = driver.main(["--dry-run", "--out", str(tmp_path), "--iters", "2", "--warmup", "0", "--input-sets", "1",
                      "--dtypes", "float32", *extra])
    return rc, json.loads((tmp_path / "bench.json").read_text())


@pytest.mark.slow
def test_dry_run_checks_then_times(tmp_path):
    rc, doc = run_driver(tmp_path, "--ops", "C1")
    assert rc == 0 and doc["status"] == "complete" and doc["all_checks_pass"]
    (row,) = doc["rows"]
    assert {"ours_triton", "ours_triton_chunk_parallel", "torch_path"} <= set(row["impls"])
    assert row["check"]["pairs"]["float64_oracle"]["pass"]
    assert row["impls"]["ours_triton"]["median_ms"] > 0
    if not doc["official"]["selective_scan_fn"]["importable"]:
        assert "official_cuda" in row["not_timed"]
    assert (tmp_path / "provenance.json").exists()


def test_slow_sides_can_be_left_out_and_say_so(tmp_path):
    rc, doc = run_driver(tmp_path, "--ops", "C1", "--slow-sides", "none")
    (row,) = doc["rows"]
    assert "torch_path" not in row["impls"] and "slow side" in row["not_timed"]["torch_path"]
    assert "ours_triton" in row["impls"]


def test_budget_stops_cleanly_with_partial_status(tmp_path):
    rc, doc = run_driver(tmp_path, "--ops", "C1,C3", "--max-s", "0")
    assert doc["status"] == "partial" and doc["rows"] == []
    assert [c["op"] for c in doc["not_run"]] == ["C1", "C3"]


@pytest.mark.parametrize("op", ["C2", "C6"])
@pytest.mark.slow
def test_backward_sides_return_every_gradient(op):
    shape = bench.plan([op], "default", PUBLISHED, dry_run=True)[0][1]
    x = bench.make_inputs(op, shape, torch.float32, "cpu")
    side = bench.sides(op, {})["ours_triton"]
    grads = side.run(x, side.setup(x))
    assert len(grads) == len(bench.magnitudes(op, x))
    assert all(g is not None and math.isfinite(float(g.abs().max())) for g in grads)


@pytest.mark.parametrize("op", ["C5", "C6"])
@pytest.mark.slow
def test_block_chunk_parallel_sides_pass_the_check(op):
    """C5 / C6 carry their chunk-parallel launches as sides of their own (timed beside the serial one), checked
    against ours and the float64 oracle with the chunked order's bound; at a sequence longer than the bench's
    chunk, so the carry between chunks is part of what is checked."""
    shape = dict(batch=1, l_out=bench.CP_CHUNK + 5, d_model=4, n_state=2, conv_k=4)
    x = bench.make_inputs(op, shape, torch.float32, "cpu")
    impls = {k: v for k, v in bench.sides(op, {}).items() if k == "ours_triton" or "chunk_parallel" in k}
    assert len(impls) == (2 if op == "C5" else 3)
    res = bench.check(op, shape, torch.float32, x, impls, oracle=True)
    assert res["pass"], res
    assert all(side.extra_steps(shape) > 0 for name, side in impls.items() if name != "ours_triton")


def test_skip_timed_sides_are_checked_not_timed_at_model_shapes(tmp_path):
    rc, doc = run_driver(tmp_path, "--ops", "C1", "--slow-sides", "none", "--skip-timed", "ours_triton")
    rows = {r["model_shape"]: r for r in doc["rows"]}
    model = rows[True]
    assert "ours_triton" not in model["impls"] and "--skip-timed" in model["not_timed"]["ours_triton"]
    assert model["check"]["pass"] and model["check"]["pairs"]  # ours_triton still anchors the correctness check
    assert "ours_triton_chunk_parallel" in model["impls"]
    if False in rows:  # the records' shapes time every side
        assert "ours_triton" in rows[False]["impls"]
