"""The GDN tables render byte-deterministically from the committed H200 results, and those results hold."""

import json
from pathlib import Path

import pytest
from lethe.kernels.gdn import tables

RESULTS = Path(__file__).resolve().parents[3] / "results" / "gdn"
needs_results = pytest.mark.skipif(not (RESULTS / "ladder.json").exists(), reason="no committed ladder yet")


@needs_results
def test_ladder_table_deterministic_and_complete(tmp_path):
    ladder = json.loads((RESULTS / "ladder.json").read_text())
    a = tables.render_ladder(ladder, None, tmp_path / "a.md", tmp_path / "a.tex")
    b = tables.render_ladder(ladder, None, tmp_path / "b.md", tmp_path / "b.tex")
    assert a.markdown == b.markdown and a.latex == b.latex
    rows = tables.ladder_rows(ladder)
    assert len(rows) == sum(1 for r in ladder["rows"] if r["rung"] != "fla")
    assert sum(r["verdict"] == "pass" for r in rows if r["rung"] == "end to end") == ladder["summary"]["e2e_pass"]


@needs_results
def test_committed_ladder_within_paper_pin():
    """The paper pins end to end at 5e-3 (d_k=128, chunk 64, bf16/fp16); recompute the worst arm from the rows."""
    ladder = json.loads((RESULTS / "ladder.json").read_text())
    e2e = [r for r in ladder["rows"] if r["rung"] == "e2e"]
    assert {r["K"] for r in e2e} == {128} and {r["V"] for r in e2e} == {64, 128}
    worst = max(max(r["errors"].values()) for r in e2e)
    assert worst == ladder["summary"]["e2e_worst"]
    assert worst <= 5e-3
    assert all(r["pass"] for r in ladder["rows"] if r["rung"] == "tile")


# Members whose committed training run fails the curve check, each with where that is reported. A known failure
# must fail exactly as recorded: when a later run passes, the entry has to go (like a strict xfail).
KNOWN_CURVE_FAILURES = {
    "gdn": "3114e04: window deviation 7.0% > 5% at the loss transition, the bf16 curve dropping a few steps "
           "earlier than the float32 one; the seed study (train_seeds*.json) shows a float32-input fast path "
           "failing at this seed too (13.2%): docs/gdn.md §5",
}


@pytest.mark.skipif(not (RESULTS / "train_family.json").exists(), reason="no committed training run yet")
def test_training_table_and_verdicts(tmp_path):
    train = json.loads((RESULTS / "train_family.json").read_text())
    tables.render_training(train, tmp_path / "t.md", tmp_path / "t.tex")
    assert set(train["members"]) == {"la", "gla", "ssd", "kda", "gdn"}
    tol = train["summary"]["config"]["curve_tol"]
    for m, r in train["members"].items():
        # recompute the verdicts from the stored curves rather than trusting the stored flags
        assert r["nonfinite_fast"] == r["nonfinite_ref"] == 0, m
        w = train["summary"]["config"]["window"]
        first = sum(r["loss_fast"][:w]) / w
        last = sum(r["loss_fast"][-w:]) / w
        assert last < 0.9 * first, m
        wf = [sum(r["loss_fast"][i:i + w]) / w for i in range(0, len(r["loss_fast"]), w)]
        wr = [sum(r["loss_ref"][i:i + w]) / w for i in range(0, len(r["loss_ref"]), w)]
        dev = max(abs(a - b) for a, b in zip(wf, wr, strict=True)) / wr[0]
        assert abs(dev - r["max_window_curve_dev_rel"]) < 1e-9, m
        if m in KNOWN_CURVE_FAILURES:
            assert dev > tol and not r["pass"] and not train["summary"]["all_pass"], m
        else:
            assert dev <= tol and r["pass"], m


@pytest.mark.skipif(not (RESULTS / "train_family.json").exists(), reason="no committed training run yet")
def test_committed_training_run_is_deterministic():
    # since 3114e04 the run uses deterministic algorithms and trains every path twice; both repeats must match
    train = json.loads((RESULTS / "train_family.json").read_text())
    assert train["summary"]["deterministic_algorithms"] and train["summary"]["repeat_checked"]
    assert train["summary"]["nondeterministic_ops"] == []
    for m, r in train["members"].items():
        assert r["fast_repeat_bitwise"] is True and r["ref_repeat_bitwise"] is True, m


def _seed_study(rows):
    return {"summary": {"member": "gdn", "config": {"curve_tol": 0.05, "window": 20}}, "rows": [
        {"seed": s, "variant": v, "max_window_curve_dev_rel": d, "pass": d <= 0.05} for s, v, d in rows]}


def test_training_seed_rows_merge_studies_and_refuse_disagreeing_repeats(tmp_path):
    a = _seed_study([(7, "default", 0.07), (7, "fwd3x", 0.01), (1, "default", 0.02), (1, "fwd3x", 0.03)])
    b = _seed_study([(7, "default", 0.07), (7, "fast_fp32", 0.12), (1, "default", 0.02), (1, "fast_fp32", 0.001)])
    rows, variants = tables.training_seed_rows([a, b])
    assert variants == ["default", "fwd3x", "fast_fp32"]
    assert rows[0] == {"seed": 7, "default": "7.00% FAIL", "fwd3x": "1.00%", "fast_fp32": "12.00% FAIL"}
    tables.render_training_seeds([a, b], tmp_path / "s.md", tmp_path / "s.tex")
    assert "bf16 inputs, current forward 1/2" in (tmp_path / "s.md").read_text()
    c = _seed_study([(7, "default", 0.0701)])
    with pytest.raises(ValueError, match="disagree"):
        tables.training_seed_rows([a, c])


def test_committed_seed_studies_render_and_recompute():
    files = sorted(RESULTS.glob("train_seeds*.json"))
    files = [f for f in files if not f.name.endswith(".provenance.json")]
    if not files:
        pytest.skip("no committed seed study")
    studies = [json.loads(f.read_text()) for f in files]
    rows, variants = tables.training_seed_rows(studies)  # raises if two calls disagree on a shared cell
    assert "default" in variants and len(rows) >= 2
    main_seed = json.loads((RESULTS / "train_family.json").read_text())["summary"]["config"]["seed"]
    main_dev = json.loads((RESULTS / "train_family.json").read_text())["members"]["gdn"]["max_window_curve_dev_rel"]
    for st in studies:
        for r in st["rows"]:
            assert r["pass"] == (r["max_window_curve_dev_rel"] <= st["summary"]["config"]["curve_tol"])
            if (r["seed"], r["variant"]) == (main_seed, "default"):
                # the study's default row at the main seed is the committed training run's GDN row, bit for bit
                assert r["max_window_curve_dev_rel"] == main_dev


# ------------------------------------------------------------------------ fla comparison (H200, part (a))
FLACMP = RESULTS / "fla_compare"
TABLES = RESULTS.parents[1] / "paper" / "tables"


def _corr(member, v, t, impl, errors, status="ok", bypass=False):
    worst = max(errors, key=errors.get) if errors else None
    return {"member": member, "V": v, "T": t, "impl": impl, "status": status, "errors": errors,
            "worst_rel_err": errors[worst] if errors else None, "worst_tensor": worst, "bypass_640": bypass,
            "within_pin": bool(errors and errors[worst] <= 5e-3)}


def _synthetic():
    summary = {
        "args": {"members": ["gdn", "ssd"], "dvs": [128, 64], "lengths": [1024], "dtype": "bfloat16",
                 "dk": 128, "chunk": 64, "batch": 1, "heads": 2, "budget_s": 100.0},
        "meta": {"fla": "0.6.0", "gpu": "GPU X", "torch": "t", "triton": "3.6.0",
                 "fla_disable_backend_dispatch": "1"},
        "autotune": {"policy": {"max_configs": 2}},
        "correctness": [
            _corr("ssd", 128, 1024, "ours", {"o": 1e-3, "dq": 2e-3}),
            _corr("ssd", 128, 1024, "fla", {"o": 4e-3, "dq": 1e-3}, bypass=True),
            _corr("gdn", 128, 1024, "ours", {"o": 2e-3, "db": 6e-3}),
            _corr("gdn", 128, 1024, "fla", {}, status="error"),
        ],
        "agreement": [{"member": "ssd", "V": 128, "T": 1024, "a": "fla", "b": "ours",
                       "worst_rel_err": 5e-3, "worst_tensor": "o"}],
        "skipped": [{"kind": "skip", "task": "correct gdn V=64 T=1024"},
                    {"kind": "skip", "task": "precompile 1"}],
        "speed": [],
    }
    rows = [{"kind": "correct", "pin": 5e-3}, {"kind": "guard_probe", "refused": True}]
    return summary, rows


def test_fla_compare_rows_and_render_synthetic(tmp_path):
    summary, jrows = _synthetic()
    rows = tables.fla_compare_rows(summary, tables.fla_compare_pin(jrows))
    assert [(r["member"], r["V"], r["T"]) for r in rows] == [("gdn", 128, 1024), ("ssd", 128, 1024)]
    gdn, ssd = rows
    assert gdn["ours"] == 6e-3 and gdn["ours_tensor"] == "db" and gdn["ours_pin"] is False
    assert gdn["fla"] is None and gdn["fla_cell"] == "error" and gdn["fla_pin"] is None
    assert gdn["agree"] is None and gdn["bypass_640"] is False
    assert ssd["fla_cell"] == "4.00e-03 (o)" and ssd["fla_pin"] is True and ssd["bypass_640"] is True
    assert ssd["agree_cell"] == "5.00e-03 (o)"
    head = tables.fla_compare_headline(summary, 5e-3)
    assert head["within_pin"] == {"ours": 1, "fla": 1}
    assert head["worst"]["ours"]["member"] == "gdn" and head["worst"]["fla"]["member"] == "ssd"
    prov = {"driver": "1.2"}
    a = tables.render_fla_compare(summary, prov, jrows, tmp_path / "a.md", tmp_path / "a.tex")
    b = tables.render_fla_compare(summary, prov, jrows, tmp_path / "b.md", tmp_path / "b.tex")
    assert a == b
    first = a.markdown.splitlines()[0]
    assert "bf16, d_k=128, chunk 64" in first and "driver 1.2" in first
    assert "2 of 4 planned correctness cells ran; 2 cells and all timing were not run." in first
    assert "gdn d_v=64, T=1024 (and precompile 1)" in a.markdown
    assert "refused the one probe call" in a.markdown
    assert "\\toprule" in a.latex and "\\#640" in a.latex
    with pytest.raises(ValueError):
        tables.fla_compare_pin([{"kind": "correct", "pin": 5e-3}, {"kind": "correct", "pin": 1e-2}])


@pytest.mark.skipif(not (FLACMP / "summary.json").exists(), reason="no committed fla comparison yet")
def test_committed_fla_compare_consistent_and_rendered(tmp_path):
    """The summary agrees with the per-measurement rows; the committed table is what the renderer gives."""
    summary = json.loads((FLACMP / "summary.json").read_text())
    prov = json.loads((FLACMP / "provenance.json").read_text())
    jrows = [json.loads(x) for x in (FLACMP / "rows.jsonl").read_text().splitlines() if x.strip()]
    pin = tables.fla_compare_pin(jrows)
    correct = {(r["member"], r["V"], r["T"], r["impl"]): r for r in jrows if r["kind"] == "correct"}
    assert len(correct) == len(summary["correctness"])
    for s in summary["correctness"]:
        r = correct[(s["member"], s["V"], s["T"], s["impl"])]
        assert s["errors"] == r["errors"] and s["worst_rel_err"] == max(r["errors"].values())
        assert s["within_pin"] == (s["worst_rel_err"] <= pin) and s["bypass_640"] == r["bypass_640"]
    rows = tables.fla_compare_rows(summary, pin)
    assert all(r["ours"] is not None and r["fla"] is not None and r["agree"] is not None for r in rows)
    skipped = [s for s in summary["skipped"] if s["task"].startswith("correct ")]
    a = summary["args"]
    assert len(rows) + len(skipped) == len(a["members"]) * len(a["dvs"]) * len(a["lengths"])
    got = tables.render_fla_compare(summary, prov, jrows, tmp_path / "t.md", tmp_path / "t.tex")
    if (TABLES / "gdn_fla_compare.md").exists():
        assert got.markdown == (TABLES / "gdn_fla_compare.md").read_text()
        assert got.latex == (TABLES / "gdn_fla_compare.tex").read_text()


INTRA = RESULTS / "intra_precision"


@pytest.mark.skipif(not (INTRA / "summary.json").exists(), reason="no committed intra-precision run")
def test_committed_intra_precision_run_consistent_rendered_and_repeats_fla_compare(tmp_path):
    summary = json.loads((INTRA / "summary.json").read_text())
    prov = json.loads((INTRA / "provenance.json").read_text())
    rows = [json.loads(x) for x in (INTRA / "rows.jsonl").read_text().splitlines() if x.strip()]
    cells = [r for r in rows if r["kind"] == "cell"]
    assert len(cells) == summary["n_cells"] and cells
    for r in cells:
        assert r["bitwise_repeat"] and r["worst_rel_err"] == max(r["errors"].values())
        assert r["within_pin"] == (r["worst_rel_err"] <= r["pin"])
        assert r["intra_precision"] == (r["intra_entry"].get("PREC") or "tf32")
    got = tables.render_intra_precision(summary, prov, rows, tmp_path / "t.md", tmp_path / "t.tex")
    if (TABLES / "gdn_intra_precision.md").exists():
        assert got.markdown == (TABLES / "gdn_intra_precision.md").read_text()
    # the default variant is fla_compare's "ours" at another commit with the same kernels and inputs: where the
    # two runs share a cell they agree bit for bit, tensor by tensor. (Both committed runs predate 621acc8, which
    # sums the broadcast gate gradients in float32; a newer run of either changes kda/sgdn/ssd gate gradients.)
    fc = json.loads((FLACMP / "summary.json").read_text())
    ours = {(r["member"], r["V"], r["T"]): r["errors"] for r in fc["correctness"] if r["impl"] == "ours"}
    shared = [r for r in cells if r["variant"] == "default" and (r["member"], r["V"], r["T"]) in ours]
    assert shared
    for r in shared:
        assert r["errors"] == ours[(r["member"], r["V"], r["T"])], (r["member"], r["V"], r["T"])


@pytest.mark.skipif(not (RESULTS / "broadcast_sum_replay.json").exists(), reason="no committed replay")
def test_broadcast_sum_replay_explains_the_float32_grade_gpu_rows():
    # the H200's 3xTF32 intra variant (float32-grade products, gate gradients summed after the bf16 rounding) gave
    # the CPU replay's "summed after rounding" errors to the float64 oracle's last bits: what was left of the worst
    # errors was the rounding before the sum; summing first leaves the oracle's own rounding
    replay = {(r["member"], r["V"], r["T"]): r["gates"]
              for r in json.loads((RESULTS / "broadcast_sum_replay.json").read_text())["rows"]}
    for gates in replay.values():
        for e in gates.values():
            assert e["summed_then_rounded"] <= e["summed_after_rounding"]
            assert abs(e["summed_then_rounded"] - e["oracle_rounded"]) <= 0.02 * e["oracle_rounded"]
    rows = [json.loads(x) for x in (INTRA / "rows.jsonl").read_text().splitlines() if x.strip()]
    x3 = [r for r in rows if r.get("variant") == "x3" and (r["member"], r["V"], r["T"]) in replay]
    assert x3
    for r in x3:
        for n in ("dg", "dbeta"):
            cpu = replay[(r["member"], r["V"], r["T"])][n]["summed_after_rounding"]
            assert abs(r["errors"][n] - cpu) <= 1e-9 * cpu, (r["member"], r["V"], r["T"], n)
