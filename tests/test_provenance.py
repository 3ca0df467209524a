from lethe import provenance


def test_collect_has_every_required_key():
    record = provenance.collect(command="pytest")
    assert provenance.validate(record) == []
    assert record["gpu"] == "cpu" or record["capability"].startswith("sm_")


def test_sha_can_be_supplied_for_copies_without_history(monkeypatch):
    monkeypatch.setenv("LETHE_GIT_SHA", "abc123")
    assert provenance.git_sha() == "abc123"


def test_write_round_trips(tmp_path):
    import json

    path = tmp_path / "p" / "provenance.json"
    provenance.write(path, command="x", experiment="demo")
    data = json.loads(path.read_text())
    assert data["experiment"] == "demo" and data["command"] == "x"
    assert provenance.validate({"schema": provenance.SCHEMA}) != []


def test_regenerated_outputs_do_not_mark_a_run_dirty(tmp_path, monkeypatch):
    import subprocess

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    (tmp_path / "src").mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "src" / "code.py").write_text("x = 1\n")
    (tmp_path / "results" / "rows.json").write_text("{}\n")
    git("init", "-q")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.delenv("LETHE_GIT_SHA", raising=False)
    monkeypatch.setattr(provenance, "REPO_ROOT", tmp_path)
    clean = provenance.git_sha()
    assert len(clean) == 40
    (tmp_path / "results" / "rows.json").write_text('{"rerun": true}\n')
    assert provenance.git_sha() == clean
    (tmp_path / "src" / "code.py").write_text("x = 2\n")
    assert provenance.git_sha() == clean + "-dirty"
