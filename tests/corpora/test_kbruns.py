"""KernelBench run-folder corpora (lethe.corpora.kbruns and its three pinned corpora): the pin refuses wrong,
missing or extra files, pairing counts problems from 1 against the fork's own problem files, every kernel is
either paired or dropped with a reason, upstream verdicts attach to the very kernel they judged, and the
materialised layout is what ``lethe audit --kernelbench`` reads, with the same ids, byte for byte."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil
import time
import urllib.error
from pathlib import Path

import pytest

from lethe.audit.batch import discover
from lethe.corpora import fetch as F
from lethe.corpora import hzeng_backends, kbruns, technoabsurdist_runs, yenhao_runs
from lethe.corpora.classify import classify
from lethe.corpora.kbruns import Run, RunsCorpus

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "kbruns"
REPO = Path(__file__).resolve().parents[2]
REAL = (hzeng_backends.SPEC, technoabsurdist_runs.SPEC, yenhao_runs.SPEC)


def offline(req, timeout):
    raise urllib.error.URLError("network unreachable (test)")


@pytest.fixture()
def spec(tmp_path):
    """The fixture repository as a corpus, its manifest built from the fixture tree into tmp_path."""
    s = RunsCorpus(name="fixture-runs", repo="example/KernelBench-fixture", commit="f" * 40, license="test only",
                   runs=(Run("runs/run_a", "model-a", "triton", "eval_results.json"),
                         Run("runs/run_b", "model-b", "cuda"),
                         Run("runs/run_c", "model-c", "cuda", "results.jsonl", "per_problem")),
                   manifest=str(tmp_path / "manifest.json"))
    m = kbruns.build_manifest(s, FIX)
    (tmp_path / "manifest.json").write_text(json.dumps(m))
    return s


def entries(spec):
    return kbruns.pair(spec, FIX)


def by_path(es):
    return {e["path"]: e for e in es}


# ---------------------------------------------------------------- pins


def test_manifest_pins_kernels_evaluations_licence_and_problems_of_the_levels_kept(spec):
    paths = {f["path"] for f in kbruns.manifest(spec)["files"]}
    kernels = {str(p.relative_to(FIX)) for p in (FIX / "runs").rglob("*.py")}
    assert kernels <= paths  # every kernel is pinned, the level-4 one included (it is listed, then dropped)
    assert {"LICENSE", "runs/run_a/eval_results.json", "runs/run_c/results.jsonl"} <= paths
    problems = {p for p in paths if p.startswith("KernelBench/")}
    assert problems == {str(p.relative_to(FIX)) for p in (FIX / "KernelBench" / "level1").glob("*.py")}
    assert "README.md" not in paths


def test_offline_fetch_fails_at_once_with_one_line_hand_supply_instruction(spec, tmp_path):
    t0 = time.monotonic()
    with pytest.raises(F.FetchError) as exc:
        kbruns.resolve(spec, tmp_path / "absent", tmp_path / "cache", opener=offline)
    assert time.monotonic() - t0 < 2
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in (spec.repo, spec.commit, "by hand", "--src", str(tmp_path / "absent")):
        assert needle in msg


def test_hand_supplied_tree_is_used_only_when_every_pinned_file_matches(spec, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(FIX, copy)
    assert kbruns.resolve(spec, copy, tmp_path / "cache", opener=offline) == copy
    target = copy / "runs/run_a/level_1_problem_2_sample_0_kernel.py"
    original = target.read_bytes()
    target.write_bytes(original + b"\n# edited\n")
    with pytest.raises(F.HashMismatch, match="1 of"):
        kbruns.resolve(spec, copy, tmp_path / "cache", opener=offline)
    target.write_bytes(original)
    (copy / "runs/run_c/results.jsonl").unlink()
    with pytest.raises(F.HashMismatch, match="missing"):
        kbruns.verify_tree(spec, copy)


@pytest.mark.parametrize("extra", ["runs/run_a/level_1_problem_7_sample_0_kernel.py",
                                   "runs/run_c/generated_kernels/level_1/problem_8.py",
                                   "KernelBench/level1/4_Extra_problem.py"])
def test_an_unpinned_kernel_or_problem_file_in_the_tree_is_refused(spec, tmp_path, extra):
    copy = tmp_path / "copy"
    shutil.copytree(FIX, copy)
    (copy / extra).write_text("class ModelNew: pass\n")
    with pytest.raises(F.HashMismatch, match="not pinned"):
        kbruns.verify_tree(spec, copy)


def test_pinned_download_builds_a_verified_tree_in_the_cache(spec, tmp_path):
    prefix = f"https://raw.githubusercontent.com/{spec.repo}/{spec.commit}/"
    seen = []

    class Resp:
        status = 200

        def __init__(self, data):
            self.left = data

        def read(self, n):
            out, self.left = self.left[:n], self.left[n:]
            return out

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    def server(req, timeout):
        assert req.full_url.startswith(prefix)
        seen.append(req.full_url[len(prefix):])
        return Resp((FIX / seen[-1]).read_bytes())

    root = kbruns.resolve(spec, None, tmp_path, opener=server)
    assert sorted(seen) == sorted(f["path"] for f in kbruns.manifest(spec)["files"])
    kbruns.verify_tree(spec, root)
    assert [e["id"] for e in kbruns.pair(spec, root)] == [e["id"] for e in entries(spec)]


def test_a_manifest_for_another_commit_is_refused(spec):
    with pytest.raises(kbruns.SchemaError, match="pins"):
        kbruns.manifest(dataclasses.replace(spec, commit="e" * 40))


# ---------------------------------------------------------------- pairing


def test_every_listed_kernel_is_paired_with_its_own_problem_number_or_dropped_with_a_reason(spec):
    es = entries(spec)
    assert len(es) == len(list((FIX / "runs").rglob("*.py")))
    for e in es:
        if e["drop"] is None:
            assert Path(e["ref_path"]).name.startswith(f"{e['problem']}_")
            assert Path(e["ref_path"]).parent.name == f"level{e['level']}"
            assert e["op_class"] == classify((FIX / e["ref_path"]).read_text())
        else:
            assert e["id"] is None and e["sample"] is None
    drops = {e["path"]: e["drop"] for e in es if e["drop"]}
    assert "no ModelNew" in drops["runs/run_b/level_1_problem_2_sample_0_kernel.py"]
    assert "level 4 is outside" in drops["runs/run_c/generated_kernels/level_4/problem_1.py"]
    assert "no problem file KernelBench/level1/9_" in drops["runs/run_c/generated_kernels/level_1/problem_9.py"]
    assert len(drops) == 3


def test_samples_rank_runs_by_folder_name_within_a_problem(spec):
    paired = [e for e in entries(spec) if e["drop"] is None]
    groups = {}
    for e in paired:
        groups.setdefault((e["level"], e["problem"]), []).append(e)
    assert any(len(g) > 1 for g in groups.values()), "the fixture must put two runs on one problem"
    for g in groups.values():
        ordered = sorted(g, key=lambda e: e["sample"])
        assert [e["run"] for e in ordered] == sorted(e["run"] for e in g)
        assert [e["sample"] for e in ordered] == list(range(len(g)))
    assert len({e["id"] for e in paired}) == len(paired)


def test_upstream_verdicts_attach_only_to_the_kernel_they_judged(spec):
    e = by_path(entries(spec))
    assert (e["runs/run_a/level_1_problem_1_sample_0_kernel.py"]["upstream_compiled"],
            e["runs/run_a/level_1_problem_1_sample_0_kernel.py"]["upstream_correctness"]) == (True, True)
    assert e["runs/run_a/level_1_problem_2_sample_0_kernel.py"]["upstream_correctness"] is False
    # eval_results.json judges problem 3 under sample_id 1, not the sample-0 kernel the run holds
    assert e["runs/run_a/level_1_problem_3_sample_0_kernel.py"]["upstream_compiled"] is None
    assert e["runs/run_b/level_1_problem_1_sample_0_kernel.py"]["upstream_compiled"] is None  # run without eval
    assert e["runs/run_c/generated_kernels/level_1/problem_2.py"]["upstream_compiled"] is False  # by path


def test_a_malformed_evaluation_file_is_refused(spec, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(FIX, copy)
    (copy / "runs/run_a/eval_results.json").write_text(json.dumps({"one": {"compiled": True}}))
    with pytest.raises(kbruns.SchemaError):
        kbruns.pair(spec, copy)


@pytest.mark.parametrize("src,backend", [
    ("import triton\nclass ModelNew: pass", "triton"),
    ("@triton.jit\ndef k(): pass\nclass ModelNew: pass", "triton"),
    ("import cutlass.cute as cute\nclass ModelNew: pass", "cute"),
    ("import tilelang\nclass ModelNew: pass", "tilelang"),
    ("from torch.utils.cpp_extension import load_inline\nclass ModelNew: pass", "cuda"),
    ("import torch\nclass ModelNew(torch.nn.Module): pass", "pytorch"),
    ("# implement ModelNew here\nimport triton", "none"),
])
def test_backend_is_read_from_the_source(src, backend):
    assert kbruns.detect_backend(src) == backend


def test_relation_to_48642c5c_compares_bytes_then_names():
    kb = {(1, 1): ("1_A.py", "aa"), (1, 2): ("2_B.py", "bb")}
    assert kbruns.relation_to_48642c5c(1, 1, "1_A.py", "aa", kb) == "identical"
    assert kbruns.relation_to_48642c5c(1, 1, "1_A.py", "zz", kb) == "same_name"
    assert kbruns.relation_to_48642c5c(1, 2, "2_C.py", "cc", kb) == "different"
    assert kbruns.relation_to_48642c5c(1, 2, "2_C.py", "bb", kb) == "identical"  # same bytes under a new name
    assert kbruns.relation_to_48642c5c(4, 1, "1_A.py", "aa", kb) == "absent"


def test_fixture_problem_named_like_48642c5c_is_same_name_the_others_different(spec):
    rel = {e["ref_path"]: e["relation_to_48642c5c"] for e in entries(spec) if e["drop"] is None}
    assert rel["KernelBench/level1/1_Square_matrix_multiplication_.py"] == "same_name"
    assert rel["KernelBench/level1/2_Fixture_row_softmax.py"] == "different"


# ---------------------------------------------------------------- layout, funnel, summary


def test_materialised_layout_reads_back_through_the_audit_with_the_manifest_ids(spec, tmp_path):
    res = kbruns.materialise(spec, FIX, tmp_path / "out")
    run, probs = tmp_path / "out" / "run", tmp_path / "out" / "problems"
    man = [json.loads(x) for x in (run / "manifest.jsonl").read_text().splitlines()]
    items = discover(run, kernelbench=str(probs))
    assert [i["id"] for i in items] == [m["id"] for m in man]
    assert res["written"] == len(man) == len([e for e in entries(spec) if e["drop"] is None])
    for it, m in zip(items, man, strict=True):
        assert "extract_error" not in it
        assert Path(it["cand_path"]).read_bytes() == (FIX / m["path"]).read_bytes()
        assert Path(it["ref_path"]).read_bytes() == (FIX / m["ref_path"]).read_bytes()
        assert F.sha256_file(it["ref_path"]) == m["ref_sha256"]
    text = (run / "manifest.jsonl").read_text()
    for p in [*(FIX / "runs").rglob("*.py"), *(FIX / "KernelBench").rglob("*.py")]:
        assert p.read_text() not in text
    assert "class ModelNew" not in text and "class Model" not in text


def test_materialise_is_deterministic_whatever_the_run_order(spec, tmp_path):
    shuffled = list(spec.runs)
    random.Random(3).shuffle(shuffled)
    kbruns.materialise(spec, FIX, tmp_path / "a")
    kbruns.materialise(dataclasses.replace(spec, runs=tuple(shuffled)), FIX, tmp_path / "b")
    kbruns.materialise(spec, FIX, tmp_path / "a")  # again in place
    files_a = sorted(str(p.relative_to(tmp_path / "a")) for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert files_a == sorted(str(p.relative_to(tmp_path / "b")) for p in (tmp_path / "b").rglob("*") if p.is_file())
    for name in files_a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_materialise_refuses_results_and_foreign_kernels(spec, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="results"):
        kbruns.materialise(spec, FIX, Path("results") / "audit" / "x")
    (tmp_path / "other" / "run").mkdir(parents=True)
    (tmp_path / "other" / "run" / "level_9_problem_9_sample_0_kernel.py").write_text("pass\n")
    with pytest.raises(ValueError, match="does not write"):
        kbruns.materialise(spec, FIX, tmp_path / "other")


def test_funnel_and_summary_count_every_kernel_and_carry_no_source(spec):
    es = entries(spec)
    stages = {s["stage"]: s for s in kbruns.funnel(es)["stages"]}
    assert list(stages) == list(kbruns.FUNNEL_STAGES)
    assert stages["paired"]["kept"] + sum(stages["paired"]["dropped"].values()) == stages["listed"]["kept"] == len(es)
    paired = [e for e in es if e["drop"] is None]
    judged = [e for e in paired if e["upstream_compiled"] is not None]
    assert stages["compiles"]["upstream_eval"] == {"judged": len(judged),
                                                   "compiled": sum(e["upstream_compiled"] for e in judged),
                                                   "correct": sum(e["upstream_correctness"] for e in judged)}
    s = kbruns.summary(spec, es)
    c = s["counts"]
    for key in ("per_level", "per_class", "per_backend_detected", "per_model", "per_run", "upstream_verdict",
                "per_relation_to_48642c5c"):
        assert sum(c[key].values()) == c["paired"] == len(paired)
    assert c["per_backend_detected"] == {"cuda": 2, "pytorch": 2, "triton": 1}
    text = json.dumps(s)
    for p in [*(FIX / "runs").rglob("*.py"), *(FIX / "KernelBench").rglob("*.py")]:
        assert p.read_text() not in text
    assert "class ModelNew" not in text and "class Model" not in text


# ---------------------------------------------------------------- the pinned corpora


@pytest.mark.parametrize("real", REAL, ids=lambda s: s.name)
def test_committed_manifest_pins_the_corpus_commit_with_hashes_only(real):
    m = kbruns.manifest(real)
    paths = [f["path"] for f in m["files"]]
    assert len(set(paths)) == len(paths) and real.license_file in paths
    assert all(set(f) == {"path", "sha256", "size"} and len(f["sha256"]) == 64 for f in m["files"])
    for run in real.runs:
        assert any(run.kernel_key(p) for p in paths), f"{run.folder}: no pinned kernel"
        if run.eval_file:
            assert f"{run.folder}/{run.eval_file}" in paths
    levels = {run.kernel_key(p)[0] for run in real.runs for p in paths if run.kernel_key(p)}
    for level in levels & set(real.levels):
        assert any(p.startswith(f"KernelBench/level{level}/") for p in paths)
    assert kbruns.pins(real, m)[0].url() == f"https://raw.githubusercontent.com/{real.repo}/{real.commit}/{paths[0]}"


@pytest.mark.parametrize("real", REAL, ids=lambda s: s.name)
def test_committed_summary_is_what_the_pinned_copy_gives(real, tmp_path):
    src = REPO / real.default_src
    if not src.is_dir():
        pytest.skip(f"no pinned copy at {src} on this machine")
    out = tmp_path / "corpus.json"
    assert kbruns.main(real, ["summary", "--out", str(out), "--src", str(src), "--cache-dir",
                              str(tmp_path / "cache")]) == 0
    committed = REPO / "results" / "audit" / real.name
    assert out.read_bytes() == (committed / "corpus.json").read_bytes()
    assert (tmp_path / "manifest.jsonl").read_bytes() == (committed / "manifest.jsonl").read_bytes()
    res = kbruns.materialise(real, src, tmp_path / "mat")
    items = discover(tmp_path / "mat" / "run", kernelbench=str(tmp_path / "mat" / "problems"))
    assert len(items) == res["written"] == json.loads(out.read_text())["counts"]["paired"]
    assert not any("extract_error" in i for i in items)
