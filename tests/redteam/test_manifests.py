"""The red-team and positive-control folders are well-formed and cover the contract.

Every manifest parses and validates; every target is one of the twelve gate ids; every gate is targeted by at
least one red-team kernel; the suites meet the issue's minimum sizes; the gate list agrees with the verifier's.
"""

from __future__ import annotations

import pytest

from lethe.redteam import manifest as M


@pytest.fixture(scope="module")
def red():
    return M.load_suite("red_team")


@pytest.fixture(scope="module")
def pos():
    return M.load_suite("positive_control")


def test_red_team_suite_valid(red):
    assert M.suite_problems(red, "red_team") == []
    assert len(red) >= 19


def test_positive_control_suite_valid(pos):
    assert M.suite_problems(pos, "positive_control") == []
    assert len(pos) >= 7
    assert all(k.targets == () for k in pos)


def test_every_target_is_a_gate_id(red):
    for k in red:
        assert k.targets, k.name
        assert set(k.targets) <= set(M.GATE_IDS), k.name


def test_every_gate_targeted_at_least_once(red):
    cov = M.coverage(red)
    assert set(cov) == set(M.GATE_IDS)
    assert [g for g, names in cov.items() if not names] == []


def test_gate_ids_match_verifier():
    gates = pytest.importorskip("lethe.verifier.gates")
    assert tuple(gates.GATE_IDS) == M.GATE_IDS


def test_names_unique_across_suites(red, pos):
    names = [k.name for k in red + pos]
    assert len(names) == len(set(names))


def test_both_languages_in_each_suite(red, pos):
    assert {k.language for k in red} == {"torch", "triton"}
    assert {k.language for k in pos} == {"torch", "triton"}


@pytest.mark.parametrize("bad, expect", [
    ({"targets": ["CMP-04"]}, "unknown gate ids"),
    ({"targets": []}, "at least one gate"),
    ({"language": "cuda"}, "language"),
    ({"name": "other"}, "differs from folder"),
    ({"passes_kernelbench_loose": "yes"}, "passes_kernelbench_loose"),
    ({"surprise": 1}, "unknown keys"),
])
def test_validator_rejects_bad_manifests(bad, expect):
    good = {"name": "k", "description": "d", "style": "s", "language": "torch", "targets": ["CMP-01"],
            "passes_kernelbench_loose": True, "notes": "n"}
    assert M.manifest_problems(good, "red_team", "k") == []
    problems = M.manifest_problems({**good, **bad}, "red_team", "k")
    assert any(expect in p for p in problems), problems


def test_validator_checks_language_against_source():
    m = {"name": "k", "description": "d", "style": "s", "language": "triton", "targets": ["CMP-01"],
         "passes_kernelbench_loose": None, "notes": "n"}
    assert any("no @triton.jit" in p for p in M.manifest_problems(m, "red_team", "k", "import torch\n"))


def test_trusted_kernel_may_not_target(pos):
    m = dict(pos[0].manifest, targets=["CMP-01"])
    assert any("targets no gate" in p for p in M.manifest_problems(m, "positive_control", m["name"]))
