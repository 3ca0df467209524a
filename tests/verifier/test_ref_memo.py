"""Reference-only grading values (tolerances, floors) kept with a cached reference (api._REF_MEMO,
gates.Bundle.ref_memo): later candidates of that reference get exactly the rows they would get without them,
and grading never writes into what is kept."""

from __future__ import annotations

import numpy as np
import pytest

from lethe.verifier import api, records
from lethe.verifier import fixtures as F
from lethe.verifier import gates as G
from lethe.verifier.testing import inprocess_runner

PROFILES = ("strict", "cuda-default", "fast-math")
# A wrong backward (CMP-02's gradient bounds), an accumulator too narrow (PRC-02's bracketed rows, ORD-03's cancel
# and offset rows), flush-to-zero (the alternative reference), a conforming kernel.
PAIRS = [(F.LINEAR_REF, F.LINEAR_BAD_BACKWARD), (F.SUM_REF, F.SUM_HALF_ACC), (F.SCALE_REF, F.SCALE_FTZ),
         (F.SOFTMAX_REF, F.as_candidate(F.SOFTMAX_REF))]


def _view(rows):
    out = []
    for r in rows:
        v = records.deterministic_view(r)
        v.pop("environment")
        out.append(v)
    return out


@pytest.fixture()
def fresh(monkeypatch):
    monkeypatch.setattr(api, "_REF_MEMO", {})
    monkeypatch.setattr(api, "_REF_CACHE", {})
    monkeypatch.setattr(api, "_MERGED", {})


@pytest.mark.parametrize("ref,cand", PAIRS)
def test_kept_tolerances_give_the_rows_of_a_fresh_grading(ref, cand, fresh, monkeypatch):
    first = verify(ref, cand)
    memo = next(iter(api._REF_MEMO.values()))[2]
    assert any(k[0] == "tol" for k in memo)  # the first candidate left its bounds with the reference
    kept = {k: v.copy() for k, v in memo.items() if isinstance(v, np.ndarray)}
    calls = []
    value_tol = G.tol.value_tol
    monkeypatch.setattr(G.tol, "value_tol", lambda *a, **k: calls.append(1) or value_tol(*a, **k))
    again = verify(ref, cand)  # the same reference objects: every bound from the memo
    assert not calls
    monkeypatch.setattr(G.tol, "value_tol", value_tol)
    assert _view(again) == _view(first)
    for k, v in kept.items():
        assert np.array_equal(memo[k], v, equal_nan=True), k  # nothing graded into a kept array
    monkeypatch.setattr(api, "_REF_MEMO", {})
    assert _view(verify(ref, cand)) == _view(first)  # and a grading without them agrees


def test_another_candidate_of_the_same_reference_is_graded_as_alone(fresh, monkeypatch):
    verify(F.SOFTMAX_REF, F.SOFTMAX_NAN_TO_NUM)
    after = verify(F.SOFTMAX_REF, F.SOFTMAX_FIXED_BLOCKS)
    monkeypatch.setattr(api, "_REF_MEMO", {})
    alone = verify(F.SOFTMAX_REF, F.SOFTMAX_FIXED_BLOCKS)
    assert _view(after) == _view(alone)


def test_memo_is_bounded(fresh, monkeypatch):
    monkeypatch.setattr(api, "_REF_MEMO_MAX", 1)
    verify(F.SCALE_REF, F.SCALE_FTZ)
    verify(F.SUM_REF, F.SUM_HALF_ACC)
    assert len(api._REF_MEMO) == 1
    m = G.RefMemo(max_bytes=100)
    assert m.put(("a",), np.zeros(10)) and not m.put(("b",), np.zeros(10)) and m.nbytes == 80
    # A bound that does not fit is kept by the grading that needed it: the rows do not change.
    monkeypatch.setattr(api, "_REF_MEMO_MB", 0)
    monkeypatch.setattr(api, "_REF_MEMO", {})
    small = verify(F.SUM_REF, F.SUM_HALF_ACC)
    assert not [k for k in next(iter(api._REF_MEMO.values()))[2] if k[0] == "tol"]
    monkeypatch.setattr(api, "_REF_MEMO_MB", 512)
    monkeypatch.setattr(api, "_REF_MEMO", {})
    assert _view(small) == _view(verify(F.SUM_REF, F.SUM_HALF_ACC))


def verify(ref, cand):
    return api.verify_profiles(ref, cand, profiles=PROFILES, device="cpu", seed=3, runner=inprocess_runner)
