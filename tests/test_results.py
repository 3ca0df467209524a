"""lethe.results: folding run folders into one current result, its provenance and its history, and reading them
back; the committed current results are in this format and every history line of a superseded run names a
commit whose tree still holds its files."""

import json
import subprocess
from pathlib import Path

import pytest

from lethe import results

ROOT = Path(__file__).resolve().parents[1]


def _run(folder: Path, sha: str, t: str, value: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "r.json").write_text(json.dumps({"value": value}))
    (folder / "provenance.json").write_text(json.dumps({"git_sha": sha, "utc_time": t, "command": f"run {value}"}))
    (folder / "run.log").write_text("log\n")
    return folder


def test_fold_keeps_current_runs_and_indexes_the_rest(tmp_path):
    """The current result holds the current runs oldest first, provenance.json is the newest one's, and every
    superseded run is a history line listing its files and the commit that holds them."""
    a = _run(tmp_path / "in" / "a", "aaa", "2026-01-01T00:00:00", 1)
    b = _run(tmp_path / "in" / "b", "bbb", "2026-01-02T00:00:00", 2)
    c = _run(tmp_path / "in" / "c", "ccc", "2026-01-03T00:00:00", 3)
    out = tmp_path / "exp"
    results.fold(out, "r.json", "exp", [("b", b), ("c", c)], [("a", a)], commit="HEAD1", repo_root=tmp_path)
    assert [(n, d["value"], p["git_sha"]) for n, d, p in results.load_runs(out / "r.json")] == [
        ("b", 2, "bbb"), ("c", 3, "ccc")]
    assert json.loads((out / "provenance.json").read_text())["git_sha"] == "ccc"
    hist = results.load_history(out)
    assert [(h["run"], h["status"]) for h in hist] == [("a", "superseded"), ("b", "current"), ("c", "current")]
    assert hist[0]["in_commit"] == "HEAD1" and hist[0]["files"] == [
        "in/a/provenance.json", "in/a/r.json", "in/a/run.log"]
    # a later run: the kept one stays (no folder needed), the dropped one is recoverable from the current file
    d = _run(tmp_path / "in" / "d", "ddd", "2026-01-04T00:00:00", 4)
    results.fold(out, "r.json", "exp", [("c", None), ("d", d)], commit="HEAD2", repo_root=tmp_path)
    assert [n for n, _, _ in results.load_runs(out / "r.json")] == ["c", "d"]
    hist = {h["run"]: h for h in results.load_history(out)}
    assert set(hist) == {"a", "b", "c", "d"} and hist["a"]["in_commit"] == "HEAD1"
    assert hist["b"]["status"] == "superseded" and hist["b"]["files"] == ["exp/r.json"]
    assert hist["b"]["in_commit"] == "HEAD2" and hist["d"]["status"] == "current"
    with pytest.raises(ValueError, match="not in the current result"):
        results.fold(out, "r.json", "exp", [("zz", None)], repo_root=tmp_path)


def test_load_runs_refuses_a_plain_result(tmp_path):
    """A run's own result file is not a current result: reading it as one fails instead of misreading it."""
    (tmp_path / "r.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="not a current-result file"):
        results.load_runs(tmp_path / "r.json")


@pytest.mark.parametrize("rel", ["results/native/profile/profile.json", "results/gdn/scalar_gate/scalar_gate_bench.json"])
def test_committed_current_results_and_their_history(rel):
    """Each committed current result lists its runs in the history as current and its provenance.json is the
    newest run's."""
    path = ROOT / rel
    runs = results.load_runs(path)
    hist = results.load_history(path.parent)
    assert json.loads((path.parent / "provenance.json").read_text()) == runs[-1][2]
    assert {h["run"] for h in hist if h["status"] == "current"} == {n for n, _, _ in runs}


@pytest.mark.parametrize("folder", ["results/native/profile", "results/native", "results/gdn/scalar_gate",
                                    "results/gdn/fla_compare", "results/gdn"])
def test_every_run_not_current_is_recoverable_from_git(folder):
    """Every history line of a run no longer in the tree names files that exist in the commit it names, and no
    current line names a file that is gone."""
    hist = results.load_history(ROOT / folder)
    assert hist
    for h in hist:
        if h["status"] == "current":
            assert "files" not in h
            continue
        assert h["files"] and h["in_commit"], h["run"]
        assert not any((ROOT / f).exists() for f in h["files"]), h["run"]
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", h["in_commit"], "--",
                                 *h["files"]], capture_output=True, text=True)
        if listed.returncode != 0:
            pytest.skip("git history not available (a source archive)")
        assert sorted(listed.stdout.split()) == sorted(h["files"]), h["run"]
