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
