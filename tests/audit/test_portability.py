"""Portability: verdicts of the same kernels lined up across settings, the change classes, the adapters of each
committed result format, the CLI, and the report over the committed results."""

from __future__ import annotations

import json

import pytest

from lethe import cli
from lethe.audit import portability as PT
from lethe.verifier import records


def _gates(**spec):
    """gate -> (status, margin[, probes ran, failing probes]) as observation gates."""
    out = {}
    for g, v in spec.items():
        g = g.replace("_", "-")
        gate = {"status": v[0], "reason": f"{g} {v[0]}", "margin": v[1]}
        if len(v) > 2:
            gate.update(probes=v[2], failing_probes=v[3])
        out[g] = gate
    return out


def _obs(kernel, profile="strict", **gates):
    return PT.observation(kernel, profile, "gated", _gates(**gates))


def test_unchanged_verdicts_are_not_reported():
    doc = PT.compare({"a": [_obs("k", CMP_01=("pass", 0.1))], "b": [_obs("k", CMP_01=("pass", 0.3))]})
    assert doc["pairs"][0]["changed"] == [] and doc["summary"]["changed"] == 0
    assert doc["pairs"][0]["verdicts"] == {"CMP-01": {"a": "pass", "b": "pass"}}


@pytest.mark.parametrize("a,b,cls", [
    (("pass", 0.1), ("na", None), "not_applicable"),
    (("pass", 0.1), ("error", None), "harness_error"),
    (("pass", 0.1, ["rand0"], []), ("fail", 40.0, ["rand0", "long_dim"], ["long_dim"]), "probe_not_run"),
    (("pass", 0.1), ("fail", 0.02), "property_check"),
    (("pass", 0.9), ("fail", 1.3), "borderline"),
    (("pass", 0.01), ("fail", 3e3), "margin_moves"),
    (("pass", None), ("fail", None), "no_margin"),
])
def test_each_change_is_classified(a, b, cls):
    doc = PT.compare({"cpu": [_obs("k", X_01=a)], "gpu": [_obs("k", X_01=b)]})
    (ch,) = doc["pairs"][0]["changed"]
    assert ch["gate"] == "X-01" and ch["class"] == cls
    assert ch["settings"]["cpu"]["status"] == a[0] and ch["settings"]["gpu"]["margin"] == b[1]
    assert doc["summary"]["by_class"] == {cls: 1}


def test_same_probes_on_both_sides_is_not_probe_not_run():
    a = ("pass", 0.01, ["rand0", "long_dim"], [])
    b = ("fail", 3e3, ["rand0", "long_dim"], ["long_dim"])
    doc = PT.compare({"cpu": [_obs("k", X_01=a)], "gpu": [_obs("k", X_01=b)]})
    assert doc["pairs"][0]["changed"][0]["class"] == "margin_moves"


def test_pairs_missing_from_a_setting_are_listed_not_compared():
    doc = PT.compare({"a": [_obs("k", G=("pass", 0.1)), _obs("only_a", G=("fail", 9.0))],
                      "b": [_obs("k", G=("pass", 0.1))], "c": [_obs("k", G=("fail", 5.0))]})
    assert doc["missing"] == [{"kernel": "only_a", "profile": "strict", "in": ["a"], "absent_from": ["b", "c"]}]
    assert doc["summary"]["pairs"] == 1 and doc["pairs"][0]["changed"][0]["settings"]["c"]["status"] == "fail"
    with pytest.raises(ValueError):
        PT.compare({"a": []})


def test_verifier_differences_are_named():
    env = {"verifier_code": "aaa", "tolerance": {"ORD03_K": 1.0, "REL_K": 8.0}, "plan": "lethe.plan/3"}
    other = {**env, "verifier_code": "bbb", "tolerance": {"ORD03_K": 2.0, "REL_K": 8.0}}
    diff = PT.context_differences({"cpu": env, "gpu": other})
    assert diff == ["verifier_code aaa (cpu) vs bbb (gpu)", "tolerance ORD03_K 1.0 (cpu) vs 2.0 (gpu)"]
    assert PT.context_differences({"cpu": env, "gpu": dict(env)}) == []


def _row(rid, device, gate_status, margin, cand="c1", ref="r1", code="v1"):
    ev = {"probes": {"rand0": {"status": gate_status, "outputs": [{"ok": gate_status == "pass",
                                                                   "max_err_over_tol": margin}]}}}
    gates = records.na_gates("n/a", 0)
    gates["CMP-01"] = {"status": gate_status, "reason": "", "evidence": json.dumps(ev), "seed": 0}
    return records.make_row(id=rid, device=device, gates=gates,
                            sources=json.dumps({"cand_sha256": cand * 8, "ref_sha256": ref * 8}),
                            environment=json.dumps({"verifier_code": code}))


def test_rows_match_by_id_or_by_source():
    cpu = [_row("L1/x", "cpu", "pass", 0.2)]
    gpu = [_row("level_1_x", "cuda", "fail", 40.0, code="v2")]
    by_id = PT.compare({"cpu": PT.from_rows(cpu), "gpu": PT.from_rows(gpu)})
    assert by_id["summary"]["pairs"] == 0 and len(by_id["missing"]) == 2
    by_src = PT.compare({"cpu": PT.from_rows(cpu, key="source"), "gpu": PT.from_rows(gpu, key="source")})
    (p,) = by_src["pairs"]
    assert p["changed"][0]["gate"] == "CMP-01" and p["changed"][0]["class"] == "margin_moves"
    assert p["verifier_differs"] == ["verifier_code v1 (cpu) vs v2 (gpu)"]


def test_aot_and_launch_search_adapters():
    row = {"op": "C1 fwd", "kernel": "k", "num_warps": 4, "compiles": True, "violations": [], "registers": 90,
           "shared_bytes": 512, "spill_bytes": 0}
    docs = {"n16": {"rows": [{**row, "target": "sm_90a"},
                             {**row, "target": "sm_100a", "violations": ["shared 300000 B > 232448 B"]},
                             {**row, "target": "sm_90a", "num_warps": 8, "compiles": False, "error": "syntax"}]}}
    s = PT.from_aot(docs)
    assert sorted(s) == ["sm_100a w4", "sm_90a w4", "sm_90a w8"]
    doc = PT.compare({k: s[k] for k in ("sm_90a w4", "sm_100a w4")})
    assert doc["pairs"][0]["changed"][0]["settings"]["sm_100a w4"]["status"] == "fail"
    assert s["sm_90a w8"][0]["gates"]["RES-02"]["status"] == "na"
    shape = {"batch": 1, "seq_len": 64, "d_model": 8, "n_state": 4}
    ls = {"runs": [{"result": {"rows": [
        {"shape": shape, "config": {"name": "a"}, "status": "ok", "reason": None},
        {"shape": shape, "config": {"name": "b"}, "status": "mismatch", "reason": "y: exceeds the bound by x3"}]}}]}
    s = PT.from_launch_search(ls)
    ch = PT.compare(s)["pairs"][0]["changed"][0]
    assert ch["gate"] == PT.LAUNCH_CHECK and ch["settings"]["b"]["reason"].startswith("y:")


def test_cli_compares_two_rows_files(tmp_path, capsys):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    records.write_rows([_row("k", "cpu", "pass", 0.2)], a)
    records.write_rows([_row("k", "cuda", "fail", 40.0)], b)
    out = tmp_path / "cmp.json"
    assert cli.main(["portability", str(a), str(b), "--labels", "cpu,h200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "1 of 12 gate verdicts change" in printed and "CMP-01" in printed
    doc = json.loads(out.read_text())
    assert doc["settings"] == ["cpu", "h200"] and doc["summary"]["by_gate"] == {"CMP-01": 1}
    assert cli.main(["portability", str(a)]) == 2


def test_committed_report_covers_every_configured_comparison():
    from pathlib import Path

    import yaml

    root = Path(__file__).parents[2]
    comparisons = yaml.safe_load((root / "config/config.yaml").read_text())["portability"]["comparisons"]
    report = PT.build_report(comparisons, root=str(root))
    assert [c["name"] for c in report["comparisons"]] == [c["name"] for c in comparisons]
    assert all(c["summary"]["pairs"] > 0 for c in report["comparisons"])
    committed = json.loads((root / "results/portability/report.json").read_text())
    assert committed == json.loads(json.dumps(report, sort_keys=True))


def test_render_writes_both_tables(tmp_path):
    report = {"classes": PT.CHANGE_CLASSES, "comparisons": [
        {**PT.compare({"cpu": [_obs("k", X_01=("pass", 0.1))], "gpu": [_obs("k", X_01=("na", None))]}),
         "name": "pc", "what": "cpu vs gpu", "note": "a note"}]}
    paths = [tmp_path / n for n in ("p.md", "p.tex", "c.md", "c.tex")]
    PT.render(report, *map(str, paths))
    main_md, changes_md = paths[0].read_text(), paths[2].read_text()
    assert "| pc | cpu vs gpu | 2 | 1 | 1 | 1 | X-01 1 | not_applicable 1 |" in main_md and "a note" in main_md
    assert "gpu: X-01 na" in changes_md
