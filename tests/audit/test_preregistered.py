"""The pre-registered robustness test: population, matched profile, persistence, verdict."""

from __future__ import annotations

from lethe.audit import preregistered as PR


def _row(i, profile, exc01="pass", exc02="pass", status="gated"):
    gates = {g: {"status": "pass"} for g in ("CMP-01", "CMP-02", "ORD-02")}
    gates["EXC-01"] = {"status": exc01}
    gates["EXC-02"] = {"status": exc02}
    return {"id": i, "profile": profile, "status": status, "gates": gates, "final_speedup": 1.0}


def test_fast_math_flags_are_read_from_the_build_flags():
    assert PR.fast_math_compiled("load_inline(..., extra_cuda_cflags=['-O3', '--use_fast_math'])")
    assert PR.fast_math_compiled("extra_cflags=['-Ofast']")
    assert not PR.fast_math_compiled("extra_cuda_cflags=['-O3']  # no --use_fast_mathematics here")
    assert not PR.fast_math_compiled("@triton.jit\ndef k(): pass")


def test_persistence_is_judged_under_each_kernels_matched_profile():
    rows = []
    # a: fails EXC-02 under strict, passes under cuda-default (flush-to-zero allowed) -> flipped
    rows += [_row("a", "strict", exc02="fail"), _row("a", "cuda-default"), _row("a", "fast-math")]
    # b: fails EXC-01 everywhere -> persists
    rows += [_row("b", p, exc01="fail") for p in ("strict", "cuda-default", "fast-math")]
    # c: fast-math kernel failing EXC-01 under strict and cuda-default, passing under fast-math -> flipped
    rows += [_row("c", "strict", exc01="fail"), _row("c", "cuda-default", exc01="fail"), _row("c", "fast-math")]
    # d: passes strict -> not in the population
    rows += [_row("d", p) for p in ("strict", "cuda-default", "fast-math")]
    res = PR.evaluate(rows, {"c": True})
    assert (res["population"], res["persisted"]) == (3, 1)
    assert res["verdict"] == "not robust" and abs(res["rate"] - 1 / 3) < 1e-12
    assert {f["id"]: f["matched"] for f in res["flipped"]} == {"a": "cuda-default", "c": "fast-math"}
    assert res["fast_math_kernels"] == 1 and res["denominator"] == 4
    # Had c been compiled without fast math, its cuda-default row would decide: it persists.
    assert PR.evaluate(rows, {})["persisted"] == 2


def test_no_population_is_no_evidence():
    rows = [_row("d", p) for p in ("strict", "cuda-default", "fast-math")]
    assert PR.evaluate(rows, {})["verdict"] == "no evidence"
