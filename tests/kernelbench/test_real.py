"""The KernelBench real-check runner (lethe.kernelbench.real) against a FAKE KernelBench checkout.

The fake checkout is written by the tests: its ``src/eval.py`` has KernelBench's signature and passes, fails,
sleeps, crashes, raises, asks for a retry, reports a CUDA error, patches torch or "builds" an extension according
to markers in the candidate, and logs every call (pid, arguments) so the tests see which worker judged what and
with which settings. Its ``src/utils.py`` imports the four generation-only modules at module level, as
KernelBench's does, so the stand-ins are exercised. The real KernelBench run is GPU-only (marked ``gpu``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lethe.kernelbench import real

ROOT = Path(__file__).resolve().parents[2]

FAKE_UTILS = """
from together import Together
from openai import OpenAI
import google.generativeai as genai
import anthropic
"""

FAKE_EVAL = r'''
import json, os, signal, sys, time
from . import utils


class KernelExecResult:
    def __init__(self, compiled=False, correctness=False, metadata=None):
        self.compiled, self.correctness, self.metadata = compiled, correctness, dict(metadata or {})


def _log(**kw):
    with open(os.environ["FAKE_KB_LOG"], "a") as fh:
        fh.write(json.dumps(kw) + "\n")


def eval_kernel_against_ref(original_model_src, custom_model_src, seed_num=42, num_correct_trials=1,
                            num_perf_trials=10, verbose=False, measure_performance=False, build_dir=None,
                            device=None):
    c = custom_model_src
    tag = c.split("TAG=")[1].split()[0] if "TAG=" in c else "?"
    _log(pid=os.getpid(), tag=tag, seed=seed_num, trials=num_correct_trials, perf=measure_performance,
         build_dir=build_dir, device=str(device), env_leak=os.environ.get("FAKE_LEAK"))
    os.environ["FAKE_LEAK"] = tag
    if "#SLEEP" in c:
        time.sleep(600)
    if "#CRASH" in c:
        os.kill(os.getpid(), signal.SIGSEGV)
    if "#RAISE" in c:
        raise TypeError("'NoneType' object is not callable")
    if "#RETRY" in c:
        return None
    if "#CUDAERR" in c:
        return KernelExecResult(True, False, {"runtime_error": RuntimeError(
            "CUDA error: an illegal memory access was encountered")})
    if "#PATCH" in c:
        import torch
        torch.allclose = lambda *a, **k: True
    if "#BUILD" in c:
        so = os.path.join(build_dir, "ext", "ext.so")
        if not os.path.exists(so):
            os.makedirs(os.path.dirname(so), exist_ok=True)
            with open(so, "w") as fh:
                fh.write("built")
    if "#FAIL" in c:
        return KernelExecResult(True, False, {"correctness_issue": "Output mismatch",
                                              "max_difference": ["0.5"] * num_correct_trials,
                                              "avg_difference": ["0.1"] * num_correct_trials,
                                              "correctness_trials": f"(0 / {num_correct_trials})"})
    return KernelExecResult(True, True, {"hardware": "fake", "device": str(device),
                                         "correctness_trials": f"({num_correct_trials} / {num_correct_trials})"})
'''

REF = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x

batch_size = 4

def get_inputs():
    return [torch.randn(batch_size, 8)]

def get_init_inputs():
    return []
"""


def cand(tag: str, *markers: str, extra: str = "") -> str:
    return f"# TAG={tag} {' '.join(markers)}\nimport torch\n{extra}\nclass ModelNew(torch.nn.Module):\n    pass\n"


@pytest.fixture()
def fake(tmp_path, monkeypatch):
    kb = tmp_path / "kb"
    (kb / "src").mkdir(parents=True)
    (kb / "src" / "__init__.py").write_text("")
    (kb / "src" / "utils.py").write_text(FAKE_UTILS)
    (kb / "src" / "eval.py").write_text(FAKE_EVAL)
    (kb / "COMMIT").write_text("0123456789abcdef0123456789abcdef01234567\n")
    (kb / "KernelBench" / "level1").mkdir(parents=True)
    for p in range(1, 9):
        (kb / "KernelBench" / "level1" / f"{p}_Problem{p}.py").write_text(REF)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("FAKE_KB_LOG", str(log))
    monkeypatch.delenv("FAKE_LEAK", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    return {"kb": kb, "log": log, "tmp": tmp_path}


def make_run(tmp: Path, cands: dict[int, str], name: str = "run") -> Path:
    d = tmp / name
    d.mkdir()
    for p, src in cands.items():
        (d / f"level_1_problem_{p}_sample_0_kernel.py").write_text(src)
    return d


def calls(log: Path) -> list[dict]:
    return [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []


def rows_of(out: Path) -> dict[str, dict]:
    return {r["id"]: r for r in real.read_rows(out)}


def judge(fake, run_dir, out, **kw):
    kw.setdefault("device", "cpu")
    kw.setdefault("progress", False)
    return real.run(run_dir, out, impl=kw.pop("impl", "real"), checkout=fake["kb"], **kw)


def rid(p: int) -> str:
    return f"level_1_problem_{p}_sample_0"


# ------------------------------------------------------------------------------------------ pool behaviour


def test_rows_schema_settings_and_outcomes(fake):
    """Every row has the shared schema; the eval gets the benchmark settings; each outcome is classified."""
    run_dir = make_run(fake["tmp"], {1: cand("a"), 2: cand("b", "#FAIL"), 3: cand("c", "#RETRY"),
                                     4: cand("d", "#RAISE")})
    out = fake["tmp"] / "out"
    s = judge(fake, run_dir, out)
    rows = rows_of(out)
    assert list(rows) == [rid(p) for p in (1, 2, 3, 4)]
    for r in rows.values():
        assert set(r) == set(real.ROW_FIELDS)
        assert r["impl"] == "real" and r["n_trials"] == 5 and r["tolerance"] == 1e-2
    assert [rows[rid(p)]["outcome"] for p in (1, 2, 3, 4)] == ["correct", "output_mismatch", "dropped_retry",
                                                               "other_error"]
    assert rows[rid(1)]["correct"] is True and rows[rid(2)]["correct"] is False
    assert rows[rid(3)]["correct"] is None and rows[rid(3)]["dropped"] is True
    # the driver's outer catch: an escaped exception is "not compiled" with the driver's text
    assert rows[rid(4)]["compiled"] is False and rows[rid(4)]["detail"].startswith("error: ")
    assert rows[rid(2)]["max_difference"] == 0.5 and rows[rid(2)]["trials_passed"] == 0
    cs = calls(fake["log"])
    assert {c["seed"] for c in cs} == {42} and {c["trials"] for c in cs} == {5} and {c["perf"] for c in cs} == {False}
    # one build directory per sample, as eval_from_generations gives each sample its own cache folder
    assert {c["tag"]: Path(c["build_dir"]) for c in cs} == {t: out / "work" / "build" / rid(p)
                                                           for p, t in enumerate("abcd", start=1)}
    # the environment a kernel left behind is not seen by the next one in the same worker
    assert all(c["env_leak"] is None for c in cs)
    assert len({c["pid"] for c in cs}) == 1
    assert s["outcomes"] == {"correct": 1, "dropped_retry": 1, "other_error": 1, "output_mismatch": 1}
    timing = [json.loads(x) for x in (out / "timing.jsonl").read_text().splitlines()]
    assert [t["id"] for t in timing] == list(rows) and all(t["wall_s"] >= 0 for t in timing)


def test_rows_are_bit_identical_on_a_second_run(fake):
    """Same kernels, seed and environment: rows.jsonl has the same bytes (timing lives in its own file)."""
    run_dir = make_run(fake["tmp"], {1: cand("a"), 2: cand("b", "#FAIL")})
    judge(fake, run_dir, fake["tmp"] / "o1")
    judge(fake, run_dir, fake["tmp"] / "o2", build_dir_map=None)
    a = (fake["tmp"] / "o1" / "rows.jsonl").read_bytes()
    b = (fake["tmp"] / "o2" / "rows.jsonl").read_bytes().replace(b"/o2/", b"/o1/")
    assert a == b


def test_provenance_lists_stand_ins_and_kernelbench_hashes(fake):
    run_dir = make_run(fake["tmp"], {1: cand("a")})
    out = fake["tmp"] / "out"
    judge(fake, run_dir, out)
    prov = json.loads((out / "provenance.json").read_text())
    kbp = prov["kernelbench"]
    assert kbp["commit"] == "0123456789abcdef0123456789abcdef01234567"
    assert kbp["file_sha256"]["src/eval.py"] == hashlib.sha256((fake["kb"] / "src" / "eval.py").read_bytes()).hexdigest()

    def importable(name):
        try:
            return importlib.util.find_spec(name) is not None
        except ImportError:
            return False

    listed = set(prov["stand_ins"])
    missing = {n for n in real.STAND_IN_NAMES if not importable(n)}
    assert missing <= listed
    assert all(any(n == s or s.startswith(n + ".") for s in real.STAND_IN_NAMES) for n in listed)
    for key in ("torch", "gpu", "driver", "cuda_runtime", "python"):
        assert key in prov["workers"]
    assert prov["kernelbench_real"]["num_correct_trials"] == 5 and prov["kernelbench_real"]["seed"] == 42


@pytest.mark.slow
def test_timeout_kills_and_replaces_the_worker(fake):
    run_dir = make_run(fake["tmp"], {1: cand("s", "#SLEEP"), 2: cand("a")})
    out = fake["tmp"] / "out"
    judge(fake, run_dir, out, timeout_s=4.0)
    rows = rows_of(out)
    assert rows[rid(1)]["outcome"] == "timeout" and rows[rid(1)]["correct"] is None
    assert rows[rid(1)]["worker_event"] == "timeout"
    assert rows[rid(2)]["outcome"] == "correct"
    pids = {c["tag"]: c["pid"] for c in calls(fake["log"])}
    assert pids["s"] != pids["a"]


def test_crashed_worker_is_replaced_and_its_kernel_recorded(fake):
    run_dir = make_run(fake["tmp"], {1: cand("x", "#CRASH"), 2: cand("a")})
    out = fake["tmp"] / "out"
    judge(fake, run_dir, out)
    rows = rows_of(out)
    assert rows[rid(1)]["worker_event"] == "died" and rows[rid(1)]["outcome"] == "other_error"
    assert rows[rid(1)]["compiled"] is False and rows[rid(1)]["correct"] is False
    assert rows[rid(2)]["outcome"] == "correct"
    pids = {c["tag"]: c["pid"] for c in calls(fake["log"])}
    assert pids["x"] != pids["a"]


@pytest.mark.slow
def test_worker_retires_after_a_cuda_error_or_a_patched_torch_only(fake):
    """Replacement is conditional: healthy kernels share a worker; a CUDA error or a torch patch ends it."""
    run_dir = make_run(fake["tmp"], {1: cand("a"), 2: cand("b"), 3: cand("e", "#CUDAERR"), 4: cand("c"),
                                     5: cand("p", "#PATCH"), 6: cand("d")})
    out = fake["tmp"] / "out"
    judge(fake, run_dir, out)
    pids = {c["tag"]: c["pid"] for c in calls(fake["log"])}
    assert pids["a"] == pids["b"] == pids["e"]
    assert pids["c"] != pids["e"] and pids["c"] == pids["p"]
    assert pids["d"] != pids["p"]
    assert rows_of(out)[rid(3)]["outcome"] == "runtime_error"


def test_kernels_per_worker_recycles(fake):
    run_dir = make_run(fake["tmp"], {1: cand("a"), 2: cand("b"), 3: cand("c")})
    judge(fake, run_dir, fake["tmp"] / "out", kernels_per_worker=2)
    pids = {c["tag"]: c["pid"] for c in calls(fake["log"])}
    assert pids["a"] == pids["b"] != pids["c"]


@pytest.mark.slow
def test_build_dir_map_and_build_detection(fake):
    """A mapped kernel is judged in its prebuilt directory (no build); an unmapped one builds in its own."""
    pre = fake["tmp"] / "prebuilt" / "k1"
    (pre / "ext").mkdir(parents=True)
    (pre / "ext" / "ext.so").write_text("prebuilt")
    (pre / "ext" / "lock").write_text("")  # left by a killed build: must not block
    mp = fake["tmp"] / "map.json"
    mp.write_text(json.dumps({rid(1): "prebuilt/k1"}))
    run_dir = make_run(fake["tmp"], {1: cand("a", "#BUILD"), 2: cand("b", "#BUILD"), 3: cand("c")})
    out = fake["tmp"] / "out"
    s = judge(fake, run_dir, out, build_dir_map=mp)
    bd = {c["tag"]: c["build_dir"] for c in calls(fake["log"])}
    assert Path(bd["a"]) == pre.resolve()
    assert Path(bd["b"]) == out / "work" / "build" / rid(2)
    timing = {t["id"]: t for t in map(json.loads, (out / "timing.jsonl").read_text().splitlines())}
    assert timing[rid(1)]["built"] is False and timing[rid(2)]["built"] is True and timing[rid(3)]["built"] is None
    assert (pre / "ext" / "ext.so").read_text() == "prebuilt"
    assert not (pre / "ext" / "lock").exists()
    assert s["builds"] == 1 and s["prebuilt_reused"] == 1
    # a second implementation's run given the same build root finds every extension built
    out2 = fake["tmp"] / "out2"
    judge(fake, run_dir, out2, build_dir_map=mp, build_root=out / "work" / "build")
    timing2 = {t["id"]: t for t in map(json.loads, (out2 / "timing.jsonl").read_text().splitlines())}
    assert timing2[rid(2)]["built"] is False


@pytest.mark.slow
def test_resume_after_kill_9(fake):
    """SIGKILL the command mid-run: workers die with it; the rerun judges only what has no row; none lost."""
    n = 6
    run_dir = make_run(fake["tmp"], {p: cand(f"k{p}", "#FAIL") for p in range(1, n + 1)})
    slow = fake["kb"] / "src" / "eval.py"  # one second a kernel, so the kill lands mid-run
    slow.write_text(slow.read_text().replace("    c = custom_model_src\n", "    c = custom_model_src\n    time.sleep(1.0)\n"))
    out = fake["tmp"] / "out"
    cmd = [sys.executable, "-m", "lethe.kernelbench.real", "judge", str(run_dir), "--out", str(out), "--checkout",
           str(fake["kb"]), "--device", "cpu", "--quiet"]
    proc = subprocess.Popen(cmd, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ckpt = out / "work" / "checkpoint.jsonl"
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120:
        if ckpt.exists() and len(ckpt.read_text().splitlines()) >= 2:
            break
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with open(ckpt, "a") as fh:
        fh.write('{"row": {"id": "torn')  # a write cut by the kill
    before = {json.loads(x)["row"]["id"] for x in ckpt.read_text().splitlines()[:-1]}
    assert 2 <= len(before) < n
    pids_first = {c["pid"] for c in calls(fake["log"])}
    time.sleep(1.0)
    for pid in pids_first:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    n_calls_first = len(calls(fake["log"]))
    subprocess.run(cmd, env=dict(os.environ), check=True, capture_output=True, timeout=300)
    second = calls(fake["log"])[n_calls_first:]
    assert not {f"level_1_problem_{c['tag'][1:]}_sample_0" for c in second} & before
    rows = real.read_rows(out)
    assert sorted(r["id"] for r in rows) == sorted(rid(p) for p in range(1, n + 1))
    entries = real.read_jsonl(ckpt)
    assert len(entries) == n and len({e["row"]["id"] for e in entries}) == n


@pytest.mark.slow
def test_stop_after_leaves_the_rest_for_a_later_call(fake):
    """Past the stop time no kernel starts (a worker takes longer than this to start); the next call resumes."""
    run_dir = make_run(fake["tmp"], {p: cand(f"k{p}") for p in range(1, 7)})
    out = fake["tmp"] / "out"
    s = judge(fake, run_dir, out, stop_after_s=0.01)
    assert s["rows"] == 0 and s["missing"] == 6 and calls(fake["log"]) == []
    s = judge(fake, run_dir, out)
    assert s["rows"] == 6 and s["missing"] == 0
    assert len(calls(fake["log"])) == 6


def test_setup_error_is_reported(fake):
    (fake["kb"] / "src" / "eval.py").write_text("raise ImportError('No module named pydantic')\n")
    run_dir = make_run(fake["tmp"], {1: cand("a")})
    with pytest.raises(real.SetupError, match="pydantic"):
        judge(fake, run_dir, fake["tmp"] / "out")


@pytest.mark.slow
def test_replica_impls_share_the_schema(fake, tmp_path):
    """The replica runs through the same pool; on the zeros-softmax hole paper-era accepts and hardened rejects."""
    from lethe.kernelbench.problems import CORRECT_SOFTMAX_CAND, SOFTMAX_REF, ZEROS_CAND

    probs = tmp_path / "probs" / "level1"
    probs.mkdir(parents=True)
    (probs / "23_Softmax.py").write_text(SOFTMAX_REF)
    run_dir = tmp_path / "sm"
    run_dir.mkdir()
    (run_dir / "level_1_problem_23_sample_0_kernel.py").write_text(CORRECT_SOFTMAX_CAND)
    (run_dir / "level_1_problem_23_sample_1_kernel.py").write_text(ZEROS_CAND)
    got = {}
    for impl in ("replica-paper", "replica-hardened"):
        out = tmp_path / impl
        real.run(run_dir, out, impl=impl, problems=tmp_path / "probs", device="cpu", progress=False)
        got[impl] = rows_of(out)
        for r in got[impl].values():
            assert set(r) == set(real.ROW_FIELDS) and r["impl"] == impl
    assert got["replica-paper"]["level_1_problem_23_sample_1"]["correct"] is True
    assert got["replica-hardened"]["level_1_problem_23_sample_1"]["correct"] is False
    assert got["replica-hardened"]["level_1_problem_23_sample_0"]["correct"] is True
    res = real.agree(got["replica-paper"].values(), got["replica-hardened"].values())
    assert res["n_disagreements"] == 1 and res["classes"]["tolerance_policy"] == 1


def test_missing_problem_file_is_recorded_not_run(fake):
    run_dir = make_run(fake["tmp"], {1: cand("a"), 9: cand("z")})
    out = fake["tmp"] / "out"
    judge(fake, run_dir, out)
    r = rows_of(out)[rid(9)]
    assert r["outcome"] == "not_run" and r["correct"] is None and "no KernelBench problem file" in r["detail"]


# ------------------------------------------------------------------------------------------ pure helpers


def test_stand_ins_only_for_missing_modules(monkeypatch):
    monkeypatch.setattr(sys, "modules", dict(sys.modules))
    got = real.install_stand_ins(["lethe_absent_pkg_q.sub", "json"])
    assert got == ["lethe_absent_pkg_q", "lethe_absent_pkg_q.sub"]
    import lethe_absent_pkg_q.sub as m  # noqa: F401 - resolved from sys.modules

    with pytest.raises(RuntimeError, match="stand-in"):
        m.Client()
    assert sys.modules["json"].__name__ == "json" and not isinstance(sys.modules["json"], real._StandIn)


def test_rebound_reference_names():
    ref = "import torch\nN = 4\nbatch_size = 2\ndef get_inputs():\n    return []\nclass Model: pass\n"
    assert real.rebound_reference_names(ref, "import torch\nN = 8\nclass ModelNew: pass\n") == ["N"]
    assert real.rebound_reference_names(ref, "import torch\nclass ModelNew: pass\n") == []
    assert real.rebound_reference_names(ref, "def broken(:\n") == []


def test_read_jsonl_cuts_a_torn_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"row": {"id": "a"}}\n{"row": {"id": "b"}}\n{"row": {"id"')
    assert [e["row"]["id"] for e in real.read_jsonl(p)] == ["a", "b"]
    assert p.read_text().endswith("}\n")


def test_trim_metadata_stringifies_and_cuts():
    md = real.trim_metadata({"runtime_error": RuntimeError("x" * 1000), "max_difference": [0.5, 1.0]}, n=50)
    assert len(md["runtime_error"]) == 50 and md["runtime_error"].endswith("...")
    assert md["max_difference"] == ["0.5", "1.0"]


# ------------------------------------------------------------------------------------------ classifier


def row(impl="real", **kw):
    base = {"id": "k", "impl": impl, "tolerance": real.IMPL_TOL[impl], "outcome": "correct", "compiled": True,
            "correct": True, "trials_passed": 5, "n_trials": 5, "max_difference": None, "cand_rebinds": []}
    base.update(kw)
    return base


FAIL = {"outcome": "output_mismatch", "correct": False}


@pytest.mark.parametrize("t,o,expected", [
    (row(outcome="timeout", correct=None), row("replica-paper"), "timeout_or_retry_dropped"),
    (row(), row("replica-paper", outcome="dropped_retry", correct=None), "timeout_or_retry_dropped"),
    (row(outcome="compilation_error", compiled=False, correct=False), row("replica-paper"), "compile_env"),
    (row(), row("replica-paper", outcome="other_error", compiled=False, correct=False), "compile_env"),
    (row(cand_rebinds=["batch_size"]), row("replica-paper", cand_rebinds=["batch_size"], **FAIL,
                                           max_difference=3.0, trials_passed=0), "shared_namespace"),
    (row(), row("replica-hardened", **FAIL, max_difference=5e-3, trials_passed=0), "tolerance_policy"),
    (row(), row("replica-paper", **FAIL, max_difference=2e-2, trials_passed=0), "tolerance_edge"),
    (row(**FAIL, max_difference=0.9, trials_passed=3), row("replica-paper"), "nondeterministic_candidate"),
    (row(outcome="runtime_error", correct=False, trials_passed=None), row("replica-paper"), "runtime_divergence"),
    (row(**FAIL, max_difference=0.9, trials_passed=0), row("replica-paper"), "unexplained"),
])
def test_classifier_rules(t, o, expected):
    cls, why = real.classify_disagreement(t, o)
    assert cls == expected and why
    assert cls in real.DISAGREEMENT_CLASSES


def test_classifier_uses_repeat_runs_first():
    """A kernel whose own check changes its verdict on a repeat is nondeterministic, not a tolerance case."""
    t = row(**FAIL, max_difference=2e-2, trials_passed=0)
    o = row("replica-paper")
    assert real.classify_disagreement(t, o)[0] == "tolerance_edge"
    rep = {"k": row(correct=True)}
    assert real.classify_disagreement(t, o, [rep])[0] == "nondeterministic_candidate"
    other_impl_rep = {"k": row("replica-paper", correct=True)}
    assert real.classify_disagreement(t, o, [other_impl_rep])[0] == "tolerance_edge"


def test_agree_lists_every_disagreement_including_one_sided_drops():
    theirs = [row(id="1"), row(id="2", **FAIL, max_difference=0.011, trials_passed=0), row(id="3"),
              row(id="4", outcome="timeout", correct=None), row(id="5", outcome="timeout", correct=None)]
    ours = [row("replica-paper", id=str(i)) for i in range(1, 6)]
    res = real.agree(theirs, ours)
    assert res["joined_rows"] == 3 and res["n_disagreements"] == 1
    assert [(d["id"], d["class"]) for d in res["disagreements"]] == [("2", "tolerance_edge"),
                                                                     ("4", "timeout_or_retry_dropped"),
                                                                     ("5", "timeout_or_retry_dropped")]
    assert sum(res["classes"].values()) == len(res["disagreements"]) == 3
    both_dropped = real.agree([row(id="9", outcome="timeout", correct=None)],
                              [row("replica-paper", id="9", outcome="timeout", correct=None)])
    assert both_dropped["disagreements"] == []


# ------------------------------------------------------------------------------------------ GPU


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="needs a CUDA GPU")
def test_real_kernelbench_on_gpu(tmp_path):
    """The pinned KernelBench copy on a real GPU: a correct and a zeros softmax (both pass paper-era)."""
    kb = ROOT.parent / "shared" / "third_party" / "kernelbench-48642c5c"
    if not (kb / "src" / "eval.py").is_file():
        pytest.skip("no pinned KernelBench copy at ../shared/third_party/kernelbench-48642c5c")
    from lethe.kernelbench.problems import CORRECT_SOFTMAX_CAND, ZEROS_CAND

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "level_1_problem_23_sample_0_kernel.py").write_text(CORRECT_SOFTMAX_CAND)
    (run_dir / "level_1_problem_23_sample_1_kernel.py").write_text(ZEROS_CAND)
    extra = [p for p in os.environ.get("LETHE_KB_EXTRA_PATH", "").split(os.pathsep) if p]
    real.run(run_dir, tmp_path / "out", impl="real", checkout=kb, device="cuda", extra_paths=extra,
             progress=False)
    rows = rows_of(tmp_path / "out")
    assert rows["level_1_problem_23_sample_0"]["outcome"] == "correct"
    assert rows["level_1_problem_23_sample_0"]["metadata"]["hardware"] != "cpu"


def test_edge_definition_states_the_factor():
    assert f"{real.EDGE_FACTOR:g} x atol" in real.DISAGREEMENT_CLASSES["tolerance_edge"]


def test_extension_versions_are_reset_between_kernels():
    """Without the reset, a second load_inline of the same name in one worker is renamed <name>_v1."""
    from torch.utils import cpp_extension

    cpp_extension.JIT_EXTENSION_VERSIONER.entries["lethe_probe_ext"] = "x"
    real._reset_extension_versions()
    assert "lethe_probe_ext" not in cpp_extension.JIT_EXTENSION_VERSIONER.entries


def test_agreement_table_renders_counts_in_rule_order(tmp_path):
    from lethe.kernelbench import tables

    theirs = [row(id="1"), row(id="2", **FAIL, max_difference=0.011, trials_passed=0),
              row(id="3", outcome="compilation_error", compiled=False, correct=False)]
    ours = [row("replica-paper", id=str(i)) for i in range(1, 4)]
    path = tmp_path / "agreement.json"
    path.write_text(json.dumps(real.agree(theirs, ours), sort_keys=True))
    out = tables.render_real_agreement(path, "toy", tmp_path)
    md = (tmp_path / "kernelbench_real_toy_replica-paper.md").read_text()
    assert "| 1 | 0 | 2 | 0 | 3 | 33.33% |" in md  # KB fails kernels 2 and 3, the replica passes them
    classes = (tmp_path / "kernelbench_real_toy_replica-paper_classes.md").read_text()
    lines = [x for x in classes.splitlines() if x.startswith("| ") and not x.startswith("| disagreement")]
    assert [x.split("|")[1].strip() for x in lines] == [*real.DISAGREEMENT_CLASSES, "all disagreements"]
    assert "| compile_env | 1 |" in classes and "| tolerance_edge | 1 |" in classes
    assert "| all disagreements | 2 |" in classes
    assert all(p.exists() for p in out)


def test_relative_paths_work_from_another_directory(fake, monkeypatch):
    """The workers judge from their own working directories: a relative --checkout / run folder must still be
    found (it once failed every kernel with 'checkout is not a directory')."""
    run_dir = make_run(fake["tmp"], {1: cand("a")})
    monkeypatch.chdir(fake["tmp"])
    s = real.run(os.path.relpath(run_dir), "out", impl="real", checkout="kb", device="cpu", progress=False)
    rows = rows_of(fake["tmp"] / "out")
    assert list(rows) == [rid(1)] and rows[rid(1)]["correct"] is True, s
