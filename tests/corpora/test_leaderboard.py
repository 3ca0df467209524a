"""Leaderboard adapter: pinned inputs refuse wrong or absent files, pairing counts problems from 1, and the
materialised layout is what ``lethe audit --kernelbench`` reads, with the same ids, byte for byte repeatable."""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import time
import urllib.error
from pathlib import Path

import pytest

from lethe.audit.batch import discover
from lethe.corpora import fetch as F
from lethe.corpora import leaderboard as LB
from lethe.corpora.classify import classify

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "leaderboard"
RAW_FIX = FIX / "raw_data.json"
DATA_FIX = FIX / "data.json"
KB_FIX = FIX / "kb"
REPO = Path(__file__).resolve().parents[2]
SHARED_RAW = REPO / LB.DEFAULT_RAW
SHARED_KB = REPO / LB.DEFAULT_KB


def offline(req, timeout):
    raise urllib.error.URLError("network unreachable (test)")


def rows():
    return LB.load_rows(RAW_FIX)


def by_file(entries):
    return {e["file"]: e for e in entries}


# ---------------------------------------------------------------- pins


def test_raw_offline_fails_at_once_with_one_line_hand_supply_instruction(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(F.FetchError) as exc:
        LB.resolve_raw(tmp_path / "absent.json", tmp_path / "cache", opener=offline)
    assert time.monotonic() - t0 < 2
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in (LB.RAW.url(), LB.LB_COMMIT, LB.RAW.sha256, "by hand", str(LB.RAW.path(tmp_path / "cache")),
                   "corpora.leaderboard.raw", str(tmp_path / "absent.json")):
        assert needle in msg
    assert LB.RAW.url() == ("https://raw.githubusercontent.com/anneouyang/KernelBenchLeaderboard/"
                            f"{LB.LB_COMMIT}/docs/assets/raw_data.json")


def test_hand_supplied_raw_with_another_hash_is_refused(tmp_path):
    with pytest.raises(F.HashMismatch):
        LB.resolve_raw(RAW_FIX, tmp_path / "cache", opener=offline)
    with pytest.raises(F.HashMismatch):
        LB.resolve_data(DATA_FIX, tmp_path / "cache", opener=offline)


def test_data_offline_fails_at_once_naming_its_pin(tmp_path):
    with pytest.raises(F.FetchError) as exc:
        LB.resolve_data(None, tmp_path / "cache", opener=offline)
    msg = str(exc.value)
    assert "\n" not in msg and LB.DATA.url() in msg and LB.DATA.sha256 in msg and "corpora.leaderboard.data" in msg


def test_cli_refuses_unpinned_inputs_with_one_line_and_exit_2(tmp_path, capsys):
    rc = LB.main(["materialise", "--out", str(tmp_path / "o"), "--raw", str(RAW_FIX), "--kb", str(KB_FIX),
                  "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "SHA-256" in err
    assert not (tmp_path / "o").exists()


def test_kernelbench_offline_fails_at_once_with_one_line(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(F.FetchError) as exc:
        LB.resolve_kernelbench(None, tmp_path / "cache", opener=offline)
    assert time.monotonic() - t0 < 2
    msg = str(exc.value)
    assert "\n" not in msg and LB.KB_COMMIT in msg and "by hand" in msg


def test_kernelbench_copy_with_one_edited_file_is_refused(tmp_path):
    manifest = {"repo": LB.KB_REPO, "commit": LB.KB_COMMIT, "license": "MIT", "files": [
        {"path": str(p.relative_to(KB_FIX)), "sha256": F.sha256_file(p), "size": p.stat().st_size}
        for p in sorted(KB_FIX.rglob("*.py"))]}
    copy = tmp_path / "kb"
    shutil.copytree(KB_FIX, copy)
    LB.verify_kernelbench(copy, manifest)  # the untouched copy passes
    target = copy / manifest["files"][0]["path"]
    original = target.read_text()
    target.write_text(original + "\n# edited\n")
    with pytest.raises(F.HashMismatch, match="1 of"):
        LB.verify_kernelbench(copy, manifest)
    target.write_text(original)
    extra = copy / "KernelBench" / "level1" / "7_Extra_problem.py"
    extra.write_text("class Model: pass\n")
    with pytest.raises(F.HashMismatch, match="not pinned"):
        LB.verify_kernelbench(copy, manifest)


def test_committed_kernelbench_manifest_pins_only_paths_and_hashes():
    m = LB.kb_manifest()
    assert m["commit"] == LB.KB_COMMIT and m["repo"] == LB.KB_REPO
    paths = [f["path"] for f in m["files"]]
    assert {"src/__init__.py", "src/eval.py", "src/utils.py"} <= set(paths)
    assert len(set(paths)) == len(paths)
    assert all(set(f) == {"path", "sha256", "size"} for f in m["files"])
    problems = [p for p in paths if p.startswith("KernelBench/level")]
    assert len(problems) == 250  # KernelBench's three levels at this commit: 100 + 100 + 50 problems
    pins = LB.kb_pins(m)
    assert pins[0].url() == f"https://raw.githubusercontent.com/{LB.KB_REPO}/{LB.KB_COMMIT}/{pins[0].filename}"


@pytest.mark.skipif(not SHARED_KB.is_dir(), reason="no shared KernelBench copy on this machine")
def test_committed_manifest_matches_the_shared_kernelbench_copy():
    LB.verify_kernelbench(SHARED_KB)
    assert LB.build_kb_manifest(SHARED_KB) == LB.kb_manifest()


@pytest.mark.skipif(not SHARED_RAW.is_file(), reason="no shared leaderboard copy on this machine")
def test_pinned_raw_download_lands_verified_in_the_cache(tmp_path):
    payload = SHARED_RAW.read_bytes()
    seen = []

    class Resp:
        status = 200

        def __init__(self):
            self.left = payload

        def read(self, n):
            out, self.left = self.left[:n], self.left[n:]
            return out

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def server(req, timeout):
        seen.append(req.full_url)
        assert req.get_header("Authorization") is None  # a Hub token never goes to a git host
        return Resp()

    path = LB.resolve_raw(None, tmp_path, opener=server)
    assert seen == [LB.RAW.url()]
    assert path == LB.RAW.path(tmp_path) and F.sha256_file(path) == LB.RAW.sha256


@pytest.mark.skipif(not SHARED_KB.is_dir(), reason="no shared KernelBench copy on this machine")
def test_pinned_kernelbench_download_builds_a_verified_checkout_in_the_cache(tmp_path):
    prefix = f"https://raw.githubusercontent.com/{LB.KB_REPO}/{LB.KB_COMMIT}/"
    seen = []

    def server(req, timeout):
        assert req.full_url.startswith(prefix)
        seen.append(req.full_url[len(prefix):])
        return io.BytesIO((SHARED_KB / seen[-1]).read_bytes())

    root = LB.resolve_kernelbench(None, tmp_path, opener=server)
    assert sorted(seen) == sorted(f["path"] for f in LB.kb_manifest()["files"])
    LB.verify_kernelbench(root)
    assert len(LB.problem_index(root)) == len(LB.problem_index(SHARED_KB))


# ---------------------------------------------------------------- pairing


def test_pairing_counts_problems_from_one():
    entries = by_file(LB.pair(rows(), KB_FIX))
    for r in rows():
        e = entries[r["file"]]
        assert e["problem"] == r["problem_id"] + 1
        if e["drop"] is None:
            assert Path(e["ref_path"]).name.startswith(f"{r['problem_id'] + 1}_")
            assert Path(e["ref_path"]).parent.name == f"level{r['level']}"
    # problem_id 0 must not pair with a file numbered 0 or 2, nor 99 with 99
    names = {Path(e["ref_path"]).name for e in entries.values() if e["drop"] is None}
    assert "1_Scale_by_two.py" in names and "100_Margin_loss_fixture.py" in names


def test_pairing_check_counts_agreement_with_the_problem_index(tmp_path):
    listed = {e["file"] for v in json.loads(DATA_FIX.read_text()).values() for e in v}
    check = LB.pairing_check(rows(), DATA_FIX)
    assert check["problem_id_plus_1"] == len(listed) and check["problem_id_plus_0"] == check["other"] == 0
    assert check["absent_from_data_json"] == len(rows()) - len(listed)
    # A row the index files under problem_id itself (an off-by-one the other way) is counted, not hidden.
    data = json.loads(DATA_FIX.read_text())
    moved = data.pop("Level 1: 100_Margin_loss_fixture")
    data["Level 1: 99_Margin_loss_fixture"] = moved
    (tmp_path / "data.json").write_text(json.dumps(data))
    check = LB.pairing_check(rows(), tmp_path / "data.json")
    assert check["problem_id_plus_0"] == len(moved)
    assert check["problem_id_plus_1"] == len(listed) - len(moved)


@pytest.mark.skipif(not (SHARED_RAW.is_file() and (REPO / LB.DEFAULT_DATA).is_file()),
                    reason="no shared leaderboard copy on this machine")
def test_no_upstream_row_contradicts_the_pairing_rule():
    check = LB.pairing_check(LB.load_rows(SHARED_RAW), REPO / LB.DEFAULT_DATA)
    assert check["problem_id_plus_0"] == check["other"] == 0 and check["problem_id_plus_1"] > 0


def test_rows_without_a_problem_file_are_dropped_with_their_reason():
    entries = LB.pair(rows(), KB_FIX)
    index = LB.problem_index(KB_FIX)
    for e in entries:
        has_file = (e["level"], e["problem"]) in index
        assert (e["drop"] is None) == has_file
        if not has_file:
            assert f"level{e['level']}/{e['problem']}_" in e["drop"] and e["id"] is None
    assert any(e["drop"] for e in entries), "the fixture must exercise a drop"


def test_differing_problems_are_paired_and_flagged():
    entries = LB.pair(rows(), KB_FIX)
    flagged = [e for e in entries if e["problem_file_differs"]]
    assert flagged and all((e["level"], e["problem"]) in LB.DIFFERING and e["drop"] is None for e in flagged)
    assert all(not e["problem_file_differs"] for e in entries if (e["level"], e["problem"]) not in LB.DIFFERING)
    assert set(LB.DIFFERING) == {(1, 100), (2, 44)}


def test_operator_class_is_the_classifier_on_the_kernelbench_reference():
    for e in LB.pair(rows(), KB_FIX):
        if e["drop"] is None:
            assert e["op_class"] == classify((KB_FIX / e["ref_path"]).read_text())


def test_samples_rank_models_by_name_within_a_problem():
    entries = [e for e in LB.pair(rows(), KB_FIX) if e["drop"] is None]
    groups = {}
    for e in entries:
        groups.setdefault((e["level"], e["problem"]), []).append(e)
    assert any(len(g) > 1 for g in groups.values()), "the fixture must put two models on one problem"
    for g in groups.values():
        assert [e["model"] for e in sorted(g, key=lambda e: e["sample"])] == sorted(e["model"] for e in g)
        assert sorted(e["sample"] for e in g) == list(range(len(g)))


@pytest.mark.parametrize("src,flag", [
    ('AT_DISPATCH_FLOATING_TYPES(input.type(), "k", ([&] {}));', True),
    ('AT_DISPATCH_FLOATING_TYPES_AND_HALF( x.type() , "k", ([&] {}));', True),
    ('AT_DISPATCH_FLOATING_TYPES(inputs[0].type(), "k", ([&] {}));', True),
    ('AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "k", ([&] {}));', False),
    ('TORCH_CHECK(x.type().is_cuda(), "cuda");\nAT_DISPATCH_ALL_TYPES(x.scalar_type(), "k", ([&] {}));', False),
    ("x = y.type()", False),
])
def test_static_check_predicts_the_dispatch_on_type_compile_failure(src, flag):
    assert (LB.predicted_compile_failure(src) is not None) == flag


# ---------------------------------------------------------------- layout, funnel, summary


def test_materialised_layout_reads_back_through_the_audit_with_the_manifest_ids(tmp_path):
    res = LB.materialise(rows(), KB_FIX, tmp_path / "run")
    man = [json.loads(x) for x in (tmp_path / "run" / "manifest.jsonl").read_text().splitlines()]
    items = discover(tmp_path / "run", kernelbench=str(KB_FIX))
    assert [i["id"] for i in items] == [m["id"] for m in man]
    assert res["written"] == len(man) == len([e for e in LB.pair(rows(), KB_FIX) if e["drop"] is None])
    code = {r["file"]: r["code"] for r in rows()}
    for it, m in zip(items, man, strict=True):
        assert "extract_error" not in it
        assert Path(it["ref_path"]).resolve() == (KB_FIX / m["ref_path"]).resolve()
        assert it["candidate"] == code[m["file"]]
        assert hashlib.sha256(it["candidate"].encode()).hexdigest() == m["code_sha256"]
        assert (it["level"], it["problem"], it["sample"]) == (m["level"], m["problem"], m["sample"])


def test_materialise_is_deterministic_whatever_the_row_order(tmp_path):
    shuffled = rows()
    random.Random(7).shuffle(shuffled)
    LB.materialise(rows(), KB_FIX, tmp_path / "a")
    LB.materialise(shuffled, KB_FIX, tmp_path / "b")
    LB.materialise(rows(), KB_FIX, tmp_path / "a")  # again in place
    files_a = sorted(p.name for p in (tmp_path / "a").iterdir())
    assert files_a == sorted(p.name for p in (tmp_path / "b").iterdir())
    for name in files_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_materialise_refuses_results_and_foreign_kernels(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="results"):
        LB.materialise(rows(), KB_FIX, Path("results") / "audit" / "leaderboard")
    other = tmp_path / "other"
    other.mkdir()
    (other / "level_9_problem_9_sample_0_kernel.py").write_text("pass\n")
    with pytest.raises(ValueError, match="does not write"):
        LB.materialise(rows(), KB_FIX, other)


def test_funnel_counts_every_row_and_every_predicted_failure():
    entries = LB.pair(rows(), KB_FIX)
    stages = {s["stage"]: s for s in LB.funnel(entries)["stages"]}
    assert list(stages) == list(LB.FUNNEL_STAGES)
    assert stages["listed"]["kept"] == len(rows())
    assert stages["paired"]["kept"] + sum(stages["paired"]["dropped"].values()) == stages["listed"]["kept"]
    paired = [e for e in entries if e["drop"] is None]
    code = {r["file"]: r["code"] for r in rows()}
    predicted = [e for e in paired if LB.predicted_compile_failure(code[e["file"]])]
    assert predicted, "the fixture must exercise the static check"
    assert sum(stages["compiles"]["predicted_drops"].values()) == len(predicted)
    assert stages["paired"]["flagged"]["problem_file_differs"] == sum(e["problem_file_differs"] for e in paired)
    assert all(stages[s]["kept"] is None for s in ("compiles", "reference_in_budget", "not_toolchain_artifact"))


def test_summary_carries_counts_and_pins_but_no_source():
    entries = LB.pair(rows(), KB_FIX)
    s = LB.summary(entries, RAW_FIX, KB_FIX, LB.pairing_check(rows(), DATA_FIX))
    text = json.dumps(s)
    for r in rows():
        assert r["code"] not in text and "ModelNew" not in text
    assert sum(s["counts"]["per_model"].values()) == s["counts"]["paired"]
    assert sum(s["counts"]["per_level"].values()) == s["counts"]["paired"]
    assert s["pins"]["raw_data"]["sha256"] == LB.RAW.sha256
    assert s["provenance"]["raw_data_sha256"] == F.sha256_file(RAW_FIX)
    assert s["provenance"]["pairing_check"] == LB.pairing_check(rows(), DATA_FIX)


@pytest.mark.skipif(not (SHARED_RAW.is_file() and SHARED_KB.is_dir()), reason="no shared leaderboard copy")
def test_cli_materialises_the_pinned_corpus_for_the_audit(tmp_path, capsys):
    out = tmp_path / "run"
    rc = LB.main(["materialise", "--out", str(out), "--raw", str(SHARED_RAW), "--kb", str(SHARED_KB),
                  "--cache-dir", str(tmp_path / "cache")])
    printed = json.loads(capsys.readouterr().out)
    assert rc == 0
    man = [json.loads(x) for x in (out / "manifest.jsonl").read_text().splitlines()]
    assert printed["written"] == len(man) == len(list(out.glob("*_kernel.py")))
    assert printed["listed"] == len(LB.load_rows(SHARED_RAW))
    items = discover(out, kernelbench=str(SHARED_KB))
    assert [i["id"] for i in items] == [m["id"] for m in man]
    assert not any("extract_error" in i for i in items)


@pytest.mark.skipif(not (SHARED_RAW.is_file() and SHARED_KB.is_dir() and (REPO / LB.DEFAULT_DATA).is_file()),
                    reason="no shared leaderboard copy")
def test_committed_summary_is_what_the_pinned_inputs_give(tmp_path):
    out = tmp_path / "corpus.json"
    assert LB.main(["summary", "--out", str(out), "--raw", str(SHARED_RAW), "--kb", str(SHARED_KB),
                    "--data", str(REPO / LB.DEFAULT_DATA), "--cache-dir", str(tmp_path / "cache")]) == 0
    assert out.read_bytes() == (REPO / "results/audit/leaderboard/corpus.json").read_bytes()
