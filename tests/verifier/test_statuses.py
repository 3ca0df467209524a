"""Row statuses other than "gated", and the reference-first ordering."""

from __future__ import annotations

from lethe.verifier import api
from lethe.verifier import fixtures as K


def test_compile_fail(verify_local):
    r = verify_local(K.SOFTMAX_REF, K.SYNTAX_ERROR)
    assert r["status"] == "compile_fail" and "SyntaxError" in r["error"]
    assert api.verdict(r) == "compile_fail"
    assert all(g["status"] == "na" for g in r["gates"].values())


def test_load_fail(verify_local):
    r = verify_local(K.SOFTMAX_REF, K.LOAD_ERROR)
    assert r["status"] == "load_fail" and "boom in __init__" in r["error"]


def test_cuda_candidate_not_auditable_on_cpu(verify_local):
    r = verify_local(K.SOFTMAX_REF, K.CUDA_INLINE)
    assert r["status"] == "not_auditable"


def test_ref_broken(verify_local):
    r = verify_local(K.BROKEN_REF, K.as_candidate(K.BROKEN_REF))
    assert r["status"] == "ref_broken"


def test_reference_runs_before_candidate(monkeypatch):
    """The reference process is started (and finished) before the candidate process, and the candidate's
    payload carries no reference output."""
    from lethe.verifier.testing import inprocess_runner

    calls = []

    def spy(target, payload=None, arrays=None, **kw):
        calls.append((target, sorted(arrays or {})))
        return inprocess_runner(target, payload, arrays, **kw)

    api._REF_CACHE.clear()
    api.verify(K.SCALE_REF, K.as_candidate(K.SCALE_REF), device="cpu", runner=spy, seed=11)
    assert [c[0].split(":")[1] for c in calls] == ["run_reference", "run_candidate"]
    sent = calls[1][1]
    assert sent and not any("/ref" in k or "/ftz" in k or "/gin" in k or "/gpar" in k for k in sent)


def test_reference_is_cached_per_input_set():
    from lethe.verifier.testing import inprocess_runner

    n = []

    def count(target, *a, **kw):
        n.append(target)
        return inprocess_runner(target, *a, **kw)

    api._REF_CACHE.clear()
    for _ in range(2):
        api.verify(K.SCALE_REF, K.as_candidate(K.SCALE_REF), device="cpu", runner=count, seed=12)
    assert n.count("lethe.verifier.reference:run_reference") == 1
