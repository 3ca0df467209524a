"""Isolation through the whole verifier: the row says what the operating system enforced, and the attack that
reads the float64 reference out of the verifier's memory is out of reach.

``steal_reference`` (data/hostile) computes nothing: it scans its ancestors' memory for the sandbox's array
buffers and returns the reference output of the probe whose inputs match its own. The control run with
isolation switched off shows the attack is real (it passes CMP-01 there); the isolated run must fail it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lethe.sandbox import isolation
from lethe.verifier import api

HOSTILE = Path(__file__).resolve().parents[2] / "data" / "hostile"
needs_isolation = pytest.mark.skipif(isolation.unavailable_reason() is not None,
                                     reason=f"no OS isolation here: {isolation.unavailable_reason()}")


def _verify(cand: str, monkeypatch, iso: str, start: str) -> dict:
    monkeypatch.setenv("LETHE_ISOLATION", iso)
    monkeypatch.setenv("LETHE_SANDBOX_START", start)
    api._REF_CACHE.clear()
    return api.verify((HOSTILE / "ref.py").read_text(), (HOSTILE / cand / "cand.py").read_text(), device="cpu",
                      seed=1, timeout_s=120, memory_mb=4096, only_gates=["CMP-01"])


@needs_isolation
@pytest.mark.parametrize("start", ["spawn", "zygote"])
@pytest.mark.slow
def test_reference_in_the_verifiers_memory_is_out_of_reach(monkeypatch, start):
    control = _verify("steal_reference", monkeypatch, "off", start)
    # Unisolated, the thief really finds the reference (else this test would prove nothing).
    assert control["gates"]["CMP-01"]["status"] == "pass", control["gates"]["CMP-01"]
    assert (control["isolation"], control["tamper_proof"]) == ("none: switched off (LETHE_ISOLATION=off)", False)
    row = _verify("steal_reference", monkeypatch, "auto", start)
    assert row["status"] == "gated" and row["gates"]["CMP-01"]["status"] == "fail", row["gates"]["CMP-01"]
    assert (row["isolation"], row["tamper_proof"]) == (isolation.FULL, True)


@needs_isolation
def test_a_correct_kernel_still_passes_isolated(monkeypatch):
    row = _verify("good", monkeypatch, "auto", "zygote")
    assert api.verdict(row) == "pass", row["gates"]
    assert row["tamper_proof"] is True


def test_unisolated_rows_are_never_tamper_proof(monkeypatch):
    row = _verify("good", monkeypatch, "off", "zygote")
    assert api.verdict(row) == "pass"
    assert row["isolation"].startswith("none: ") and row["tamper_proof"] is False


def test_isolation_fields_take_the_weakest_process():
    class R:
        def __init__(self, iso, proof):
            self.isolation, self.tamper_proof = iso, proof

    full = R(isolation.FULL, True)
    assert api.isolation_fields([("reference", full), ("candidate", full)]) == {"isolation": isolation.FULL,
                                                                              "tamper_proof": True}
    mixed = api.isolation_fields([("reference", full), ("candidate", R("partial: missing uid switch", False))])
    assert mixed["tamper_proof"] is False
    assert mixed["isolation"] == f"reference: {isolation.FULL}; candidate: partial: missing uid switch"
    assert api.isolation_fields([])["tamper_proof"] is False
