"""kernels/gdn/model_shapes.py: the model-shape table (GDN family against fla at 16-32 heads) and its data file.

The rows come from lethe.kernels.gdn.fla_compare's own plan and cells over the grid (``model_shapes_fixture``,
the numerics faked), so the renderer reads the schema the H200 run writes; a small grid --dry-run checks the
driver end to end (both halves of a split run: --resume leaves out what the first timed).
"""

import json
import re
from pathlib import Path

import model_shapes_fixture as F
import pytest

from lethe.kernels.gdn import fla_bench as FB
from lethe.kernels.gdn import model_shapes as R
from lethe.kernels.gdn.bench import chunk_counts
from lethe.perf.roofline import roofline_ms
from lethe.render.docvalues import find, render

ROOT = Path(__file__).resolve().parents[3]
REASON = re.compile(r"^(skipped|error|not timed|not run|n/a) \(([a-z]+)\)$")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return F.write_fixture_run(tmp_path_factory.mktemp("model_shapes") / "run")


@pytest.fixture(scope="module")
def loaded(run_dir):
    return FB.load_run(run_dir)


@pytest.fixture(scope="module")
def rendered(loaded, tmp_path_factory):
    summary, prov, rows = loaded
    out = tmp_path_factory.mktemp("tables")
    table = R.render_model_shapes(summary, prov, rows, out / "t.md", out / "t.tex", out / "t.json")
    return table, json.loads((out / "t.json").read_text())


def _body(markdown):
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def _notes(markdown):
    return {m.group(1): m.group(2) for m in re.finditer(r"^Note: \(([a-z]+)\) (.*)$", markdown, re.M)}


def test_one_row_per_shape_of_the_grid(loaded, rendered):
    summary, _, rows = loaded
    table, data = rendered
    body = _body(table.markdown)
    # 2 members x 2 d_v x (4 shapes at H = 16, 3 at H = 32: 2^18 at T = 32768 is the 2^20 shape, B = 1)
    assert len(body) == len(data["rows"]) == 28
    shapes = [(r["member"], r["V"], r["H"], r["T"], r["B"]) for r in data["rows"]]
    assert len(set(shapes)) == 28
    assert ("gdn", 128, 16, 32768, 1) in shapes and ("gdn", 128, 32, 32768, 1) in shapes
    assert all(r["BTH"] == r["B"] * r["T"] * r["H"] for r in data["rows"])
    assert [r["member"] for r in data["rows"]][:7] == ["gdn"] * 7 and data["rows"][0]["V"] == 128
    first = data["rows"][:7]  # gdn d_v 128: H ascending, then head-tokens descending, then T
    assert [(r["H"], r["BTH"], r["T"]) for r in first] == [
        (16, 2**20, 2048), (16, 2**20, 32768), (16, 2**18, 2048), (16, 2**19, 32768),
        (32, 2**20, 2048), (32, 2**20, 32768), (32, 2**18, 2048)]
    for cells in body:
        assert all(c for c in cells), cells
    assert "262,144 at H=32, T=32,768 runs 1,048,576 head-tokens (one row with the grid point of that size)" in (
        table.markdown)
    assert "262,144 at H=16, T=32,768 runs 524,288 head-tokens;" in table.markdown


def test_times_and_ratios_are_the_rows_medians(loaded, rendered):
    _, _, rows = loaded
    _, data = rendered
    timed = [r for r in data["rows"] if r["ours_fwd_bwd"] is not None and r["fla_fwd_bwd"] is not None]
    assert len(timed) == 28 - 3  # the budget skip, fla's failed check, the task never reached
    for r in timed:
        for mode, k in (("fwd", "fwd"), ("fwd+bwd", "fwd_bwd")):
            hits = {x["impl"]: x["median_ms"] for x in rows if x["kind"] == "bench" and x.get("status") == "ok"
                    and (x["member"], x["V"], x["T"], x["B"], x["H"], x["mode"]) == (
                        r["member"], r["V"], r["T"], r["B"], r["H"], mode)}
            assert (r[f"fla_{k}"], r[f"ours_{k}"]) == pytest.approx((hits["fla"], hits["ours"]), rel=1e-6)
            assert r[f"ratio_{k}"] == pytest.approx(F.OURS_OVER_FLA[r["member"]][mode])


def test_missing_numbers_say_why(loaded, rendered):
    table, data = rendered
    notes = _notes(table.markdown)
    cols = {name: i for i, name in enumerate(["member", "V", "H", "T", "B", "BTH", "fla_fwd", "fla_fwd_bwd",
                                              "ours_fwd", "ours_fwd_bwd", "ratio_fwd", "ratio_fwd_bwd", "fla_err",
                                              "ours_err", "pct"])}
    body = _body(table.markdown)

    def cells_of(member, V, H, T, B):
        i = next(j for j, r in enumerate(data["rows"]) if (r["member"], r["V"], r["H"], r["T"], r["B"]) == (
            member, V, H, T, B))
        return body[i]

    skip = cells_of("gdn", 64, 16, 2048, 8)
    m = REASON.match(skip[cols["ours_fwd_bwd"]])
    assert m and m.group(1) == "skipped" and "budget" in notes[m.group(2)]
    nan = cells_of("sgdn", 128, 32, 2048, 16)
    m = REASON.match(nan[cols["fla_fwd"]])
    assert m and m.group(1) == "not timed" and "non-finite" in notes[m.group(2)]
    assert nan[cols["ours_fwd"]] != "" and not REASON.match(nan[cols["ours_fwd"]])
    assert nan[cols["fla_err"]] == "7.0e-03 FAILED" and nan[cols["ratio_fwd_bwd"]] == "n/a"
    last = cells_of("sgdn", 64, 32, 2048, 4)
    m = REASON.match(last[cols["fla_fwd_bwd"]])
    assert m and "stopped" in notes[m.group(2)]


def test_errors_come_from_the_float64_slice(rendered):
    table, data = rendered
    notes = _notes(table.markdown)
    for r, cells in zip(data["rows"], _body(table.markdown), strict=True):
        if r["T"] <= 16384 and r["fla_err"] is not None:
            assert (r["fla_err"], r["ours_err"]) == (F.SLICE_ERR["fla"], F.SLICE_ERR["ours"])
        if r["T"] == 32768 and (r["member"], r["V"], r["H"]) != ("sgdn", 64, 32):
            assert r["fla_err"] is None and r["ours_err"] is None
            m = REASON.match(cells[13])
            assert m and "float64 slice not run: T > --slice-check-max-t 16384" in notes[m.group(2)]


def test_floor_share_is_floor_over_ours(rendered):
    _, data = rendered
    for r in data["rows"]:
        if r["ours_fwd_bwd"] is None:
            assert r["ours_pct_floor"] is None
            continue
        c = chunk_counts(r["member"], r["B"], r["H"], r["T"], 128, r["V"])
        floor = roofline_ms(c["fwd_flops"] + c["bwd_flops"], c["fwd_bytes"] + c["bwd_bytes"],
                            F.CEILINGS["bf16_matmul_tflops"], F.CEILINGS["copy_tbps"])
        assert r["floor_fwd_bwd"] == pytest.approx(floor, rel=1e-5) and r["ours_pct_floor"] == pytest.approx(
            floor / r["ours_fwd_bwd"], rel=1e-5)


def test_data_file_ranges(rendered):
    _, data = rendered
    assert data["schema"] == R.SCHEMA and data["shapes"] == 28 and data["timed"] == 25 and not data["complete"]
    g, s = data["members"]["gdn"], data["members"]["sgdn"]
    assert (g["shapes"], g["timed"], s["shapes"], s["timed"]) == (14, 13, 14, 12)
    assert g["ours_over_fla"]["fwd_bwd"] == pytest.approx([1.6, 1.6])
    assert s["ours_over_fla"]["fwd"] == pytest.approx([1.2, 1.2])
    assert s["fla_over_ours"]["fwd_bwd"] == pytest.approx([1 / 1.14, 1 / 1.14])
    assert g["ours_faster_fwd_bwd"] == 0 and g["name"] == "full GDN"
    lo, hi = g["ours_pct_floor_fwd_bwd"]
    assert 0 < lo <= hi < 100


def test_caption_and_notes_say_how_it_ran(rendered):
    table, _ = rendered
    md = table.markdown
    assert "backend 'triton'" in md and "H in {16, 32}" in md and "1,048,576 / 262,144 head-tokens" in md
    assert "scalar-gate path" in md and "full config lists" in md
    assert "tuned at (member, d_v, H: B, T): gdn 64 16: 32, 2,048;" in md and "sgdn 128 32: 16, 2,048." in md
    assert "1 run(s), all from commit 000000000000" in md


def test_deterministic_and_one_backend_per_folder(loaded, tmp_path):
    summary, prov, rows = loaded
    outs = []
    for i in range(2):
        R.render_model_shapes(summary, prov, rows, tmp_path / f"{i}.md", tmp_path / f"{i}.tex", tmp_path / f"{i}.json")
        outs.append([(tmp_path / f"{i}.{e}").read_bytes() for e in ("md", "tex", "json")])
    assert outs[0] == outs[1]
    other = F.write_fixture_run(tmp_path / "tc", ours_backend="hybrid-tc")
    s2, p2, r2 = FB.load_run(other)
    assert "backend 'hybrid-tc'" in R.render_model_shapes(s2, p2, r2, tmp_path / "h.md", tmp_path / "h.tex",
                                                         tmp_path / "h.json").markdown
    with pytest.raises(ValueError, match="one backend per folder"):
        R.render_model_shapes(summary, prov, rows + r2, tmp_path / "x.md", tmp_path / "x.tex", tmp_path / "x.json")


def test_readme_definitions_read_the_data_file(rendered, tmp_path):
    """The README's model-shape figures are defined on paper/tables/gdn_model_shapes.json: each definition
    evaluates on a rendered data file (the README uses them once the result is committed)."""
    _, data = rendered
    (tmp_path / "paper/tables").mkdir(parents=True)
    (tmp_path / "paper/tables/gdn_model_shapes.json").write_text(json.dumps(data))
    readme = (ROOT / "README.md").read_text()
    defs = re.findall(r"<!--=def (model_\w+):.*?-->", readme)
    assert defs, "README.md defines no model_* figure"
    doc = "\n".join(f"<!--=@{d}-->?<!--/=-->" for d in defs) + "\n" + "\n".join(
        re.findall(r"<!--=def model_\w+:.*?-->", readme))
    got = {f.source: render(f, tmp_path) for f in find(doc, "README.md")}
    assert len(got) == len(defs)
    assert "1.60–1.60" in got.values()


def test_committed_table_matches_its_result(tmp_path):
    """When the result is committed, the committed table and data file are what the renderer makes of it."""
    folder = ROOT / "results" / "gdn" / "model_shapes"
    if not (folder / "summary.json").exists():
        pytest.skip("no model-shape result committed yet")
    summary, prov, rows = FB.load_run(folder)
    R.render_model_shapes(summary, prov, rows, tmp_path / "t.md", tmp_path / "t.tex", tmp_path / "t.json")
    for ext in ("md", "tex", "json"):
        assert (tmp_path / f"t.{ext}").read_bytes() == (ROOT / "paper/tables" / f"gdn_model_shapes.{ext}").read_bytes()


@pytest.mark.slow
def test_grid_dry_run_end_to_end_and_resume(run_dir, tmp_path, monkeypatch):
    """A small grid on the CPU (interpreter kernels, torch in fla's place): every shape once with its H and
    head-tokens in the rows, the fixture's bench rows have the same keys (plus the GPU-only ones), and a second
    call with --resume leaves out every cell the first timed."""
    fc = F.load_script()
    monkeypatch.setenv("LETHE_GIT_SHA", "0" * 40)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("FLA_DISABLE_BACKEND_DISPATCH", "1")
    out = tmp_path / "dry"
    argv = ["--dry-run", "--out", str(out), "--parts", "bench", "--bench-members", "sgdn", "--dvs", "16",
            "--heads", "1,2", "--head-tokens", "64,32", "--bench-lengths", "32,16", "--reps", "1", "--sets", "1",
            "--warmup", "1", "--no-torch-bench"]
    fc.main(argv)
    rows = FB.read_rows(out / "rows.jsonl")
    shapes = {(r["T"], r["B"], r["H"], r["head_tokens"]) for r in rows if r["kind"] == "bench"}
    # H=2, T=32 asks 32 head-tokens but runs 64 (B = 1): the 64-token point's shape, timed once
    assert shapes == {(32, 2, 1, 64), (16, 4, 1, 64), (32, 1, 1, 32), (16, 2, 1, 32), (32, 1, 2, 64),
                      (16, 2, 2, 64), (16, 1, 2, 32)}
    f_rows = FB.read_rows(run_dir / "rows.jsonl")
    for d_impl, f_impl in (("ours", "ours"), ("torch", "fla")):
        d = set(next(r for r in rows if r["kind"] == "bench" and r["impl"] == d_impl and r.get("status") == "ok"))
        f = set(next(r for r in f_rows if r["kind"] == "bench" and r["impl"] == f_impl and r.get("status") == "ok"))
        assert d - f == set() and f - d <= {"floor_ms", "over_floor", "floor_basis", "fla_autotune"}
    n_bench = len([r for r in rows if r["kind"] == "bench"])
    doc = fc.main(argv + ["--resume"])
    rows2 = FB.read_rows(out / "rows.jsonl")
    resume = [r for r in rows2 if r["kind"] == "resume"]
    assert len(resume) == 1 and len(resume[0]["left_out"]) == 7
    assert len([r for r in rows2 if r["kind"] == "bench"]) == n_bench and doc["runs"] == 2
