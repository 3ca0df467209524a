"""The trusted runner: one candidate run graded per profile, the reference's budget, resume and the deadline."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from lethe.audit.shard import read_checkpoint
from lethe.audit.testing import fake_verify
from lethe.trusted import run as TR
from lethe.verifier import records as R

PROFILES = ["strict", "cuda-default", "fast-math"]


class Calls:
    def __init__(self, ref_status="ok"):
        self.ref_status = ref_status
        self.reference = 0
        self.verify = 0

    def run_reference(self, ref_src, seed, *, timeout_s, memory_mb, interpret, device="cpu"):
        self.reference += 1
        self.ref_args = {"timeout_s": timeout_s, "memory_mb": memory_mb, "interpret": interpret}
        ok = self.ref_status == "ok"
        return self.ref_status, {"ok": ok, "error": "" if ok else "boom"}, {}, SimpleNamespace(detail="d")

    def verify_profiles(self, ref_src, cand_src, *, profiles, **kw):
        self.verify += 1
        return [fake_verify(ref_src, cand_src, profile=p, kernel_id=kw["kernel_id"], corpus=kw["corpus"],
                            seed=kw["seed"], device="cpu") for p in profiles]


def _memo(calls):
    return TR.ProfileMemo(PROFILES, ref_memory_mb=100, memory_mb=50, verify_profiles=calls.verify_profiles,
                          run_reference=calls.run_reference)


def _ask(memo, profile, cand="c"):
    return memo(ref_src="r", cand_src=cand, profile=profile, device="cpu", seed=1, kernel_id="k", corpus="trusted",
                timeout_s=7.0)


def test_profile_memo_verifies_once_per_kernel_and_hands_out_each_profile():
    calls = Calls()
    memo = _memo(calls)
    rows = [_ask(memo, p) for p in PROFILES]
    assert calls.verify == 1 and calls.reference == 1
    assert [r["profile"] for r in rows] == PROFILES
    assert calls.ref_args == {"timeout_s": 7.0, "memory_mb": 100, "interpret": False}
    _ask(memo, "strict", cand="other triton kernel")
    assert calls.verify == 2 and calls.ref_args["interpret"] is True


def test_reference_over_budget_is_a_timeout_row_that_says_so_and_the_candidate_never_runs():
    calls = Calls(ref_status="timeout")
    memo = _memo(calls)
    rows = [_ask(memo, p) for p in PROFILES]
    assert calls.verify == 0
    for r in rows:
        assert r["status"] == "timeout" and r["error"].startswith(TR.REF_BUDGET_PREFIX) and "7 s" in r["error"]
        assert all(g["status"] == "na" for g in r["gates"].values())
        assert json.loads(r["sources"])["ref_sha256"]


def test_broken_reference_is_not_run_again():
    calls = Calls(ref_status="oom")
    rows = [_ask(_memo(calls), p) for p in PROFILES[:1]]
    assert calls.verify == 0 and rows[0]["status"] == "ref_broken"


def _corpus(n):
    items = [{"id": f"L1/{i}_P", "reference": f"ref {i}", "candidate": f"cand {i}", "op_class": "self"}
             for i in range(n)]
    members = [{"id": it["id"], "kind": "self", "problem": f"level1/{i}_P.py", "level": 1, "number": i,
                "census": {"input_numel": i}, "excluded": "", "reference": it["reference"],
                "candidate": it["candidate"]} for i, it in enumerate(items)]
    members.append({"id": "L1/99_Big", "kind": "self", "problem": "level1/99_Big.py", "level": 1, "number": 99,
                    "census": {"input_numel": 10**9}, "excluded": "one forward moves 2 elements (> 1)",
                    "reference": "big", "candidate": "big"})
    return {"members": members, "items": items, "budget": {"max_numel": 1, "max_flops": 1.0}, "levels": [1]}


def test_run_stops_at_the_deadline_and_a_second_call_resumes(tmp_path, monkeypatch):
    seen = []

    def verify(**kw):
        seen.append((kw["kernel_id"], kw["profile"]))
        return fake_verify(**kw)

    corpus = _corpus(3)
    ck = tmp_path / "ck.jsonl"
    clock = iter([0.0, 0.0, 0.0, 100.0] + [100.0] * 1000)
    monkeypatch.setattr(TR.time, "monotonic", lambda: next(clock))
    s1 = TR.run(corpus, tmp_path / "out", checkpoint=ck, profiles=PROFILES, device="cpu", seed=1, budget_s=5,
                deadline=50.0, verify_fn=verify, log=lambda m: None)
    monkeypatch.setattr(TR.time, "monotonic", time.monotonic)
    assert s1["run"]["stopped_early"] is True
    first = {k for k, _ in seen}
    assert 0 < len(first) < 3
    self_cov = s1["by_kind"]["self"]
    assert self_cov["excluded_static"] == 1 and self_cov["attempted"] == len(first)
    assert self_cov["not_reached"] == 3 - len(first)
    seen.clear()
    s2 = TR.run(corpus, tmp_path / "out", checkpoint=ck, profiles=PROFILES, device="cpu", seed=1, budget_s=5,
                deadline=None, verify_fn=verify, log=lambda m: None)
    assert {k for k, _ in seen} == {f"L1/{i}_P" for i in range(3)} - first
    assert s2["by_kind"]["self"]["attempted"] == 3 and s2["by_kind"]["self"]["not_reached"] == 0
    rows = R.read_rows(tmp_path / "out" / "rows.parquet")
    assert [(r["id"], r["profile"]) for r in rows] == [(f"L1/{i}_P", p) for i in range(3) for p in PROFILES]
    man = json.loads((tmp_path / "out" / "corpus.json").read_text())
    big = next(m for m in man["members"] if m["id"] == "L1/99_Big")
    assert big["excluded"] and "candidate" not in big
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["budget"] == {"max_numel": 1, "max_flops": 1.0}


def test_coverage_counts_run_time_exclusions_apart():
    man = {"members": [{"id": "a", "kind": "self", "excluded": ""}, {"id": "b", "kind": "self", "excluded": ""},
                       {"id": "c", "kind": "hand", "excluded": ""}]}
    rows = [{"id": "a", "status": "timeout", "error": TR.REF_BUDGET_PREFIX + " (120 s)"},
            {"id": "b", "status": "gated", "error": ""}]
    rows.append({"id": "c", "status": "timeout", "error": "candidate exceeded 120s"})
    cov = TR.coverage(man, rows)
    assert cov["by_kind"]["self"]["statuses"] == {"excluded_reference_over_time_budget": 1, "gated": 1}
    assert cov["by_kind"]["hand"]["statuses"] == {"candidate_over_time_budget": 1}


def test_drop_rows_rewrites_the_checkpoint(tmp_path):
    ck = tmp_path / "ck.jsonl"
    rows = [{"id": str(i), "profile": "strict", "status": s} for i, s in enumerate(["gated", "timeout"])]
    ck.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert TR.drop_rows(ck, lambda r: r["status"] != "timeout") == 1
    assert read_checkpoint(ck) == [rows[0]]


def test_deadline():
    assert TR._deadline(None, None, now=10.0) is None
    assert TR._deadline(5, None, now=10.0) == 15.0
    d = TR._deadline(None, "00:00", now=0.0)
    assert 0 < d <= 24 * 3600


def test_the_verifier_gets_the_kernel_budget_and_the_shard_backstop_covers_every_phase(tmp_path):
    got = []

    def verify(**kw):
        got.append(kw["timeout_s"])
        return fake_verify(**kw)

    TR.run(_corpus(1), tmp_path / "out", checkpoint=tmp_path / "ck.jsonl", profiles=["strict"], device="cpu",
           seed=1, budget_s=7.0, verify_fn=verify, log=lambda m: None)
    assert got == [7.0]
    assert TR.backstop_s(7.0) >= 3 * 7.0


def test_a_late_second_call_waits_for_the_running_verification():
    import threading

    calls = Calls()
    gate = threading.Event()
    slow = calls.verify_profiles

    def verify_profiles(*a, **kw):
        gate.wait(5)
        return slow(*a, **kw)

    memo = TR.ProfileMemo(PROFILES, ref_memory_mb=1, memory_mb=1, verify_profiles=verify_profiles,
                          run_reference=calls.run_reference)
    first = threading.Thread(target=_ask, args=(memo, "strict"))
    first.start()
    time.sleep(0.2)
    second = threading.Thread(target=_ask, args=(memo, "cuda-default"))
    second.start()
    gate.set()
    first.join(5)
    second.join(5)
    assert calls.verify == 1


def test_only_items_restricts_items_and_members_and_refuses_unknown_ids():
    import pytest

    from lethe.trusted.run import only_items

    corpus = {"items": [{"id": "L1/a"}, {"id": "L2/b"}], "members": [{"id": "L1/a"}, {"id": "L2/b"}, {"id": "L3/c"}]}
    sub = only_items(corpus, ["L2/b"])
    assert [i["id"] for i in sub["items"]] == ["L2/b"] and [m["id"] for m in sub["members"]] == ["L2/b"]
    with pytest.raises(ValueError):
        only_items(corpus, ["L2/typo"])


def test_shard_items_keeps_problems_together_and_covers_the_corpus_once():
    items = [{"id": f"L1/{i}_{k}", "reference": f"ref {i}", "candidate": f"{k} {i}"} for i in range(5)
             for k in ("self", "hand")]
    corpus = {"items": items, "members": [{"id": it["id"]} for it in items]}
    shares = [TR.shard_items(corpus, i, 3) for i in range(3)]
    ids = [it["id"] for sh in shares for it in sh["items"]]
    assert sorted(ids) == sorted(it["id"] for it in items) and len(ids) == len(set(ids))
    for sh in shares:
        refs = {it["reference"] for it in sh["items"]}
        assert all(it["reference"] not in refs for other in shares if other is not sh for it in other["items"])
        assert [m["id"] for m in sh["members"]] == [it["id"] for it in sh["items"]]
    assert [it["id"] for it in shares[0]["items"]] == ["L1/0_self", "L1/0_hand", "L1/3_self", "L1/3_hand"]
    import pytest

    with pytest.raises(ValueError):
        TR.shard_items(corpus, 3, 3)


def test_merge_checkpoints_adds_only_new_lines(tmp_path):
    main, a, b = tmp_path / "ck", tmp_path / "a", tmp_path / "b"
    old = {"id": "x", "profile": "strict", "status": "gated"}
    main.write_text(json.dumps(old) + "\n")
    a.write_text(json.dumps(old) + "\n" + json.dumps({**old, "id": "y"}) + "\n")
    b.write_text(json.dumps(old) + "\n" + json.dumps({**old, "id": "z"}) + "\n")
    assert TR.merge_checkpoints(main, [a, b]) == 2
    assert [r["id"] for r in read_checkpoint(main)] == ["x", "y", "z"]


def test_parallel_workers_verify_each_kernel_once_and_a_resumed_run_redoes_nothing(tmp_path):
    """--workers N: N processes on disjoint shares with their own checkpoints, folded into the main one; the
    folded checkpoint is what the collection step and the next run read. The processes are simulated here by
    running each worker's share in this process with the fake verifier."""
    corpus = _corpus(5)
    seen = []

    def verify(**kw):
        seen.append(kw["kernel_id"])
        return fake_verify(**kw)

    class FakePopen:
        def __init__(self, cmd):
            arg = {cmd[i]: cmd[i + 1] for i in range(len(cmd) - 1) if cmd[i].startswith("--")}
            idx, cnt = (int(x) for x in arg["--shard"].split("/"))
            TR.run(TR.shard_items(corpus, idx, cnt), arg["--out"], checkpoint=arg["--checkpoint"],
                   profiles=PROFILES, device="cpu", seed=1, budget_s=5, verify_fn=verify, log=lambda m: None)

        def wait(self):
            return 0

    ck, out = tmp_path / "ck.jsonl", tmp_path / "out"
    stopped, started = TR.run_parallel(["--device", "cpu"], workers=2, checkpoint=ck, out=out, log=lambda m: None,
                                       popen=FakePopen)
    assert stopped is False and sorted(seen) == sorted([it["id"] for it in corpus["items"]] * 3)
    s = TR.run(corpus, out, checkpoint=ck, profiles=PROFILES, device="cpu", seed=1, budget_s=5, verify_fn=verify,
               log=lambda m: None, collect_only=True, stopped_early=stopped, started=started)
    assert s["by_kind"]["self"]["attempted"] == 5 and s["run"]["kernels_run_this_call"] == started
    assert len(R.read_rows(out / "rows.parquet")) == 15
    assert not list(tmp_path.glob("ck.jsonl.worker*")) and not list(out.glob(".worker*"))
    from lethe.audit.shard import read_attempts

    marks = read_attempts(ck)
    assert len(marks) == 15 and set(marks.values()) == {1}, marks
    seen.clear()
    assert TR.run_parallel([], workers=3, checkpoint=ck, out=out, log=lambda m: None, popen=FakePopen)[0] is False
    assert seen == []


def test_worker_files_of_a_killed_run_are_folded_before_the_next_run(tmp_path):
    """A parallel run killed outright leaves its worker checkpoints; the next run folds them in first, so their
    rows are kept and not redone."""
    ck = tmp_path / "ck.jsonl"
    row = {"id": "x", "profile": "strict", "status": "gated"}
    (tmp_path / "ck.jsonl.worker0of2").write_text(json.dumps(row) + "\n")
    (tmp_path / "ck.jsonl.worker0of2.seed").write_text("0")
    (tmp_path / "ck.jsonl.worker0of2.attempts").write_text(json.dumps({"key": "k1"}) + "\n")
    (tmp_path / "ck.jsonl.workerish").write_text("not a worker file\n")

    class Done:
        def __init__(self, cmd):
            pass

        def wait(self):
            return 0

    TR.run_parallel([], workers=2, checkpoint=ck, out=tmp_path / "out", log=lambda m: None, popen=Done)
    assert read_checkpoint(ck) == [row]
    from lethe.audit.shard import read_attempts

    assert read_attempts(ck) == {"k1": 1}
    assert (tmp_path / "ck.jsonl.workerish").exists()
    assert not list(tmp_path.glob("ck.jsonl.worker?of*"))


def test_a_reference_over_budget_is_an_exclusion_wherever_the_limit_tripped():
    """The runner's own budget rows and the reference's own reports of the same limits (its alarm, its
    allocator) are run-time exclusions; any other broken reference is not."""
    own_time = "reference exceeded its 120 s time budget while measuring the outputs' conditioning on probe small"
    own_mem = "reference exceeded its 4096 MB memory budget while running the forward on probe rand0 (RuntimeError)"
    cases = [({"status": "timeout", "error": TR.REF_BUDGET_PREFIX + " (120 s)"}, "reference_time"),
             ({"status": "timeout", "error": "candidate exceeded 120s"}, "candidate_time"),
             ({"status": "ref_broken", "error": TR.REF_MEMORY_PREFIX + " (4096 MB)"}, "reference_memory"),
             ({"status": "ref_broken", "error": own_time}, "reference_time"),
             ({"status": "ref_broken", "error": own_mem}, "reference_memory"),
             ({"status": "ref_broken", "error": "reference is nondeterministic: two runs differ"}, None),
             ({"status": "gated", "error": own_time}, None)]
    for row, want in cases:
        assert TR.budget_exclusion(row) == want, row
    man = {"members": [{"id": "a", "kind": "self", "excluded": ""}, {"id": "b", "kind": "self", "excluded": ""}]}
    cov = TR.coverage(man, [{"id": "a", "status": "ref_broken", "error": own_time},
                            {"id": "b", "status": "ref_broken", "error": "reference is nondeterministic"}])
    assert cov["by_kind"]["self"]["statuses"] == {"excluded_reference_over_time_budget": 1, "ref_broken": 1}
