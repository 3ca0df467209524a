"""C1's launch tuning (kernels/mamba/tuning.py): the launch space, the auto rule and its wiring into the chooser,
the error bounds, and the policy comparison on synthetic measurements."""

import math
import random

import pytest
import torch
from lethe.kernels.mamba import forward_chunked_scan, tuning
from lethe.kernels.mamba.tuning import (DEFAULT_CONFIG, LaunchConfig, Shape, evaluate_policies, knn_predict,
                                        launch_space, measured_times, select_scan_mode, static_best)
from mamba_helpers import make_scan_inputs


def test_launch_space_starts_with_the_default_and_names_each_point_once():
    space = launch_space()
    assert space[0] == DEFAULT_CONFIG
    assert len({c.name for c in space}) == len(space) == 14
    assert {c.scan_mode for c in space} == {"serial", "chunk_parallel"}


def test_the_default_tile_is_the_triton_paths_own_block_rule():
    from lethe.kernels.mamba.forward_chunked_scan.triton_path import block_sizes

    for d, n in [(1, 1), (5, 3), (40, 12), (1024, 16), (4096, 128), (4096, 300)]:
        assert DEFAULT_CONFIG.block_d(d, n) == block_sizes(d, n)[0]


def test_bad_configurations_are_refused():
    with pytest.raises(ValueError):
        LaunchConfig("auto")
    with pytest.raises(ValueError):
        LaunchConfig("serial", chunk=0)


def test_auto_rule_by_regime():
    sm = 132
    assert select_scan_mode(1, tuning.CP_MIN_SEQ_LEN - 1, 256, 16, sm) == "serial"  # too few chunks
    assert select_scan_mode(2, 16384, 1024, 16, sm) == "chunk_parallel"  # long, most SMs idle
    assert select_scan_mode(8, 16384, 4096, 128, sm) == "serial"  # the serial grid is saturated
    with pytest.raises(ValueError):
        select_scan_mode(0, 16, 4, 4, sm)


def test_auto_rule_never_prefers_chunk_parallel_for_more_work_in_parallel():
    # more batch, channels or states give the serial walk more programs: once serial, always serial
    for L in (512, 1024, 4096):
        for n in (16, 64):
            modes = [select_scan_mode(b, L, 2048, n, 132) for b in (1, 2, 4, 8, 16, 32)]
            assert modes == sorted(modes, key=lambda m: m == "serial")


def test_chooser_auto_runs_the_rules_mode(monkeypatch):
    x = make_scan_inputs(b=2, L=13, d=6, n=5, dtype=torch.float32)
    for min_len, want in ((10**9, "serial"), (1, "chunk_parallel")):
        monkeypatch.setattr(tuning, "CP_MIN_SEQ_LEN", min_len)
        assert select_scan_mode(2, 13, 6, 5) == want
        auto = forward_chunked_scan(*x, chunk=4, backend="torch", scan_mode="auto")
        explicit = forward_chunked_scan(*x, chunk=4, backend="torch", scan_mode=want)
        assert torch.equal(auto, explicit)
    with pytest.raises(ValueError, match="auto"):
        forward_chunked_scan(*x, backend="torch", scan_mode="parallel")


def test_bounds_grow_with_length_and_chunk_parallel_pays_its_decays():
    s, cp = DEFAULT_CONFIG, LaunchConfig("chunk_parallel", 256)
    assert tuning.forward_error_bound(s, 2048, 16) > tuning.forward_error_bound(s, 1024, 16)
    assert tuning.forward_steps(cp, 1024, 16) == tuning.forward_steps(s, 1024, 16) + 256 * 257
    with pytest.raises(ValueError):
        tuning.gamma(2**24, 2.0**-24)


# ------------------------------------------------------------------ policies on synthetic measurements
SHAPES = [Shape(b, L, d, n) for b in (1, 8) for L in (1024, 16384) for d in (1024, 4096) for n in (16, 128)]


def synthetic_rows(seed=0, drop=()):
    """Times with structure the kNN can learn: chunk_parallel pays at long sequences and small batch, plus noise.
    ``drop``: (shape, config) pairs recorded as a correctness failure."""
    rng = random.Random(seed)
    rows = []
    for s in SHAPES:
        for cfg in launch_space():
            gain = 3.0 if (cfg.scan_mode == "chunk_parallel" and s.seq_len > 4096 and s.batch == 1) else 0.8
            t = (1.0 if cfg == DEFAULT_CONFIG else gain * math.exp(rng.gauss(0, 0.2))) * s.seq_len / 1000
            if cfg.scan_mode == "chunk_parallel" and gain > 1:
                t /= gain * gain
            row = {"shape": {"batch": s.batch, "seq_len": s.seq_len, "d_model": s.d_model, "n_state": s.n_state},
                   "config": cfg.as_dict(), "status": "ok", "median_ms": t}
            if (s, cfg) in drop:
                row.update(status="mismatch", median_ms=None, reason="synthetic")
            rows.append(row)
    return rows


def test_oracle_bounds_every_policy_and_default_is_one():
    res = evaluate_policies(synthetic_rows())
    assert res["shapes"] == len(SHAPES)
    for e in res["per_shape"]:
        assert e["default"]["speedup"] == 1.0
        for pol in tuning.POLICIES:
            assert e[pol]["speedup"] <= e["oracle"]["speedup"]
    g = res["geomean"]
    assert all(g[p] <= g["oracle"] for p in tuning.POLICIES)
    assert g["knn"] > 1.0  # the structure is learnable from the neighbours


def test_knn_with_one_neighbour_returns_a_training_shapes_own_best():
    table = measured_times(synthetic_rows(1))
    for s, times in table.items():
        assert knn_predict(table, s, k=1) == min(times, key=times.get)


def test_leave_one_shape_out_never_reads_the_held_out_shape():
    rows = synthetic_rows(2)
    held = SHAPES[3]
    base = {e["shape"]: e for e in evaluate_policies(rows)["per_shape"]}[held.name]
    for r in rows:  # make every non-default config at the held-out shape look wildly fast
        if tuning.shape_of(r) == held and r["config"]["name"] != DEFAULT_CONFIG.name:
            r["median_ms"] *= 1e-3
    again = {e["shape"]: e for e in evaluate_policies(rows)["per_shape"]}[held.name]
    for pol in ("knn", "static", "selector"):
        assert again[pol]["config"] == base[pol]["config"]
    assert again["oracle"]["speedup"] > base["oracle"]["speedup"]


def test_a_config_that_failed_correctness_is_never_credited():
    table = measured_times(synthetic_rows(3))
    shape = SHAPES[0]
    others = {s: t for s, t in table.items() if s != shape}
    pick = knn_predict(others, shape, k=3)
    assert pick != DEFAULT_CONFIG
    res = evaluate_policies(synthetic_rows(3, drop={(shape, pick)}))
    e = {x["shape"]: x for x in res["per_shape"]}[shape.name]
    assert e["knn"]["fallback"] and e["knn"]["config"] == DEFAULT_CONFIG.name and e["knn"]["speedup"] == 1.0
    # and a config failing at one shape is never the static choice (it is not measured correct everywhere)
    best = static_best(table)
    assert best != DEFAULT_CONFIG
    assert static_best(measured_times(synthetic_rows(3, drop={(SHAPES[1], best)}))) != best


def test_shapes_without_a_timed_default_are_left_out():
    rows = synthetic_rows(4, drop={(SHAPES[0], DEFAULT_CONFIG)})
    assert SHAPES[0] not in measured_times(rows)
    assert evaluate_policies(rows)["shapes"] == len(SHAPES) - 1
