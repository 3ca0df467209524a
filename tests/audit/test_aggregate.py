"""The aggregation rules, on synthetic rows and on the paper's published per-row records."""

from __future__ import annotations

import json

import pytest

from lethe.audit import aggregate as agg
from lethe.audit import published

GATES = ("CMP-01", "CMP-03", "ORD-01", "ORD-02", "ORD-03", "PRC-01", "PRC-02", "EXC-01", "EXC-02", "RES-01")


def gated(i, cls="matmul", fails=(), errors=None, aliasing=False, speedup=1.5, profile=None, cmp03_reason=""):
    gates = {g: {"status": "pass", "reason": ""} for g in GATES}
    for g in fails:
        gates[g] = {"status": "fail", "reason": cmp03_reason if g == "CMP-03" else "x"}
    for g, reason in (errors or {}).items():
        gates[g] = {"status": "error", "reason": reason}
    row = {"id": str(i), "op_class": cls, "status": "gated", "final_speedup": speedup, "error": None,
           "output_aliasing": aliasing, "gates": gates}
    if profile:
        row["profile"] = profile
    return row


def failed(i, status, error, cls="matmul", speedup=1.5):
    return {"id": str(i), "op_class": cls, "status": status, "final_speedup": speedup, "error": error}


def test_funnel_drops_in_order_and_keeps_reasons():
    rows = [
        gated(1),
        gated(2, speedup=0.0),  # not accepted, even though it gated
        failed(3, "not_auditable", "no floating-point tensor input"),
        failed(4, "ref_broken", "RuntimeError: [ref-inapplicable] ..."),
        failed(5, "cand_native_fail", "CompilationError: at 3:4: ..."),
        failed(6, "cand_native_fail", "PTXASError: ptxas failed"),
        failed(7, "cand_native_fail", "ValueError: Conflicting meta-parameters"),
        failed(8, "ref_broken", "RuntimeError", speedup=-1.0),
        failed(9, "cand_load_fail", "RuntimeError: could not unpickle result"),
    ]
    f = agg.funnel([agg.normalize_row(r) for r in rows])
    assert (f["rows"], f["accepted"], f["reference_executable"], f["not_toolchain_artifact"]) == (9, 7, 5, 2)
    assert f["dropped_ids"] == {
        agg.NO_VERDICT: [],
        agg.NOT_ACCEPTED: ["2", "8"],
        agg.REFERENCE_NOT_EXECUTABLE: ["3", "4"],
        agg.TOOLCHAIN_ARTIFACT: ["5", "6", "9"],
    }
    # Without the acceptance step the not-accepted rows flow on to the later stages.
    g = agg.funnel([agg.normalize_row(r) for r in rows], require_accepted=False)
    assert g["dropped"] == {agg.NOT_ACCEPTED: 0, agg.NO_VERDICT: 0, agg.REFERENCE_NOT_EXECUTABLE: 3,
                            agg.TOOLCHAIN_ARTIFACT: 3}


def test_rows_without_a_verdict_are_dropped_not_charged():
    rows = [failed(1, "no_candidate", "no ```python block"), failed(2, "harness_error", "KeyError: x"), gated(3)]
    rows = [agg.normalize_row(r) for r in rows]
    f = agg.funnel(rows)
    assert f["dropped"][agg.NO_VERDICT] == 2 and f["not_toolchain_artifact"] == 1
    assert all(not agg.channels(r) for r in rows)


def test_artifact_rule_reads_the_leading_exception_only():
    assert agg.is_toolchain_artifact(failed(1, "cand_native_fail", "OutOfResources: out of resource: shared"))
    assert agg.is_toolchain_artifact(failed(1, "cand_native_fail", "UnsupportedLanguageConstruct: at 2:3"))
    # A traceback that merely mentions a compile error is still the candidate's own runtime failure.
    assert not agg.is_toolchain_artifact(failed(1, "cand_native_fail", "TypeError: ... CompilationError"))
    assert not agg.is_toolchain_artifact(gated(1))


def test_channels_floor_is_a_union_and_exc02_is_held_out():
    rows = [
        gated(1, fails=("EXC-01", "ORD-02")),  # two channels, one kernel
        gated(2, aliasing=True),
        gated(3, errors={"ORD-01": "gate crashed: AcceleratorError: CUDA error: illegal memory access"}),
        gated(4, errors={"PRC-01": "gate crashed: OutOfMemoryError: CUDA out of memory. Tried to allocate"}),
        gated(5, fails=("EXC-02",)),
        gated(6, fails=("CMP-01",)),
        failed(7, "sandbox_timeout", ""),
        gated(8),
    ]
    den = agg.denominator([agg.normalize_row(r) for r in rows])
    assert agg.floor(den) == {"kernels": 4, "denominator": 8, "rate": 0.5}
    assert agg.floor(den, agg.FLOOR_WITH_EXC02_CHANNELS)["kernels"] == 5
    ch = agg.per_channel(den)
    assert (ch["exc01"], ch["ord02"], ch["aliasing"], ch["crash"], ch["pre_gate"], ch["exc02"]) == (1, 1, 1, 1, 1, 1)
    # any violation: gate fails (1, 5, 6), the CUDA crash (3), the pre-gate failure (7); aliasing alone and an
    # OOM gate crash are not violations under the published rule.
    assert agg.any_violation(den)["kernels"] == 5


def test_cmp03_split_shape_rejection_from_value_mismatch():
    rows = [
        gated(1, fails=("CMP-03",), cmp03_reason="shape=(8, 8): exception — Expected in_features=4, got 8"),
        gated(2, fails=("CMP-03",), cmp03_reason="shape=(8, 8): output shape mismatch torch.Size([8]) vs ..."),
        gated(3, fails=("CMP-03",), cmp03_reason="shape=(8, 8): max_err=0.3 > atol=1e-05"),
    ]
    ch = [agg.channels(agg.normalize_row(r)) for r in rows]
    assert "cmp03_hard" in ch[0] and "cmp03_value" in ch[1] and "cmp03_value" in ch[2]


def test_class_sensitivity_arithmetic():
    rows = [gated(i, cls="reduction", fails=("EXC-01",)) for i in range(3)] + [gated(10 + i, cls="conv") for i in range(5)]
    rows.append(gated(99, cls="conv", fails=("ORD-02",)))
    cs = agg.class_sensitivity(agg.denominator([agg.normalize_row(r) for r in rows]))
    assert cs["reduction"] == {"kernels": 3, "findings": 3, "own_floor_rate": 1.0,
                               "corpus_floor_without_class": round(1 / 6, 4)}
    assert cs["conv"]["corpus_floor_without_class"] == 1.0


def test_profiles_are_never_pooled():
    rows = [gated(1, profile="strict"), gated(1, profile="fast-math", fails=("EXC-01",)),
            gated(2, profile="strict", fails=("ORD-02",)), gated(2, profile="fast-math")]
    out = agg.aggregate(rows)
    assert out["headline_profile"] == "strict"
    assert out["floor"]["denominator"] == 2
    assert out["by_profile"]["fast-math"]["floor"] == {"kernels": 1, "denominator": 2, "rate": 0.5}
    assert out["by_profile"]["strict"]["floor"]["kernels"] == 1


def test_parquet_style_rows_normalize():
    r = gated(1, fails=("EXC-01",))
    r["gates"] = json.dumps(r["gates"])
    r["error"] = float("nan")
    assert agg.channels(agg.normalize_row(r)) == {"exc01"}
    assert not agg.is_accepted({"final_speedup": float("nan")})


@pytest.fixture(scope="module")
def reproduced():
    return published.reproduce()


def test_published_headline_figures(reproduced):
    f = reproduced["funnel"]
    assert (f["rows"], f["accepted"], f["reference_executable"], f["not_toolchain_artifact"]) == (3134, 2970, 2919, 2638)
    assert reproduced["floor"] == {"kernels": 1043, "denominator": 2638, "rate": 0.3954}
    assert reproduced["floor_with_exc02"]["kernels"] == 1154
    assert f"{100 * 1154 / 2638:.1f}" == "43.7"
    assert reproduced["any_violation"]["rate"] == 0.6213
    assert sum(len(v) for v in f["dropped_ids"].values()) == 3134 - 2638


def test_every_published_figure_matches(reproduced):
    bad = [c for c in reproduced["checks"] if not c["match"]]
    assert not bad, bad[:5]
    assert reproduced["checks_total"] >= 200  # the comparison really ran over all three published files
    names = {c["name"] for c in reproduced["checks"]}
    for cls in ("attention", "conv", "matmul", "norm", "reduction", "scan", "softmax"):
        assert f"class_sensitivity.{cls}.corpus_floor_without_class" in names


def test_committed_aggregates_are_current(reproduced):
    path = published.PUBLISHED_DIR.parents[1] / "results" / "published" / "aggregates.json"
    if not path.exists():
        pytest.skip("results/published/aggregates.json not generated yet")
    assert path.read_text() == published.dumps(reproduced)
