"""The committed second-corpus results (results/foreign/sakana-subset/): schema, internal consistency, and the
rendered tables/figure matching what the committed files render to."""

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from lethe.foreign import second_corpus as sc
from lethe.verifier.records import SCHEMAS, is_verdict_schema, read_rows, validate

ROOT = Path(__file__).resolve().parents[2]
RES = ROOT / "results" / "foreign" / "sakana-subset"
FILES = ("rows.parquet", "kb_rows.parquet", "compile.parquet", "timings.parquet", "throughput.json",
         "provenance.json")
COMPILE_COLUMNS = {"position", "id", "level", "task", "op_name", "op_class", "sakana_correct", "ext_name",
                   "candidate_extracted", "build_attempted", "compiled", "compile_seconds", "error"}

pytestmark = pytest.mark.skipif(not all((RES / f).exists() for f in FILES),
                                reason="results/foreign/sakana-subset not committed yet")


@pytest.fixture(scope="module")
def rows():
    return read_rows(RES / "rows.parquet")


@pytest.fixture(scope="module")
def tp():
    return json.loads((RES / "throughput.json").read_text())


def test_files_are_small():
    for p in RES.iterdir():
        assert p.stat().st_size < 200_000, p.name


def test_rows_follow_the_verdict_schema(rows):
    assert is_verdict_schema(pq.read_schema(RES / "rows.parquet").remove_metadata())
    for r in rows:
        validate(r)
        assert r["schema"] in SCHEMAS and r["corpus"] == "sakana-subset"
    per_kernel = {}
    for r in rows:
        per_kernel.setdefault(r["id"], []).append(r["profile"])
    assert all(sorted(p) == ["cuda-default", "fast-math", "strict"] for p in per_kernel.values())


def test_compile_table_covers_the_selection(rows):
    comp = pd.read_parquet(RES / "compile.parquet")
    assert COMPILE_COLUMNS <= set(comp.columns)
    assert comp["position"].tolist() == list(range(len(comp)))
    assert not (comp["compiled"] & ~comp["build_attempted"]).any()
    assert not (comp["build_attempted"] & ~comp["candidate_extracted"]).any()
    compiled = set(comp.loc[comp["compiled"], "id"])
    assert {r["id"] for r in rows} <= compiled  # only built kernels reach the battery


def test_kb_and_timings_cover_the_audited_kernels(rows):
    audited = {r["id"] for r in rows}
    kb = pd.read_parquet(RES / "kb_rows.parquet")
    assert set(kb["id"]) == audited and kb["id"].is_unique
    assert {"outcome", "correct", "seconds", "variant"} <= set(kb.columns)
    tim = pd.read_parquet(RES / "timings.parquet")
    assert set(tim["id"]) == audited and tim["id"].is_unique
    for t in tim.to_dict("records"):
        assert t["battery_s"] == round(sc.battery_seconds(t), 3)
        assert t["cold_reference"] == sc.is_cold(t)


def test_throughput_is_what_the_timings_say(rows, tp):
    tim = pd.read_parquet(RES / "timings.parquet").to_dict("records")
    comp = pd.read_parquet(RES / "compile.parquet").to_dict("records")
    kb = pd.read_parquet(RES / "kb_rows.parquet").to_dict("records")
    again = sc.throughput_summary(
        tim, [c for c in comp if c["build_attempted"]], compile_wall_s=tp["compile_s"]["wall_parallel"],
        workers=tp["compile_s"]["workers"], kb_rows=kb, scaling=tp["scaling"], goal={
            k: tp["goal"][k] for k in ("kernels", "per_kernel_s")})
    for key in ("per_kernel_s", "per_kernel_cold_s", "per_kernel_warm_s", "phases_s", "phases_warm_s",
                "compile_s", "kernelbench_s", "goal", "kernels_timed"):
        assert tp[key] == again[key], key
    assert tp["kernels_timed"] == len({r["id"] for r in rows if r["status"] == "gated"})
    assert tp["compiled"] == sum(c["compiled"] for c in comp) and tp["selected"] == len(comp)


def test_provenance_names_the_device_and_the_ingest():
    prov = json.loads((RES / "provenance.json").read_text())
    assert prov["schema"] == "lethe.provenance/1" and prov["gpu"] != "cpu"
    assert prov["ingest"]["by"] == "lethe.foreign.ingest" and prov["ingest"]["runs"]


def test_report_caption_quotes_the_committed_numbers(tp):
    rst = " ".join((ROOT / "workflow" / "report" / "audit_throughput.rst").read_text().split())
    assert f"median {tp['goal']['measured_median_s']:.2f} s" in rst
    assert f"{tp['goal']['measured_warm_median_s']:.2f} s warm" in rst
    assert f"Only {tp['kernels_timed']} of the {tp['selected']} selected kernels" in rst
    assert "published figures (paper authors' release)" in rst


def test_rendered_outputs_match_the_committed_results(tmp_path):
    from lethe.foreign.render import FIGURE, TABLES, render

    targets = [ROOT / "paper" / "tables" / f"{t}.{e}" for t in TABLES for e in ("md", "tex")]
    targets += [ROOT / "figures" / f"{FIGURE}.{e}" for e in ("png", "pdf")]
    if not all(p.exists() for p in targets):
        pytest.skip("foreign tables not rendered yet")
    render(RES, tmp_path / "tables", tmp_path / "figures", ROOT / "data" / "published" / "audit_sakana.json")
    for p in targets:
        fresh = tmp_path / ("figures" if p.parent.name == "figures" else "tables") / p.name
        assert fresh.read_bytes() == p.read_bytes(), p.name


def test_committed_files_are_rebuilt_from_the_committed_record(tmp_path, monkeypatch):
    """record/ holds the experiment's append-only logs (gzipped); ingesting them with the committed run logs and
    the provenance's run lines and notes gives back the committed parquet/JSON files byte for byte."""
    import gzip
    import shutil

    from lethe.foreign import ingest

    rec = RES / "record"
    if not rec.exists():
        pytest.skip("no record committed")
    src, dest = tmp_path / "src", tmp_path / "dest"
    src.mkdir()
    for gz in rec.glob("*.jsonl.gz"):
        (src / gz.name[:-3]).write_bytes(gzip.decompress(gz.read_bytes()))
    prov = json.loads((RES / "provenance.json").read_text())
    block = prov.pop("ingest")
    (src / "provenance.json").write_text(json.dumps(prov))
    shutil.copyfile(RES / "gpu.txt", src / "gpu.txt")
    monkeypatch.chdir(ROOT)  # the summary names the published rows by their repository-relative path
    ingest.ingest(src, dest, logs=[RES / name for name in block["logs"]], runs=block["runs"], notes=block["notes"],
                  subset=ingest.SUBSET, published_rows=ingest.PUBLISHED_ROWS)
    for name in ("rows.parquet", "compile.parquet", "timings.parquet", "kb_rows.parquet", "throughput.json",
                 "provenance.json"):
        assert (dest / name).read_bytes() == (RES / name).read_bytes(), name
