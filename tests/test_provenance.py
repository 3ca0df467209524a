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


def test_library_versions_read_without_import_equal_the_modules_own():
    """library_versions reads a library that is not imported from its distribution's metadata; a row's
    environment must say the same either way, so the two sources must agree for every installed library."""
    import importlib
    import sys

    lazily = provenance.library_versions()
    for name in provenance.LIBRARIES:
        try:
            module = sys.modules.get(name) or importlib.import_module(name)
        except ImportError:
            assert lazily[name] is None
            continue
        assert lazily[name] == getattr(module, "__version__", None), name
    assert provenance.library_versions() == lazily  # after the imports: the modules' own strings


def test_gpu_info_without_driver_starts_no_process(monkeypatch):
    import subprocess

    def refuse(*a, **k):
        raise AssertionError("nvidia-smi started although the driver was not asked for")

    monkeypatch.setattr(subprocess, "run", refuse)
    info = provenance.gpu_info(driver=False)
    assert info["driver"] is None and "gpu" in info
