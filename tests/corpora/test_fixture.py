"""The committed fixture corpus: upstream schema, rebuildable byte for byte, every class and funnel branch."""

from __future__ import annotations

import collections

import pyarrow.parquet as pq
import pytest

from lethe.corpora import classify, extract, fixture
from lethe.corpora.items import load_items


@pytest.fixture(scope="module")
def table():
    return pq.read_table(fixture.OUT)


def test_schema_is_upstream(table):
    assert table.schema.equals(fixture.schema())
    assert table.num_rows >= 40
    recs = table.to_pylist()
    assert all(len(r["messages"]) == 10 for r in recs)
    assert all([m["role"] for m in r["messages"]] == ["user", "assistant"] * 5 for r in recs)
    assert [r["uuid"] for r in recs] == list(range(len(recs)))


def test_committed_file_is_what_the_generator_builds(tmp_path):
    out = fixture.build(tmp_path / "f.parquet")
    assert out.read_bytes() == fixture.OUT.read_bytes()


def test_every_operator_class_is_present(table):
    classes = collections.Counter(classify.classify(r) for r in table.column("original_python_code").to_pylist())
    assert set(classes) == set(classify.CLASSES)


def test_extraction_recovers_each_manifest_candidate(table):
    for rec, entry in zip(table.to_pylist(), fixture.MANIFEST, strict=True):
        item = extract.to_item(rec)
        want = (fixture.KERNELS / entry.task / f"{entry.variant}.py").read_text()
        if entry.layout == "none":
            assert item["candidate"] is None
        else:
            assert item["candidate"] == want, (entry, item["candidate_turn"])


def _runs(src: str) -> bool:
    ns: dict = {}
    try:
        exec(compile(src, "ref.py", "exec"), ns)  # noqa: S102 - our own committed reference sources
        ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
        return True
    except Exception:  # noqa: BLE001
        return False


def test_every_funnel_branch_is_represented():
    entries = fixture.MANIFEST
    assert any(e.final_speedup <= 0 for e in entries)  # not accepted
    broken = [e for e in entries if e.final_speedup > 0 and not _runs((fixture.KERNELS / e.task / "reference.py")
                                                                       .read_text())]
    assert broken and {e.task for e in broken} == {"broken_ref"}  # reference not executable
    assert any(e.variant == "aot_compile_error" and e.final_speedup > 0 for e in entries)  # toolchain artifact
    assert any(e.layout == "none" and e.final_speedup > 0 for e in entries)  # no candidate
    # ... and rows that should reach the gates, in every audited class.
    audited = load_items(fixture.OUT, "fixture")
    assert {i["op_class"] for i in audited} == set(classify.AUDITED)
    styles = collections.Counter(e.layout for e in entries)
    assert {"final", "earlier", "revised", "none"} <= set(styles)
