"""The false-fail table and the failure list, rendered from a small fixture of rows."""

from __future__ import annotations

import json

import pytest

from lethe.trusted import table as T
from lethe.trusted.run import REF_BUDGET_PREFIX
from lethe.verifier import records as R
from lethe.verifier.gates import GATE_IDS


def _row(kid, profile, fails=(), na=(), status="gated", error="", kind="self", ratio=2.5, device="cpu"):
    gates = {}
    for g in GATE_IDS:
        s = "fail" if g in fails else "na" if g in na else "pass"
        ev = {"probes": {"rand0": {"status": s, "outputs": [{"max_err_over_tol": ratio if s == "fail" else 0.1}]}}}
        gates[g] = {"status": s, "reason": f"{g} reason" if s == "fail" else "", "evidence": json.dumps(ev),
                    "seed": 0}
    if status != "gated":
        gates = R.na_gates(f"row status {status}", 0)
    return R.make_row(id=kid, profile=profile, status=status, error=error, gates=gates, op_class=kind, device=device)


EXPL = [
    {"kernel": "L1/2_*", "gate": "ORD-02", "class": "real", "cause": "atomics", "why": "torch index_add is racy"},
    {"kernel": "L1/3_Soft*", "gate": "CMP-02", "class": "false_fail", "cause": "grad bound",
     "why": "gradient bound does not grow with the row", "profiles": ["strict"]},
]


@pytest.fixture
def rows():
    out = []
    for p in T.PROFILES:
        out.append(_row("L1/1_Relu", p, na=("RES-02",)))
        out.append(_row("L1/2_Index", p, fails=("ORD-02",) if p != "fast-math" else (), na=("RES-02",)))
        out.append(_row("L1/3_Softmax", p, fails=("CMP-02",), ratio=1.57, na=("RES-02",)))
        out.append(_row("L1/4_Cum:hand", p, fails=("EXC-01",), ratio=0.02, kind="hand", na=("RES-02", "CMP-02")))
        out.append(_row("L1/5_Big", p, status="timeout", error=REF_BUDGET_PREFIX + " (120 s)"))
        out.append(_row("L1/6_Crash:hand", p, status="crash", error="sandbox crash: SIGSEGV", kind="hand"))
        out.append(_row("L1/7_Slow:hand", p, status="timeout", error="candidate exceeded 120s", kind="hand"))
    return out


def test_gate_counts_classify_each_failure(rows):
    strict = T.gate_counts(rows, EXPL, "strict")
    assert strict["ORD-02"] == {"applicable": 4, "fail": 1, "real": 1, "false": 0}
    assert strict["CMP-02"] == {"applicable": 3, "fail": 1, "real": 0, "false": 1}
    assert strict["EXC-01"] == {"applicable": 4, "fail": 1, "real": 0, "false": 1}  # unexplained counts
    assert strict["RES-02"]["applicable"] == 0
    # The CMP-02 entry names strict only: under cuda-default the same failure is unexplained, still false.
    assert T.gate_counts(rows, EXPL, "cuda-default")["CMP-02"]["false"] == 1
    assert T.gate_counts(rows, EXPL, "fast-math")["ORD-02"]["fail"] == 0


def test_failures_list_every_failing_gate_once_with_profiles_ratio_and_class(rows):
    fails = T.failures(rows, EXPL)
    keys = [(f["kernel"], f["gate"]) for f in fails]
    assert keys == [("L1/3_Softmax", "CMP-02"), ("L1/4_Cum:hand", "EXC-01"), ("L1/2_Index", "ORD-02"),
                    ("L1/6_Crash:hand", "row")]
    by = dict(zip(keys, fails, strict=True))
    assert {f["device"] for f in fails} == {"cpu"}
    assert by[("L1/2_Index", "ORD-02")]["profiles"] == "strict,cuda-default"
    assert by[("L1/2_Index", "ORD-02")]["class"] == "real"
    assert by[("L1/3_Softmax", "CMP-02")]["ratio"] == pytest.approx(1.57)
    assert by[("L1/4_Cum:hand", "EXC-01")]["class"] == "unexplained"
    assert by[("L1/6_Crash:hand", "row")]["status"] == "crash"
    assert all(k[0] not in ("L1/5_Big", "L1/7_Slow:hand") for k in keys)  # timeouts: coverage, not failures


def test_table_rows_rates_and_gpu_column(rows):
    tr = {r["gate"]: r for r in T.table_rows(rows, EXPL)}
    assert tr["CMP-02"]["rate_strict"] == "33.3% (1/3)"
    assert tr["ORD-02"]["rate_strict"] == "0.0% (0/4)"
    assert tr["RES-02"]["rate_strict"] == "–"
    assert all(r["gpu"] == T.NOT_RUN_GPU for r in tr.values())
    gpu = [r for r in rows if r["profile"] == "strict" and r["id"] == "L1/1_Relu"]
    assert T.table_rows(rows, EXPL, gpu)[0]["gpu"] == "0.0% (0/1)"
    # Kernels: 4 graded; L1/2 fails only a real gate, L1/3 and the hand kernel fail false ones.
    assert tr["any gate (kernels)"]["rate_strict"] == "50.0% (2/4)"
    assert (tr["any gate (kernels)"]["fail"], tr["any gate (kernels)"]["real"]) == (3, 1)
    assert tr["any gate (hand-written)"]["rate_strict"] == "100.0% (1/1)"
    assert tr["any gate (kernels)"]["rate_fast"] == "50.0% (2/4)"


def test_devices_key_explains_a_gpu_only_failure_apart_from_the_cpu_one():
    """An entry with ``devices`` matches rows of those devices only: the same (kernel, gate) failing on both
    columns gets the CUDA entry on the GPU rows and the unrestricted one (or none) on the CPU rows, and the
    failure list keeps one record per device."""
    ex = [{"kernel": "L2/5_*", "gate": "ORD-02", "class": "real", "cause": "cudnn atomics", "why": "w1",
           "devices": ["cuda"]},
          {"kernel": "L2/5_*", "gate": "ORD-02", "class": "false_fail", "cause": "other", "why": "w2"}]
    assert T.explain("L2/5_Conv", "ORD-02", "strict", "cuda", ex)["cause"] == "cudnn atomics"
    assert T.explain("L2/5_Conv", "ORD-02", "strict", "cpu", ex)["cause"] == "other"
    assert T.explain("L2/5_Conv", "ORD-02", "strict", "cpu", ex[:1])["class"] == "unexplained"
    cpu = [_row("L2/5_Conv", p, fails=("ORD-02",), na=("RES-02",)) for p in T.PROFILES]
    gpu = [_row("L2/5_Conv", p, fails=("ORD-02",), na=("RES-02",), device="cuda") for p in T.PROFILES]
    fails = T.failures(cpu + gpu, ex[:1])
    assert [(f["device"], f["class"]) for f in fails] == [("cpu", "unexplained"), ("cuda", "real")]
    assert T.gate_counts(gpu, ex[:1], "strict")["ORD-02"] == {"applicable": 1, "fail": 1, "real": 1, "false": 0}
    assert T.gate_counts(cpu, ex[:1], "strict")["ORD-02"]["false"] == 1
    tr = {r["gate"]: r for r in T.table_rows(cpu, ex[:1], [r for r in gpu if r["profile"] == "strict"])}
    assert (tr["ORD-02"]["rate_strict"], tr["ORD-02"]["gpu"]) == ("100.0% (1/1)", "0.0% (0/1)")


def test_kernel_and_gate_may_be_lists_of_patterns():
    ex = [{"kernel": ["L2/3[39]_*", "L2/52_*"], "gate": ["EXC-02", "PRC-02"], "class": "false_fail", "cause": "c",
           "why": "w"}]
    assert T.explain("L2/39_Gemm", "PRC-02", "strict", "cpu", ex)["cause"] == "c"
    assert T.explain("L2/52_Conv", "EXC-02", "strict", "cuda", ex)["cause"] == "c"
    assert T.explain("L2/52_Conv", "ORD-01", "strict", "cpu", ex)["class"] == "unexplained"
    assert T.explain("L2/41_Gemm", "EXC-02", "strict", "cpu", ex)["class"] == "unexplained"


def test_max_ratio_reads_nested_evidence():
    ev = json.dumps({"probes": {"a": {"outputs": [{"max_err_over_tol": 0.5}]},
                                "grad": {"checks": {"input0": {"max_err_over_tol": 3.0}}}}})
    assert T.max_ratio(ev) == 3.0
    assert T.max_ratio(json.dumps({"probes": {"repeat": {"status": "fail"}}})) is None
    assert T.failing_probes(json.dumps({"probes": {"b": {"status": "fail"}, "a": {"status": "pass"}}})) == ["b"]


def test_render_writes_both_tables(rows, tmp_path):
    summary = {"by_kind": {k: {"members": 3, "excluded_static": 1, "eligible": 2, "attempted": 2,
                               "not_reached": 0, "statuses": {"gated": 2, "candidate_over_time_budget": 1},
                               "excluded_static_reasons": {"elements": 1}} for k in ("self", "hand")},
               "budget": {"max_numel": 8, "max_flops": 5e8}, "machine": "a CPU",
               "run": {"budget_s": 120, "ref_memory_mb": 4096, "memory_mb": 2048}}
    paths = [tmp_path / n for n in ("t.md", "t.tex", "f.md", "f.tex")]
    T.render(rows, summary, EXPL, *paths)
    md = paths[0].read_text()
    assert "CMP-02" in md and "33.3% (1/3)" in md and T.NOT_RUN_GPU in md and "a CPU" in md
    assert "1 excluded by the size budget (1 by element count)" in md
    assert "1 not graded (the candidate outran the per-kernel time budget)" in md
    assert "4,096 MB for the reference, 2,048 MB for the candidate" in md
    fmd = paths[2].read_text()
    assert "gradient bound does not grow with the row" in fmd and "real property of that code" in fmd
    assert "unexplained" in fmd and "1.57" in fmd
    assert "\\begin{table" in paths[1].read_text() and "ORD-02" in paths[3].read_text()
    first = [p.read_bytes() for p in paths]
    T.render(rows, summary, EXPL, *paths)
    assert [p.read_bytes() for p in paths] == first
    # with GPU rows, their failures are listed too, each under its device, and the column has the card's name
    gpu = [{**r, "device": "cuda"} for r in rows if r["profile"] == "strict"]
    T.render(rows, summary, EXPL, *paths, gpu_rows=gpu, gpu_label="H100")
    assert "| cuda |" in paths[2].read_text() and "| cpu |" in paths[2].read_text()
    assert "H100 (strict)" in paths[0].read_text() and "cuda for the H100 column" in paths[2].read_text()


def test_gpu_label_is_the_card_model_from_the_provenance():
    assert T.gpu_label({"gpu": "NVIDIA H100 80GB HBM3"}) == "H100"
    assert T.gpu_label({"gpu": "NVIDIA H200"}) == "H200"
    assert T.gpu_label({"gpu": "Some Card"}) == "Some Card"
    assert T.gpu_label({}) == "GPU"


def test_explanations_file_is_well_formed():
    ex = T.load_explanations()
    assert all(e["class"] in ("real", "false_fail") and e["why"] for e in ex)


def test_bad_explanation_is_rejected(tmp_path):
    p = tmp_path / "e.yaml"
    p.write_text("explanations:\n- {kernel: a, gate: CMP-01, class: maybe, cause: x, why: y}\n")
    with pytest.raises(ValueError, match="class"):
        T.load_explanations(p)
    p.write_text("explanations:\n- {kernel: a, gate: CMP-01, class: real, cause: x, why: y, devices: [gpu]}\n")
    with pytest.raises(ValueError, match="devices"):
        T.load_explanations(p)


def test_fix_check_compares_the_same_kernels_before_and_after(rows, tmp_path):
    after = []
    for p in T.PROFILES:
        after.append(_row("L1/3_Softmax", p, na=("RES-02",)))  # the fixed defect: clean now
        after.append(_row("L1/2_Index", p, fails=("ORD-02",) if p == "strict" else (), na=("RES-02",)))
        after.append(_row("L1/5_Big", p, status="timeout", error=REF_BUDGET_PREFIX + " (120 s)"))
    recs = {r["kernel"]: r for r in T.fix_check_rows([("CPU", rows, after)], EXPL)}
    assert set(recs) == {"L1/3_Softmax", "L1/2_Index", "L1/5_Big"}  # the kernels re-verified, nothing else
    assert recs["L1/3_Softmax"]["before"] == "CMP-02" and recs["L1/3_Softmax"]["after"] == "none"
    assert recs["L1/3_Softmax"]["clean"] and recs["L1/3_Softmax"]["remaining"] == ""
    assert recs["L1/2_Index"]["after"] == "ORD-02" and recs["L1/2_Index"]["remaining"] == "atomics"
    assert not recs["L1/2_Index"]["clean"]
    assert recs["L1/5_Big"]["after"] == "timeout (budget)" and not recs["L1/5_Big"]["clean"]
    T.render_fix_check([("CPU", rows, after)], EXPL, {"before": "a" * 40, "after": "b" * 40},
                       tmp_path / "f.md", tmp_path / "f.tex")
    text = (tmp_path / "f.md").read_text()
    assert "CPU: 1 of 3 clean" in text and "aaaaaaa" in text and "bbbbbbb" in text
