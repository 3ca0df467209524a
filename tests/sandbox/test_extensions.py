"""The prebuilt-extension path (lethe.sandbox.extensions): a candidate's load_inline builds once, in its own
sandboxed step, and the verification process imports that build without compiling."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import pytest

from lethe.sandbox import extensions as X

# Every test here starts real sandboxed processes (module-scoped builds, zygotes): minutes on 2 cores.
pytestmark = pytest.mark.slow

# A C++-only extension: the same load_inline path as a CUDA candidate's, buildable on the CPU machine.
CPP_CAND = textwrap.dedent('''
    import torch
    import torch.nn as nn
    from torch.utils.cpp_extension import load_inline

    _cpp = """
    #include <torch/extension.h>
    torch::Tensor twice(torch::Tensor x) { return x * 2; }
    """
    _ext = load_inline(name="lethe_test_twice", cpp_sources=_cpp, functions=["twice"], verbose=False)


    class ModelNew(nn.Module):
        def forward(self, x):
            return _ext.twice(x)
''')


def _fake_real(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None, verbose=False,
               build_directory=None, is_python_module=True):
    return {"built": name, "cflags": extra_cflags}


def test_call_key_ignores_verbosity_and_build_directory_but_not_sources_or_flags():
    k1, _ = X.call_key(_fake_real, ("m", "int f();"), {"verbose": True})
    k2, _ = X.call_key(_fake_real, ("m",), {"cpp_sources": "int f();", "build_directory": "/elsewhere"})
    k3, _ = X.call_key(_fake_real, ("m", "int g();"), {})
    k4, _ = X.call_key(_fake_real, ("m", "int f();"), {"extra_cflags": ["-O0"]})
    assert k1 == k2
    assert len({k1, k3, k4}) == 3


def test_store_layout_separates_sources_and_toolchains(tmp_path):
    a = X.ext_root(X.store_root(tmp_path, arch_list="9.0"), "src A")
    b = X.ext_root(X.store_root(tmp_path, arch_list="9.0"), "src B")
    c = X.ext_root(X.store_root(tmp_path, arch_list="10.0a"), "src A")
    assert len({a, b, c}) == 3
    assert a.parent == b.parent != c.parent


def test_marker_refuses_libraries_outside_the_build_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "ok.so").write_bytes(b"")
    m = X.write_marker(root, {"ok": True, "seconds": 1.5, "extensions": [
        {"name": "ok", "key": "k1", "library": str(root / "ok.so")},
        {"name": "evil", "key": "k2", "library": str(tmp_path / "other" / "evil.so")}]})
    assert m["ok"] is False and "outside the build root" in m["error"]
    assert [e["name"] for e in m["extensions"]] == ["ok"]
    assert X.read_marker(root) == m
    (root / X.MARKER).write_text("{not json")
    assert X.read_marker(root) is None


def _run_child(code: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One real build of CPP_CAND in the sandbox (tens of seconds of compiler time), shared by the tests."""
    if shutil.which("c++") is None or shutil.which("ninja") is None:
        pytest.skip("needs c++ and ninja")
    from lethe.sandbox import run_isolated

    store = tmp_path_factory.mktemp("ext-store")
    root, marker, res = X.ensure_built(CPP_CAND, runner=run_isolated, device="cpu", store=store, jobs=2,
                                       timeout_s=600)
    return store, root, marker, res


@pytest.mark.slow
def test_build_once_then_load_without_compiling(built, tmp_path):
    from lethe.sandbox import run_isolated

    store, root, marker, res = built
    assert res is not None and res.status == "ok", (res.status, res.detail, res.stderr_tail[-1500:])
    assert marker["ok"], marker["error"]
    assert [e["name"] for e in marker["extensions"]] == ["lethe_test_twice"]
    assert marker["extensions"][0]["library"].startswith(str(root))
    # Second call: cached, no sandboxed build.
    root2, marker2, res2 = X.ensure_built(CPP_CAND, runner=run_isolated, device="cpu", store=store)
    assert (root2, res2) == (root, None) and marker2 == marker
    # A fresh process in "load" mode imports the build; its private extensions dir stays empty.
    private = tmp_path / "private"
    got = _run_child(textwrap.dedent(f'''
        import json, os
        os.environ["TORCH_EXTENSIONS_DIR"] = {str(private)!r}
        import torch
        from lethe.sandbox import extensions as X
        X.install("load", {str(root)!r})
        ns = {{}}
        exec(compile({CPP_CAND!r}, "cand.py", "exec"), ns)
        y = ns["ModelNew"]()(torch.arange(3.0))
        print(json.dumps({{"y": y.tolist(), "report": X.report(),
                           "private": os.path.isdir({str(private)!r}) and os.listdir({str(private)!r})}}))
    '''))
    assert got["y"] == [0.0, 2.0, 4.0]
    assert got["report"] == {"loaded": 1, "rebuilt": []}
    assert not got["private"]


@pytest.mark.slow
def test_the_sandboxed_candidate_process_imports_the_build(built):
    """The real path: lethe.verifier.worker:run_candidate under the sandbox's isolation (another leased uid than
    the build's, the store read-only) loads the recorded library and compiles nothing."""
    from lethe.sandbox import run_isolated

    _, root, _, _ = built
    payload = {"cand_src": CPP_CAND, "seed": 0, "device": "cpu", "init": [], "param_shapes": {}, "probes": [],
               "ext_root": str(root)}
    res = run_isolated("lethe.verifier.worker:run_candidate", payload=payload, arrays={}, timeout_s=120,
                       read_paths=(str(root),))
    assert res.status == "ok", (res.status, res.detail, res.stderr_tail[-1500:])
    assert res.result["stage"] == "ok", res.result
    assert res.result["extensions"] == {"loaded": 1, "rebuilt": []}


def test_load_mode_falls_back_and_says_so_when_no_build_was_recorded(tmp_path):
    got = _run_child(textwrap.dedent(f'''
        import json
        from torch.utils import cpp_extension
        calls = []
        def fake(name, cpp_sources, functions=None, verbose=False, build_directory=None, is_python_module=True):
            calls.append(name)
            return "built"
        cpp_extension.load_inline = fake
        from lethe.sandbox import extensions as X
        X.install("load", {str(tmp_path)!r})
        from torch.utils.cpp_extension import load_inline
        r = load_inline(name="m", cpp_sources="int f();")
        print(json.dumps({{"r": r, "calls": calls, "report": X.report()}}))
    '''))
    assert got["r"] == "built" and got["calls"] == ["m"]
    assert got["report"]["loaded"] == 0
    assert [r["name"] for r in got["report"]["rebuilt"]] == ["m"]


def test_compile_error_is_recorded_once_and_reported_without_rebuilding(tmp_path):
    from lethe.sandbox import run_isolated

    bad = "from torch.utils.cpp_extension import load_inline\nraise RuntimeError('Error building extension x')\n"
    root, marker, res = X.ensure_built(bad, runner=run_isolated, device="cpu", store=tmp_path, timeout_s=120)
    assert res is not None and marker["ok"] is False and "Error building extension" in marker["error"]
    _, again, res2 = X.ensure_built(bad, runner=run_isolated, device="cpu", store=tmp_path)
    assert res2 is None and again == X.read_marker(root)


@pytest.mark.slow
def test_audit_build_pool_records_each_outcome_and_resumes(built, tmp_path, monkeypatch):
    from lethe.audit import batch

    store, root, marker, _ = built
    monkeypatch.setenv(X.STORE_ENV, str(store))
    bad = "from torch.utils.cpp_extension import load_inline\nraise RuntimeError('Error building extension y')\n"
    items = [{"id": "good", "candidate": CPP_CAND}, {"id": "bad", "candidate": bad},
             {"id": "plain", "candidate": "class ModelNew: pass\n"}]
    work = tmp_path / "work"
    work.mkdir()
    pairs = tmp_path / "pairs"
    for it in items:
        (pairs / it["id"]).mkdir(parents=True)
        (pairs / it["id"] / "ref.py").write_text("class Model: pass\n")
        (pairs / it["id"] / "cand.py").write_text(it["candidate"])
    (work / "spec.json").write_text(json.dumps({"root": str(pairs), "ref": None, "kernelbench": None,
                                                "problem_base": 1}))
    assert batch.build_extensions(batch.discover(pairs), work, workers=2, progress=False) == {"built": 2}
    log = {r["id"]: r for f in work.glob("builds-*.jsonl") for r in map(json.loads, f.read_text().splitlines())}
    assert set(log) == {"good", "bad"}  # a candidate without load_inline needs no build step
    assert log["good"]["ok"] and log["good"]["cached"] and log["good"]["root"] == str(root)
    assert not log["bad"]["ok"] and not log["bad"]["cached"] and "Error building extension" in log["bad"]["error"]
