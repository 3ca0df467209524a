"""A corpus audited over several device calls (lethe.audit.accumulate, lethe.audit.batch.gather_finished)."""

from __future__ import annotations

import json

from lethe.audit import accumulate as A
from lethe.audit import batch, shard
from lethe.audit.testing import fake_verify

REF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a):
        return torch.relu(a)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
"""
CAND = REF.replace("class Model(", "class ModelNew(")

PROFILES = ["strict", "cuda-default", "fast-math"]


def _items(n):
    return [{"id": f"level_1_problem_{p}_sample_0", "candidate": "x"} for p in range(1, n + 1)]


def test_slices_walk_one_fixed_order_without_overlap():
    items = _items(30) + [{"id": "level_1_problem_99_sample_0", "candidate": None}]
    first = A.next_slice(items, 12, set())
    second = A.next_slice(items, 12, {it["id"] for it in first})
    assert len(first) == len(second) == 12 and not {i["id"] for i in first} & {i["id"] for i in second}
    whole = [it["id"] for it in A.next_slice(items, 100, set())]
    assert whole[:24] == [it["id"] for it in first + second]  # a second call continues the same order
    assert "level_1_problem_99_sample_0" not in whole  # nothing to audit without a candidate
    assert whole != sorted(whole)  # not the file-name order: a prefix spreads over the corpus


def test_unbuilt_are_the_kernels_without_any_build_outcome(tmp_path):
    (tmp_path / "builds-0.jsonl").write_text(json.dumps({"id": "a", "ok": True}) + "\n"
                                             + json.dumps({"id": "b", "ok": False}) + "\n{\"id\": \"c\"")
    assert A.unbuilt([{"id": k} for k in "abcd"], tmp_path) == ["c", "d"]  # a failed build is an outcome


def test_merge_rows_replaces_a_kernel_whole_and_keeps_the_rest():
    old = [{"id": i, "profile": p, "v": "old"} for i in ("level_1_problem_2_sample_0", "level_1_problem_10_sample_0")
           for p in PROFILES]
    new = [{"id": "level_1_problem_10_sample_0", "profile": "strict", "v": "new"}]
    got = A.merge_rows(old, new)
    assert [(r["id"], r["profile"], r["v"]) for r in got] == [
        ("level_1_problem_2_sample_0", "cuda-default", "old"), ("level_1_problem_2_sample_0", "fast-math", "old"),
        ("level_1_problem_2_sample_0", "strict", "old"), ("level_1_problem_10_sample_0", "strict", "new")]


def test_union_lines_new_wins_in_kernelbench_order():
    got = A.union_lines([{"id": "level_1_problem_10_sample_0", "x": 1}, {"id": "level_1_problem_9_sample_0", "x": 1}],
                        [{"id": "level_1_problem_10_sample_0", "x": 2}])
    assert [(r["id"], r["x"]) for r in got] == [("level_1_problem_9_sample_0", 1), ("level_1_problem_10_sample_0", 2)]


def test_throughput_uses_the_last_row_when_the_audit_was_stopped():
    state = {"build": {"wall_s": 200.0, "cmd": ["lethe", "--build-workers", "14"]},
             "kb_real": {"wall_s": 36.0, "cmd": ["judge", "--workers", "4"]},
             "audit": {"wall_s": None, "wall_s_to_last_row": 120.0, "cmd": ["audit", "--workers", "8"]}}
    t = A.throughput(state, built=20, audited=10, judged=20)
    assert t["build"] == {"kernels": 20, "wall_s": 200.0, "workers": 14, "kernels_per_hour": 360.0}
    assert t["audit_three_profiles"]["kernels_per_hour"] == 300.0 and t["kernelbench_real"]["workers"] == 4


def test_gather_finished_keeps_every_kernel_with_all_its_profiles(tmp_path):
    root, run = tmp_path / "kb", tmp_path / "run"
    (root / "KernelBench" / "level1").mkdir(parents=True)
    run.mkdir()
    for p in (1, 2):
        (root / "KernelBench" / "level1" / f"{p}_Relu.py").write_text(REF)
        for s in (0, 1):
            (run / f"level_1_problem_{p}_sample_{s}_kernel.py").write_text(CAND)
    out = tmp_path / "out"
    work = out / "work"
    work.mkdir(parents=True)
    spec = {"root": str(run), "ref": None, "kernelbench": str(root), "problem_base": 1, "profiles": PROFILES,
            "device": "cpu", "seed": 0, "timeout_s": 60.0, "corpus": "demo", "reference_device": "cpu"}
    (work / "spec.json").write_text(json.dumps(spec))
    items = batch.discover(run, kernelbench=str(root))
    shard.run_shard(items, work / "shard-0.jsonl", verify_fn=fake_verify, profiles=PROFILES, device="cpu", seed=0,
                    timeout_s=60.0, corpus="demo", progress=False)
    lines = (work / "shard-0.jsonl").read_text().splitlines()
    cut = "level_1_problem_2_sample_0"
    kept = [ln for ln in lines if not (json.loads(ln).get("id") == cut and json.loads(ln).get("profile") == "fast-math")]
    assert len(kept) == len(lines) - 1
    (work / "shard-0.jsonl").write_text("\n".join(kept) + "\n")  # the call ended before that row
    got = batch.gather_finished(work, str(run), out=out)
    assert got["incomplete"] == [cut] and got["kernels"] == len(items) - 1 and got["rows"] == 3 * (len(items) - 1)
    import pyarrow.parquet as pq

    ids = pq.read_table(out / "rows.parquet", columns=["id"]).column("id").to_pylist()
    assert cut not in ids and len(ids) == got["rows"]


# ------------------------------------------------------------------------------------ slicing by backend


def _backend_items():
    items = [{"id": f"level_1_problem_{p}_sample_0", "candidate": "x"} for p in range(1, 7)]
    detected = {it["id"]: b for it, b in zip(items, ["cuda", "triton", "pytorch", "triton", "cute", "triton"], strict=True)}
    return items, detected


def test_backend_filter_keeps_only_the_asked_backends_in_their_order():
    import pytest

    items, detected = _backend_items()
    got = A.select_backends(items, detected, ("triton",))
    assert [it["id"] for it in got] == ["level_1_problem_2_sample_0", "level_1_problem_4_sample_0",
                                        "level_1_problem_6_sample_0"]
    both = A.select_backends(list(reversed(items)), detected, ["pytorch", "triton"])
    assert [it["id"] for it in both] == ["level_1_problem_6_sample_0", "level_1_problem_4_sample_0",
                                         "level_1_problem_3_sample_0", "level_1_problem_2_sample_0"]
    with pytest.raises(ValueError, match="unknown backend"):
        A.select_backends(items, detected, ("trtion",))
    with pytest.raises(ValueError, match="no detected backend recorded"):
        A.select_backends(items, {}, ("triton",))  # a manifest without them is not an empty slice


def test_backends_option_is_parsed_strictly():
    import pytest

    assert A.parse_backends("") is None and A.parse_backends(" , ") is None
    assert A.parse_backends("triton, pytorch,triton") == ("triton", "pytorch")
    with pytest.raises(ValueError, match="unknown backend.*CUDA"):
        A.parse_backends("triton,CUDA")


def _driver():
    import experiments.audit.replicate_h200 as mod

    return mod


def test_replication_driver_slices_a_triton_only_folder(tmp_path):
    """replicate_h200.py --slice N --backends triton: the slice folder holds only the Triton kernels (the
    corpus manifest's backend_detected), none of which needs an extension build."""
    kb = tmp_path / "problems" / "KernelBench" / "level1"
    kb.mkdir(parents=True)
    lb = tmp_path / "run"
    lb.mkdir()
    backends = ["cuda", "triton", "pytorch", "triton"]
    with open(lb / "manifest.jsonl", "w") as fh:
        for p, b in enumerate(backends, start=1):
            (kb / f"{p}_Op.py").write_text(REF)
            (lb / f"level_1_problem_{p}_sample_0_kernel.py").write_text(CAND)
            fh.write(json.dumps({"id": f"level_1_problem_{p}_sample_0", "backend_detected": b}) + "\n")
    drv = _driver()
    out = tmp_path / "slice"
    ids = drv.slice_run(lb, str(tmp_path / "problems"), out, 10, set(), ("triton",))
    assert sorted(ids) == ["level_1_problem_2_sample_0", "level_1_problem_4_sample_0"]
    assert sorted(f.name for f in out.iterdir()) == [f"{i}_kernel.py" for i in sorted(ids)]
    assert drv.slice_run(lb, str(tmp_path / "problems"), tmp_path / "s2", 10, {ids[0]}, ("triton",)) == ids[1:]


def test_replication_driver_refuses_an_unknown_backend_before_any_step(tmp_path, capsys):
    import pytest

    drv = _driver()
    base = ["--run", str(tmp_path / "r"), "--kb", "kb", "--raw", "raw.json", "--slice", "5"]
    with pytest.raises(SystemExit) as exc:
        drv.main(base + ["--backends", "triton,tritonn"])
    assert exc.value.code == 2 and "tritonn" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        drv.main(base[:-2] + ["--backends", "triton"])  # without --slice it would select nothing
    assert "--slice" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()  # refused before the run folder or any step
