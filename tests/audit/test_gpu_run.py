"""The GPU run's table by candidate origin (lethe.audit.gpu_run)."""

from __future__ import annotations

from lethe.audit import gpu_run as G


def _row(i, profile, status="gated", fail=()):
    gates = {g: {"status": "fail" if g in fail else "pass"} for g in ("CMP-01", "EXC-01", "PRC-02")}
    return {"id": i, "profile": profile, "status": status, "gates": gates if status == "gated" else {}}


def test_rows_count_each_origin_per_profile_and_name_failing_gates():
    rows = []
    for p in G.PROFILES:
        rows += [_row("a", p), _row("b", p, fail=("EXC-01",) if p != "fast-math" else ()),
                 _row("c", p, status="ref_broken"), _row("d", p, fail=("PRC-02",))]
    origin = {"a": "leaderboard", "b": "leaderboard", "c": "leaderboard", "d": "self"}
    t = {r["origin"]: r for r in G.table_rows(rows, origin)}
    lb = t[G.ORIGIN_LABEL["leaderboard"]]
    assert (lb["kernels"], lb["graded"], lb["strict"], lb["cuda-default"], lb["fast-math"]) == (3, 2, 1, 1, 2)
    assert lb["failing"] == "EXC-01 1" and lb["not_graded"] == "ref_broken 1"
    assert t[G.ORIGIN_LABEL["self"]]["failing"] == "PRC-02 1"
