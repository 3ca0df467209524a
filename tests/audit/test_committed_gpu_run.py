"""The committed GPU run (results/audit/mixed, results/tool/latency): schema, provenance, internal consistency.
CI has no GPU; these check what the H200 run left behind, so a hand edit or a partial ingest cannot land."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lethe.provenance import validate
from lethe.verifier import records as R

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "results" / "audit" / "mixed"
LAT = ROOT / "results" / "tool" / "latency"
PROFILES = {"strict", "cuda-default", "fast-math"}

pytestmark = pytest.mark.skipif(not (RUN / "rows.parquet").is_file(), reason="no committed GPU run")


def test_rows_are_verdict_rows_of_every_kernel_under_every_profile():
    rows = R.read_rows(RUN / "rows.parquet")
    origin = json.loads((RUN / "origin.json").read_text())
    keys = [(r["id"], r["profile"]) for r in rows]
    assert len(keys) == len(set(keys))
    assert {i for i, _ in keys} == set(origin)
    assert all({p for i2, p in keys if i2 == i} == PROFILES for i in origin)
    for r in rows:
        env = json.loads(r["environment"])
        assert env["device"] == "cuda" and env["gpu"]["gpu"].startswith("NVIDIA")
        assert r["status"] in R.ROW_STATUSES
        assert all(g["status"] in R.GATE_STATUSES for g in (r.get("gates") or {}).values())


def test_resume_facts_match_the_rows():
    rows = R.read_rows(RUN / "rows.parquet")
    resume = json.loads((RUN / "resume.json").read_text())
    assert resume["first_attempt"]["rc"] == -9  # the first attempt really was killed
    assert resume["rows"] == resume["unique_rows"] == len(rows) == resume["checkpoint_lines"]
    assert resume["kernels"] * len(PROFILES) == len(rows)


def test_preregistered_outcome_follows_from_its_counts():
    pre = json.loads((RUN / "preregistered.json").read_text())
    n, k = pre["population"], pre["persisted"]
    assert 0 <= k <= n <= pre["denominator"]
    if n:
        assert pre["rate"] == k / n
        assert pre["verdict"] == ("robust" if k / n >= pre["threshold"] else "not robust")
    else:
        assert pre["verdict"] == "no evidence"


def test_provenance_is_the_devices():
    for d in (RUN, LAT):
        rec = json.loads((d / "provenance.json").read_text())
        assert validate(rec) == []
        assert rec["gpu"] == "NVIDIA H200" and rec["torch"].endswith("cu130")


def test_latency_file_says_what_finished():
    doc = json.loads((LAT / "latency.json").read_text())
    assert doc["schema"] == "lethe.latency/1"
    finished = sum(1 for k in doc["kernels"].values() if "cold" in k)
    if finished < len(doc["kernels"]):
        assert doc["status"].startswith("partial") and f"{finished} cold" in doc["status"]
