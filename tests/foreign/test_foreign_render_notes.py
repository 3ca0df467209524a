"""lethe.foreign.render: the scope and device notes are computed from the committed files (CPU, synthetic)."""

from lethe.foreign.render import _device_note, scope_note


def _k(i, compiled=True, audited=True, extracted=True, attempted=True):
    return {"id": i, "level": 1, "task": 1, "op_name": "mm", "compiled": compiled, "audited": audited,
            "candidate_extracted": extracted, "build_attempted": attempted}


def test_scope_blames_the_time_limit_only_when_compiled_kernels_were_left_out():
    tp = {"goal": None, "scaling": []}
    left_out = scope_note([_k("a"), _k("b", audited=False)], tp)
    assert "before the device call's time limit" in left_out and "Compiled but not audited: 1 of level 1" in left_out
    complete = scope_note([_k("a"), _k("b", compiled=False, audited=False),
                           _k("c", compiled=False, audited=False, extracted=False, attempted=False)], tp)
    assert "time limit" not in complete
    assert "1 of the 3 selected kernels were audited, every one that compiled" in complete
    assert "1 without a convertible source; 1 failed to build" in complete


def test_device_note_names_every_commit_of_a_multi_call_ingest():
    prov = {"gpu": "G", "driver": "d", "torch": "t", "triton": "x", "python": "p", "git_sha": "7b29cad32c29abcd"}
    assert _device_note(prov).endswith("commit 7b29cad32c29.")
    prov["ingest"] = {"runs": ["call 1 (git b1fbed0): ...", "call 2 (git b1fbed0, same)", "call 3 (git 7b29cad): x"]}
    assert _device_note(prov).endswith("commits b1fbed0, 7b29cad (one per device call; provenance.json says which rows).")
    prov["ingest"] = {"runs": ["call (git 7b29cad): x"]}
    assert _device_note(prov).endswith("commit 7b29cad32c29.")
