"""Shard runner: every row once, checkpoints survive a kill, a hung verifier costs one row."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lethe.audit import aggregate as agg
from lethe.audit import shard as S
from lethe.audit.testing import fake_verify

FENCE = "```"


def corpus_file(path: Path, n: int) -> Path:
    """A tiny corpus in the upstream schema: reductions with a ModelNew answer in the last assistant turn."""
    rows = []
    for i in range(n):
        ref = f"import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.sum(dim={i % 2})\n"
        cand = f"class ModelNew:\n    variant = {i}\n"
        msgs = []
        for t in range(5):
            msgs.append({"role": "user", "content": f"turn {t}"})
            msgs.append({"role": "assistant", "content": f"{FENCE}python\n{cand}{FENCE}" if t == 4 else "thinking"})
        rows.append({"messages": msgs, "uuid": 100 + i, "entry_point": "Model", "repo_name": "", "module_name": "",
                     "final_speedup": 1.0 + i, "num_rounds": 5, "original_python_code": ref, "best_round": 5,
                     "timestamp": 0.0, "conversion_mode": "full_conversation_enhanced", "enable_thinking": False})
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def items(n):
    return [{"id": str(i), "op_class": "reduction", "reference": f"ref{i}", "candidate": f"cand{i}",
             "final_speedup": 1.0} for i in range(n)]


def test_run_shard_attaches_corpus_metadata_and_resumes(tmp_path):
    ck = tmp_path / "ck.jsonl"
    calls = []

    def counting(**kw):
        calls.append((kw["kernel_id"], kw["profile"]))
        return fake_verify(**kw)

    its = items(5)
    its[2]["candidate"] = None
    its[2]["extract_error"] = "no block"
    kw = dict(verify_fn=counting, profiles=["strict", "fast-math"], device="cpu", seed=1, timeout_s=5,
              corpus="t", progress=False)
    rows = S.run_shard(its[:3], ck, **kw)
    assert len(rows) == 6 and {r["status"] for r in rows if r["id"] == "2"} == {"no_candidate"}
    assert all(r["op_class"] == "reduction" and r["final_speedup"] == 1.0 for r in rows)
    n_before = len(calls)
    rows = S.run_shard(its, ck, **kw)
    assert len(rows) == 10 and len(calls) == n_before + 4  # only the two new kernels x two profiles ran
    assert [r["id"] for r in rows] == ["0", "0", "1", "1", "2", "2", "3", "3", "4", "4"]


def test_torn_checkpoint_line_is_truncated(tmp_path):
    ck = tmp_path / "ck.jsonl"
    ck.write_text(json.dumps({"id": "0", "profile": "strict", "status": "gated"}) + "\n" + '{"id": "1", "pro')
    assert [r["id"] for r in S.read_checkpoint(ck)] == ["0"]
    assert ck.read_text().endswith("}\n")


def test_hung_and_crashing_verifier_cost_one_row(tmp_path, monkeypatch):
    monkeypatch.setattr(S, "GRACE_S", 0.2)

    def verify(**kw):
        if kw["kernel_id"] == "1":
            time.sleep(2)
        if kw["kernel_id"] == "2":
            raise KeyError("verifier bug")
        return fake_verify(**kw)

    rows = S.run_shard(items(4), tmp_path / "ck.jsonl", verify_fn=verify, profiles=["strict"], device="cpu",
                       seed=1, timeout_s=0.1, corpus="t", progress=False)
    assert [r["status"] for r in rows] == ["gated", "timeout", "harness_error", "gated"]
    f = agg.funnel([agg.normalize_row(r) for r in rows])
    assert f["dropped"][agg.NO_VERDICT] == 1  # our bug is not the kernel's finding


def test_parquet_roundtrip_and_gather(tmp_path):
    its = items(6)
    parts = []
    for k in range(2):
        rows = S.run_shard(its[k::2], tmp_path / f"ck{k}.jsonl", verify_fn=fake_verify, profiles=["strict"],
                           device="cpu", seed=3, timeout_s=5, corpus="t", progress=False)
        S.write_parquet(rows, tmp_path / f"s{k}.parquet")
        parts.append(tmp_path / f"s{k}.parquet")
    rows = S.gather(parts, tmp_path / "rows.parquet")
    assert [r["id"] for r in rows] == [str(i) for i in range(6)]
    back = [agg.normalize_row(r) for r in S.read_parquet(tmp_path / "rows.parquet")]
    direct = [agg.normalize_row(fake_verify(ref_src=i["reference"], cand_src=i["candidate"], profile="strict",
                                            device="cpu", seed=3, timeout_s=5, kernel_id=i["id"], corpus="t"))
              for i in its]
    assert [r["gates"] for r in back] == [r["gates"] for r in direct]
    with pytest.raises(ValueError, match="two shards"):
        S.gather(parts + parts[:1], tmp_path / "dup.parquet")


@pytest.mark.slow
def test_kill_and_resume(tmp_path):
    """SIGKILL the shard process mid-run; the rerun finishes without redoing or losing a finished row."""
    corpus = corpus_file(tmp_path / "c.parquet", 12)
    ck, out, log = tmp_path / "ck.jsonl", tmp_path / "out.parquet", tmp_path / "calls.log"
    env = dict(os.environ, LETHE_FAKE_VERIFY_SLEEP="0.15", LETHE_FAKE_VERIFY_LOG=str(log), OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lethe.audit.shard", "--corpus", "fixture", "--corpus-file", str(corpus),
           "--shard", "0", "--shards", "1", "--checkpoint", str(ck), "--out", str(out),
           "--verifier", "lethe.audit.testing:fake_verify", "--no-progress"]
    proc = subprocess.Popen(cmd, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if ck.exists() and len(S.read_checkpoint(ck)) >= 4:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = {r["id"] for r in S.read_checkpoint(ck)}
    assert 4 <= len(finished) < 12 and not out.exists()
    subprocess.run(cmd, env=dict(env, LETHE_FAKE_VERIFY_SLEEP="0"), check=True, timeout=120)
    rows = S.read_parquet(out)
    assert sorted(int(r["id"]) for r in rows) == list(range(100, 112))
    calls = [line.split("\t")[0] for line in log.read_text().splitlines()]
    # Every kernel finished before the kill was verified exactly once; at most one (the one in flight) twice.
    assert all(calls.count(i) == 1 for i in finished)
    assert sum(calls.count(str(i)) - 1 for i in range(100, 112)) <= 1


def test_shards_partition_the_items():
    from lethe.corpora.items import shard

    its = items(11)
    parts = [shard(its, k, 4) for k in range(4)]
    ids = [i["id"] for p in parts for i in p]
    assert sorted(ids, key=int) == [str(i) for i in range(11)] and len(ids) == len(set(ids))
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    with pytest.raises(ValueError):
        shard(its, 4, 4)


def test_stale_checkpoint_rows_are_redone(tmp_path):
    """A checkpointed verdict is reused only for the same reference, candidate and seed."""
    ck = tmp_path / "ck.jsonl"
    calls = []

    def counting(**kw):
        calls.append(kw["kernel_id"])
        return fake_verify(**kw)

    kw = dict(verify_fn=counting, profiles=["strict"], device="cpu", timeout_s=5, corpus="t", progress=False)
    its = items(3)
    S.run_shard(its, ck, seed=1, **kw)
    its[1]["candidate"] = "cand1-fixed"
    rows = S.run_shard(its, ck, seed=1, **kw)
    assert calls == ["0", "1", "2", "1"]
    assert json.loads(rows[1]["sources"])["cand_sha256"] == S.item_sources(its[1])["cand_sha256"]
    S.run_shard(its, ck, seed=2, **kw)
    assert calls[4:] == ["0", "1", "2"]


def test_a_hung_verifier_does_not_block_exit(tmp_path):
    """The shard process exits promptly even while an abandoned verifier call is still sleeping."""
    code = (
        "import time\n"
        "from lethe.audit import shard as S\n"
        "S.GRACE_S = 0.1\n"
        "def hang(**kw):\n"
        "    time.sleep(600)\n"
        "rows = S.run_shard([{'id': '1', 'reference': 'r', 'candidate': 'c'}], r'%s', verify_fn=hang,\n"
        "                   profiles=['strict'], device='cpu', seed=0, timeout_s=0.1, corpus='t', progress=False)\n"
        "assert rows[0]['status'] == 'timeout'\n" % (tmp_path / "ck.jsonl")
    )
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert time.monotonic() - t0 < 60


def test_rows_graded_by_other_verifier_code_are_redone():
    import json

    from lethe.verifier.api import code_digest

    item = {"id": "1", "reference": "r", "candidate": "c"}
    base = {"id": "1", "seed": 0, "device": "cpu", "sources": json.dumps(S.item_sources(item))}
    same = dict(base, environment=json.dumps({"verifier_code": code_digest()}))
    other = dict(base, environment=json.dumps({"verifier_code": "0" * 16}))
    assert S.still_valid(same, S.item_sources(item), seed=0, device="cpu")
    assert not S.still_valid(other, S.item_sources(item), seed=0, device="cpu")
    assert S.still_valid(base, S.item_sources(item), seed=0, device="cpu")  # no digest recorded: sources decide


# ------------------------------------------------------------------ issue 23: bad checkpoints, killer kernels


def _row(i, **kw):
    return json.dumps({"id": str(i), "profile": "strict", "status": "gated", "seed": 1, **kw}) + "\n"


def test_checkpoint_reader_survives_any_bad_line(tmp_path):
    """Garbage, `{}`, a NUL-filled line, a list, rows missing a key or carrying a wrong type: each is skipped
    with a warning and the valid rows after it are kept (on disk too); only a torn last line is cut off."""
    ck = tmp_path / "ck.jsonl"
    body = (_row(0) + "{}\n" + "\0" * 64 + "\n" + '{"id": "x", "profile": "str\n' + _row(1) + "[1, 2]\n"
            + _row(2, seed="abc") + json.dumps({"profile": "strict", "status": "gated"}) + "\n"
            + _row(5, gates=[1]) + _row(6, seconds="soon") + "\0" * 16 + _row(3) + "\xff\xfe garbage\n"
            + _row(4))
    ck.write_bytes(body.encode("utf-8", errors="surrogateescape") + b'{"id": "7", "pro')
    skipped = []
    with pytest.warns(RuntimeWarning, match="skipped 9 checkpoint line"):
        rows = S.read_checkpoint(ck, skipped=skipped)
    assert [r["id"] for r in rows] == ["0", "1", "3", "4"]
    assert len(skipped) == 9
    assert ck.read_bytes() == body.encode("utf-8", errors="surrogateescape")  # only the torn tail went


def test_resume_over_bad_lines_keeps_valid_rows(tmp_path):
    ck = tmp_path / "ck.jsonl"
    its = items(4)
    kw = dict(verify_fn=fake_verify, profiles=["strict"], device="cpu", seed=1, timeout_s=5, corpus="t",
              progress=False)
    S.run_shard(its[:2], ck, **kw)
    with open(ck, "ab") as fh:
        fh.write(b"{}\n" + b"\0" * 40 + b"\nnot json\n")
    calls = []

    def counting(**k):
        calls.append(k["kernel_id"])
        return fake_verify(**k)

    with pytest.warns(RuntimeWarning):
        rows = S.run_shard(its, ck, **dict(kw, verify_fn=counting))
    assert calls == ["2", "3"] and [r["id"] for r in rows] == ["0", "1", "2", "3"]


@pytest.mark.slow
def test_kernel_that_kills_its_shard_costs_its_own_row(tmp_path):
    """A verify call that SIGKILLs the shard process on one kernel: the shard is restarted until it
    finishes. After max_attempts deaths on that kernel it gets a crash row saying so; every other kernel
    gets its normal row, verified once, and no row appears twice."""
    corpus = corpus_file(tmp_path / "c.parquet", 6)
    ck, out, log = tmp_path / "ck.jsonl", tmp_path / "out.parquet", tmp_path / "calls.log"
    killer = "103"
    env = dict(os.environ, LETHE_FAKE_VERIFY_LOG=str(log), LETHE_KILLER_ID=killer, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "lethe.audit.shard", "--corpus", "fixture", "--corpus-file", str(corpus),
           "--shard", "0", "--shards", "1", "--checkpoint", str(ck), "--out", str(out),
           "--verifier", "killer_verify:verify", "--no-progress", "--max-attempts", "2"]
    codes = []
    for _ in range(5):
        codes.append(subprocess.run(cmd, env=env, timeout=300).returncode)
        if codes[-1] == 0:
            break
    assert codes == [-signal.SIGKILL, -signal.SIGKILL, 0], codes
    rows = S.read_parquet(out)
    assert sorted(int(r["id"]) for r in rows) == list(range(100, 106))
    by_id = {r["id"]: r for r in rows}
    assert by_id[killer]["status"] == "crash"
    assert "the shard process died while verifying this item on 2 attempts" in by_id[killer]["error"]
    assert all(r["status"] == "gated" for i, r in by_id.items() if i != killer)
    ck_ids = [r["id"] for r in S.read_checkpoint(ck)]
    assert sorted(ck_ids) == sorted(by_id) and len(ck_ids) == len(set(ck_ids))
    calls = [line.split("\t")[0] for line in log.read_text().splitlines()]
    assert all(calls.count(i) == 1 for i in by_id if i != killer)
    # A new run of the finished shard verifies nothing and keeps the crash row.
    assert subprocess.run(cmd, env=env, timeout=300).returncode == 0
    assert [line.split("\t")[0] for line in log.read_text().splitlines()] == calls


def test_attempts_are_counted_per_kernel_version(tmp_path):
    """An attempt marker counts against the same kernel, profile and seed only: a fixed candidate (or a new
    seed) is tried afresh."""
    it = items(1)[0]
    k = S.attempt_key(it, "strict", seed=1, code="c")
    assert k == S.attempt_key(dict(it), "strict", seed=1, code="c")
    others = {S.attempt_key(dict(it, candidate="fixed"), "strict", seed=1, code="c"),
              S.attempt_key(it, "fast-math", seed=1, code="c"), S.attempt_key(it, "strict", seed=2, code="c"),
              S.attempt_key(it, "strict", seed=1, code="d")}
    assert k not in others and len(others) == 4


def test_all_profiles_of_a_kernel_come_from_one_verifier_call(tmp_path):
    calls = []

    def many(*, profiles, **kw):
        calls.append((kw["kernel_id"], tuple(profiles)))
        return [fake_verify(profile=p, **kw) for p in profiles]

    def single(**kw):
        raise AssertionError("the per-profile verifier must not run when every profile is pending")

    profs = ["strict", "cuda-default", "fast-math"]
    rows = S.run_shard(items(3), tmp_path / "ck.jsonl", verify_fn=single, verify_many_fn=many, profiles=profs,
                       device="cpu", seed=1, timeout_s=5, corpus="t", progress=False)
    assert calls == [(str(i), tuple(profs)) for i in range(3)]
    assert [(r["id"], r["profile"]) for r in rows] == [(str(i), p) for i in range(3) for p in profs]
    # A verifier that returns nothing for one profile costs that profile's row, not the kernel's others.
    rows = S.run_shard(items(4), tmp_path / "ck.jsonl", verify_fn=single, profiles=profs, device="cpu", seed=1,
                       timeout_s=5, corpus="t", progress=False,
                       verify_many_fn=lambda *, profiles, **kw: [fake_verify(profile=p, **kw) for p in profiles[:2]])
    new = {r["profile"]: r["status"] for r in rows if r["id"] == "3"}
    assert new["fast-math"] == S.HARNESS_ERROR and new["strict"] != S.HARNESS_ERROR
