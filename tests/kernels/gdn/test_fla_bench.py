"""kernels/gdn/fla_bench.py: the fla timing table and figure.

The rows come from lethe.kernels.gdn.fla_compare's own code (``fla_bench_fixture``: bench_cell and friends
with the numerics faked), and their keys are checked against a real ``--dry-run``, so the renderer is tested on the
schema the H200 run will write.
"""

import json
import re
import statistics
from pathlib import Path

import fla_bench_fixture as F
import pytest

from lethe.kernels.gdn import fla_bench as R

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "results" / "gdn" / "fla_bench"
TABLES = ROOT / "paper" / "tables"
REASON_CELL = re.compile(r"^(skipped|error|not timed|not run) \(([a-z]+)\)$")
#: keys only a GPU run writes into bench rows: the floor at measured ceilings; fla's autotune record
MEASURED_ONLY = {"floor_ms", "over_floor", "floor_basis"}
#: keys main() adds to the meta row only on the GPU (fla imported, device queried)
GPU_META = {"fla", "fla_path", "triton", "guard_state", "gpu", "capability", "fla_dispatch_disabled",
            "fla_autotuners", "guard_static_facts"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return F.write_fixture_run(tmp_path_factory.mktemp("fla_bench") / "run")


@pytest.fixture(scope="module")
def loaded(run_dir):
    return R.load_run(run_dir)


@pytest.fixture(scope="module")
def rendered(loaded, tmp_path_factory):
    summary, prov, rows = loaded
    out = tmp_path_factory.mktemp("tables")
    return R.render_fla_bench(summary, prov, rows, out / "t.md", out / "t.tex")


def _body(markdown: str) -> list[list[str]]:
    """The table's data rows as cell lists (header and rule dropped)."""
    lines = [ln for ln in markdown.splitlines() if ln.startswith("| ")]
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines[1:]]


def _notes(markdown: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(r"^Note: \(([a-z]+)\) (.*)$", markdown, re.M)}


def _bench(rows, member, V, T, cell, impl, mode):
    hits = [r for r in rows if r["kind"] == "bench" and r.get("status") == "ok" and r["member"] == member
            and r["V"] == V and r["T"] == T and r["cell"] == cell and r["impl"] == impl and r["mode"] == mode]
    assert len(hits) <= 1
    return hits[0] if hits else None


# ------------------------------------------------------------------------------------------------ schema


@pytest.mark.slow
def test_fixture_keys_equal_what_the_dry_run_writes(run_dir, tmp_path, monkeypatch):
    """Every kind of row the renderer reads has the same keys in the fixture as in a real --dry-run (fla's
    stand-in there is "torch"), except the fields only a GPU run can fill, named here."""
    fc = F.load_script()
    monkeypatch.setenv("LETHE_GIT_SHA", "0" * 40)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    monkeypatch.setenv("FLA_DISABLE_BACKEND_DISPATCH", "1")
    dry = tmp_path / "dry"
    fc.main(["--dry-run", "--out", str(dry), "--parts", "bench", "--bench-members", "gdn", "--dvs", "16",
             "--bench-lengths", "32", "--head-tokens", "128", "--native-head-tokens", "64", "--native-lengths",
             "32", "--reps", "1", "--sets", "1", "--warmup", "1", "--no-torch-bench", "--impls",
             "ours,torch,native"])
    d_rows, f_rows = R.read_rows(dry / "rows.jsonl"), R.read_rows(run_dir / "rows.jsonl")

    def keys(rows, **match):
        hit = [r for r in rows if all(r.get(k) == v for k, v in match.items())]
        assert hit, match
        return set(hit[0])

    for d_impl, f_impl in (("ours", "ours"), ("torch", "fla"), ("native", "native")):
        for mode in ("bwd", "fwd", "fwd+bwd"):
            d = keys(d_rows, kind="bench", impl=d_impl, mode=mode, status="ok")
            f = keys(f_rows, kind="bench", impl=f_impl, mode=mode, status="ok")
            assert d - f == set(), (f_impl, mode)
            assert f - d == MEASURED_ONLY | ({"fla_autotune"} if f_impl == "fla" else set()), (f_impl, mode)
    for cell in ("bench", "bench_native"):
        d_chk = next(r for r in d_rows if r["kind"] == "bench_check" and r["cell"] == cell)
        f_chk = next(r for r in f_rows if r["kind"] == "bench_check" and r["cell"] == cell
                     and len(r["nonfinite"]) == len(d_chk["nonfinite"]))
        assert set(d_chk) == set(f_chk)
        assert set(d_chk["gate"]) == set(f_chk["gate"])
        assert set(d_chk["vs_float64_slice"]["ours"]) == set(f_chk["vs_float64_slice"]["ours"])
        assert set(d_chk["vs_ours_by_impl"]["torch"]) == set(f_chk["vs_ours_by_impl"]["fla"])
    assert keys(d_rows, kind="skip", impl="native") == keys(f_rows, kind="skip", impl="native")
    d_meta, f_meta = keys(d_rows, kind="meta"), keys(f_rows, kind="meta")
    assert d_meta <= f_meta and f_meta - d_meta <= GPU_META
    d_sum = json.loads((dry / "summary.json").read_text())
    f_sum = json.loads((run_dir / "summary.json").read_text())
    assert set(d_sum) == set(f_sum) and set(d_sum["args"]) == set(f_sum["args"])
    assert set(d_sum["speed"][0]) - {"torch_ms", "fla_over_ours"} <= set(f_sum["speed"][0])
    # the dry run's native ran its torch-scan fallback, and says so
    nat = [r for r in d_rows if r["kind"] == "bench" and r["impl"] == "native"]
    assert nat and all(r["native_k1"].startswith("torch scan") and r["native_k1_calls"] == 0 for r in nat)
    assert all(r["compute_dtype"] == "float32" and r["cell"] == "bench_native" for r in nat)
    # and its output renders: fla is not in that run, which every fla cell says
    summary, prov, rows = R.load_run(dry)
    md = R.render_fla_bench(summary, prov, rows, tmp_path / "d.md", tmp_path / "d.tex").markdown
    notes = _notes(md)
    for cells in _body(md):
        m = REASON_CELL.match(cells[5])
        assert m and notes[m.group(2)] == "not in this run's --impls"


# ------------------------------------------------------------------------------------------------ table


def test_every_planned_cell_is_rendered_and_no_cell_is_blank(loaded, rendered):
    summary, _, rows = loaded
    a = summary["args"]
    n_main = len(a["bench_members"]) * len(a["dvs"]) * len(a["bench_lengths"])
    n_native = len(a["bench_members"]) * len(a["dvs"]) * len(a["native_lengths"])
    body = _body(rendered.markdown)
    assert len(body) == 2 * (n_main + n_native) == 32
    notes = _notes(rendered.markdown)
    for cells in body:
        assert all(c and c != "–" for c in cells), cells
        for c in cells[5:8]:  # fla, ours, native ms: a number or a lettered reason that exists
            m = REASON_CELL.match(c)
            assert re.fullmatch(r"\d+\.\d{3}", c) or (m and m.group(2) in notes), c
    assert "\\toprule" in rendered.latex and "B$\\times$H" in rendered.latex


def _find(body, member, V, T, BH, mode):
    hit = [c for c in body if c[:5] == [member, str(V), f"{T:,}", f"{BH:,}", mode]]
    assert len(hit) == 1, (member, V, T, BH, mode)
    return hit[0]


def test_planted_failures_show_their_reasons(loaded, rendered):
    body, notes = _body(rendered.markdown), _notes(rendered.markdown)

    def reason(cell):
        m = REASON_CELL.match(cell)
        assert m, cell
        return m.group(1), notes[m.group(2)]

    # the whole task skipped for budget: every impl and the check say so
    row = _find(body, "gdn", 64, 4096, 256, "bwd")
    assert {reason(c) for c in row[5:8]} == {("skipped", "skipped: budget")}
    assert row[-1].startswith("none (")
    # fla's NaN: not timed, the check column flags it, ours still timed
    row = _find(body, "sgdn", 128, 4096, 256, "bwd")
    kind, text = reason(row[5])
    assert kind == "not timed" and "correctness check failed" in text and "1 non-finite" in text
    assert re.fullmatch(r"\d+\.\d{3}", row[6]) and "fla nan FAILED" in row[-1]
    # native's first call raised
    row = _find(body, "sgdn", 64, 1024, 64, "fwd+bwd")
    assert reason(row[7]) == ("error", "error: RuntimeError: CUTE_DSL compile failed (planted)")
    # ours got no timing for budget, fla did
    row = _find(body, "sgdn", 64, 4096, 256, "bwd")
    assert reason(row[6])[1] == "skipped: budget" and re.fullmatch(r"\d+\.\d{3}", row[5])
    # the run was stopped before the last native cell
    row = _find(body, "sgdn", 64, 4096, 16, "bwd")
    assert {reason(c)[1] for c in row[5:8]} == {"not reached: the run was stopped (signal 15)"}
    # native in a main cell: the script's reason, with the size that rules it out
    kind, text = reason(_find(body, "gdn", 128, 1024, 1024, "bwd")[7])
    assert kind == "skipped" and "32 GiB" in text and "65536" in text


def test_ratios_are_ours_over_fla_medians(loaded):
    summary, _, rows = loaded
    trows = R.table_rows(summary, rows)
    seen = {"ours": 0, "native": 0}
    for t in trows:
        mode = {"bwd": "bwd", "fwd+bwd": "fwd+bwd"}[t["mode"]]
        cell = "bench_native" if t["BH"] * t["T"] == 2**16 else "bench"
        fla = _bench(rows, t["member"], t["V"], t["T"], cell, "fla", mode)
        for impl, planted in (("ours", F.OURS_OVER_FLA), ("native", F.NATIVE_OVER_FLA)):
            other = _bench(rows, t["member"], t["V"], t["T"], cell, impl, mode)
            if fla is None or other is None:
                assert t[f"{impl}_over_fla"] is None and t[f"{impl}_over_fla_cell"] == "n/a"
                continue
            seen[impl] += 1
            want = other["median_ms"] / fla["median_ms"]
            assert t[f"{impl}_over_fla"] == pytest.approx(want, rel=1e-12)
            assert want == pytest.approx(planted[mode], rel=1e-9)  # > 1: slower than fla, as planted
            assert t[f"{impl}_over_fla_cell"] == f"{want:.2f}"
    # of the 15 cells that ran, fla was timed in 13 (not: its NaN cell, the budget-skipped task); ours with it
    # in 12 (not: its own budget skip), native with it in 6 (not: its error; 7 native cells ran)
    assert seen == {"ours": 2 * 12, "native": 2 * 6}


def test_floor_percent_is_floor_over_measured(loaded):
    summary, _, rows = loaded
    fc = F.load_study()
    trows = R.table_rows(summary, rows)
    checked = 0
    for t in trows:
        mode = t["mode"]
        cell = "bench_native" if t["BH"] * t["T"] == 2**16 else "bench"
        for impl in R.IMPLS:
            r = _bench(rows, t["member"], t["V"], t["T"], cell, impl, mode)
            if r is None:
                assert t[f"{impl}_pct"] is None and t[f"{impl}_pct_cell"] == "n/a"
                continue
            assert t["floor"] == pytest.approx(r["floor_ms"], rel=1e-12)  # the script's floor, recomputed
            assert t[f"{impl}_pct"] == pytest.approx(r["floor_ms"] / r["median_ms"], rel=1e-12)
            assert t[f"{impl}_pct_cell"] == f"{100 * r['floor_ms'] / r['median_ms']:.1f}%"
            checked += 1
    assert checked > 40
    # by hand for one cell: max(FLOPs / 700 TFLOP/s, bytes / 4 TB/s) at the fixture's measured ceilings
    c = fc.chunk_counts("gdn", 512, 2, 1024, 128, 128)
    t = next(t for t in trows if (t["member"], t["V"], t["T"], t["BH"], t["mode"]) == ("gdn", 128, 1024, 1024, "bwd"))
    assert t["floor"] == pytest.approx(max(c["bwd_flops"] / 700e12, c["bwd_bytes"] / 4e12) * 1e3, rel=1e-12)


def test_spec_floor_when_no_ceilings_were_measured(loaded, tmp_path):
    summary, prov, rows = loaded
    # what the script writes when its ceilings task did not measure (measure_ceilings off the GPU)
    rows = [{"kind": "ceilings", "measured": False, "reason": "no GPU"} if r["kind"] == "ceilings" else r
            for r in rows]
    got = R.render_fla_bench(summary, prov, rows, tmp_path / "s.md", tmp_path / "s.tex").markdown
    assert "Floor ms (spec sheet)" in got and "Floor ms (measured)" not in got
    assert "because no run measured ceilings" in got
    t = next(t for t in R.table_rows(summary, rows) if t["fla"] is not None)
    r = _bench(rows, t["member"], t["V"], t["T"], "bench", "fla", t["mode"])
    assert t["floor"] == pytest.approx(r["floor_spec_ms"], rel=1e-12)


def test_caption_says_how_fla_ran(loaded, rendered, tmp_path):
    summary, prov, rows = loaded
    cap = rendered.markdown.splitlines()[0]
    for part in ("fla 0.6.0", "NVIDIA H200", "driver 580.159.04", "CUDA 13.0", "torch 2.11.0+cu130", "Triton 3.6.0",
                 "FLA_DISABLE_BACKEND_DISPATCH=1 (fla.backends reported dispatch disabled)",
                 "chunk_gated_delta_rule under the #640 guard bypass", "chunk_gdn2 without the #640 bypass",
                 "B×H×T = 1,048,576 head-tokens (65,536 in native's cells)"):
        assert part in cap, part
    # read from the rows, not assumed: a run that recorded otherwise is captioned otherwise
    edited = [({**r, "fla_disable_backend_dispatch": None, "fla_dispatch_disabled": False} if r["kind"] == "meta"
               else {**r, "bypass_640": False} if r["kind"] == "bench" else r) for r in rows]
    cap2 = R.render_fla_bench(summary, prov, edited, tmp_path / "e.md", tmp_path / "e.tex").markdown.splitlines()[0]
    assert "FLA_DISABLE_BACKEND_DISPATCH=unset (fla.backends reported dispatch ENABLED)" in cap2
    assert "chunk_gated_delta_rule without the #640 bypass" in cap2


def test_deterministic(loaded, tmp_path):
    summary, prov, rows = loaded
    a = R.render_fla_bench(summary, prov, rows, tmp_path / "a.md", tmp_path / "a.tex")
    b = R.render_fla_bench(summary, prov, rows, tmp_path / "b.md", tmp_path / "b.tex")
    assert a == b


def test_run_without_native_has_no_native_columns(tmp_path):
    summary, prov, rows = R.load_run(F.write_fixture_run(tmp_path / "run", native=False))
    md = R.render_fla_bench(summary, prov, rows, tmp_path / "t.md", tmp_path / "t.tex").markdown
    assert "native ms" not in md and "native's cells" not in md
    assert len(_body(md)) == 2 * 8


def test_appended_runs_render_as_one_table(loaded, rendered, tmp_path):
    """The main sweep and native's cells from two runs in one folder (--append) give the same cells and
    numbers as one run; each cell's floor uses the ceilings of the run that timed it."""
    summary, prov, rows = R.load_run(F.write_fixture_run(tmp_path / "split", split=True))
    assert summary["runs"] == 2 and len(prov["previous_runs"]) == 1
    assert [r["kind"] for r in rows].count("meta") == 2
    split = R.table_rows(summary, rows)
    one = R.table_rows(*loaded[::2])
    assert [(t["member"], t["V"], t["T"], t["BH"], t["mode"]) for t in split] == [
        (t["member"], t["V"], t["T"], t["BH"], t["mode"]) for t in one]
    moved = 0
    for a, b in zip(split, one, strict=True):
        for k in ("fla", "ours", "native", "ours_over_fla", "native_over_fla", "check"):
            assert a[k] == b[k], (k, a, b)
        if a["BH"] * a["T"] == 2**16:  # the second run measured 4.2 TB/s instead of 4.0
            r = _bench(rows, a["member"], a["V"], a["T"], "bench_native", "ours", a["mode"])
            if r is not None:
                assert a["floor"] == pytest.approx(r["floor_ms"], rel=1e-12)
                moved += a["floor"] < b["floor"]  # the memory-bound cells' floors drop
        else:
            assert a["floor"] == pytest.approx(b["floor"], rel=1e-12)
    assert moved >= 4
    md = R.render_fla_bench(summary, prov, rows, tmp_path / "s.md", tmp_path / "s.tex").markdown
    assert "Rows of 2 runs in one folder" in md and "700 TFLOP/s, 4.00 TB/s; 700 TFLOP/s, 4.20 TB/s" in md
    # native in a main cell: the first run did not time it, the second planned only native's own cells
    notes = _notes(md)
    cell = _find(_body(md), "gdn", 128, 1024, 1024, "bwd")[7]
    assert notes[REASON_CELL.match(cell).group(2)] == "not run at this size (native's cells use B*H*T = 65,536)"


# ------------------------------------------------------------------------------------------------ figure


@pytest.mark.slow
def test_figure_series_and_files(loaded, tmp_path):
    summary, _, rows = loaded
    s = R.figure_series(summary, rows, "bwd")
    assert list(s) == [("gdn", 128), ("gdn", 64), ("sgdn", 128), ("sgdn", 64)]
    assert s[("gdn", 128)]["ratio"][("ours", 2**20)] == [(1024, pytest.approx(1.5)), (4096, pytest.approx(1.5))]
    assert s[("gdn", 128)]["ratio"][("native", 2**16)] == [(1024, pytest.approx(4.0)), (4096, pytest.approx(4.0))]
    assert ("native", 2**16) not in s[("sgdn", 64)]["time"]  # one error, one never reached
    assert [T for T, *_ in s[("sgdn", 128)]["time"][("fla", 2**20)]] == [1024]  # the NaN cell is not plotted
    T, med, p10, p90 = s[("gdn", 128)]["time"][("fla", 2**20)][0]
    r = _bench(rows, "gdn", 128, 1024, "bench", "fla", "bwd")
    assert (med, p10, p90) == (r["median_ms"], r["p10_ms"], r["p90_ms"])
    assert [f for _, f in s[("gdn", 64)]["floor"][2**20]] == pytest.approx(
        [t["floor"] for t in R.table_rows(summary, rows)
         if (t["member"], t["V"], t["mode"]) == ("gdn", 64, "bwd") and t["BH"] * t["T"] == 2**20])
    png, pdf = R.render_fla_bench_figure(summary, rows, tmp_path / "a")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    assert pdf.read_bytes()[:5] == b"%PDF-"
    png2, pdf2 = R.render_fla_bench_figure(summary, rows, tmp_path / "b")
    assert png.read_bytes() == png2.read_bytes() and pdf.read_bytes() == pdf2.read_bytes()


def test_figure_of_a_run_with_no_timing(tmp_path):
    summary, prov, rows = R.load_run(F.write_fixture_run(tmp_path / "run", native=False))
    rows = [r for r in rows if r["kind"] != "bench"]
    png, _ = R.render_fla_bench_figure(summary, rows, tmp_path)
    assert png.is_file()


# ------------------------------------------------------------------------------------------------ committed


@pytest.mark.skipif(not (RESULTS / "summary.json").exists(), reason="no committed fla bench run yet")
def test_committed_fla_bench_rendered(tmp_path):
    """Every planned cell is in the committed table, which is what the renderer gives for the committed rows."""
    summary, prov, rows = R.load_run(RESULTS)
    got = R.render_fla_bench(summary, prov, rows, tmp_path / "t.md", tmp_path / "t.tex")
    assert len(_body(got.markdown)) == 2 * len(R.planned_cells(summary, rows))
    for r in rows:  # the ratios the summary printed are the rows' medians
        if r.get("kind") == "bench" and r.get("status") == "ok":
            assert r["p10_ms"] <= r["median_ms"] <= r["p90_ms"]
    if (TABLES / "gdn_fla_bench.md").exists():
        assert got.markdown == (TABLES / "gdn_fla_bench.md").read_text()
        assert got.latex == (TABLES / "gdn_fla_bench.tex").read_text()


def test_median_helper_agrees_with_statistics():
    """The fixture's planted ratios rest on the medians of its samples being the scaled medians."""
    for impl, f in (("ours", F.OURS_OVER_FLA["bwd"]), ("native", F.NATIVE_OVER_FLA["bwd"])):
        a = F.samples_for(impl, ("gdn", 128, 1024, 512, 2))["bwd"]
        b = F.samples_for("fla", ("gdn", 128, 1024, 512, 2))["bwd"]
        assert statistics.median(a) / statistics.median(b) == pytest.approx(f)


def test_skip_rows_that_name_their_cell_only_in_the_task(loaded, tmp_path):
    """Runs made before skip rows carried member/V/T/B (the committed H200 run) name the cell in ``task`` only;
    such a budget skip must still reach every B of that member and shape, and no other cell."""
    summary, prov, rows = loaded
    target = next(r for r in rows if r.get("kind") == "bench" and r.get("status") == "ok")
    member, V, T = target["member"], target["V"], target["T"]

    def same_shape(r):
        return (r.get("kind") in ("bench", "bench_check", "skip", "task_error") and r.get("member") == member
                and r.get("V") == V and r.get("T") == T)

    cells = {r.get("cell", "bench") for r in rows if same_shape(r)}
    kept = [r for r in rows if not same_shape(r)]
    kept += [{"kind": "skip", "task": f"{cell} {member} V={V} T={T}", "reason": "budget",
              "schema": "lethe.gdn.fla_compare/1"} for cell in sorted(cells)]
    got = R.render_fla_bench(summary, prov, kept, tmp_path / "t.md", tmp_path / "t.tex")
    body, notes = _body(got.markdown), _notes(got.markdown)
    hit = [row for row in body if row[0] == member and row[1] == str(V) and row[2] == f"{T:,}"]
    assert hit
    for row in hit:
        for c in row[5:7]:
            m = REASON_CELL.match(c)
            assert m and notes[m.group(2)] == "skipped: budget", c
