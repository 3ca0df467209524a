"""The latency benchmark's CPU-side parts: deterministic kernel selection, the pairs folder, the summary."""

from __future__ import annotations

from lethe.audit import latency as L

REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"


def _kb(tmp_path):
    kb = tmp_path / "KernelBench" / "level1"
    kb.mkdir(parents=True)
    for p in range(1, 6):
        (kb / f"{p}_Op.py").write_text(REF)
    run = tmp_path / "run"
    run.mkdir()
    for p in range(1, 6):
        for s in range(2):
            (run / f"level_1_problem_{p}_sample_{s}_kernel.py").write_text(f"# load_inline {p} {s}\nModelNew = 1\n")
    return tmp_path, run


def test_selection_is_deterministic_and_bounded(tmp_path):
    kb, run = _kb(tmp_path)
    a = L.cuda_items(str(run), str(kb), 4)
    b = L.cuda_items(str(run), str(kb), 4)
    assert [x["id"] for x in a] == [x["id"] for x in b] and len(a) == 4
    assert all(x["kind"] == "cuda" for x in a)
    assert len(L.cuda_items(str(run), str(kb), 4, levels=(2,))) == 0


def test_pairs_folder_and_summary(tmp_path):
    kb, run = _kb(tmp_path)
    items = L.cuda_items(str(run), str(kb), 3)
    pairs = L._pairs_dir(items, tmp_path / "pairs")
    assert sorted(p.name for p in pairs.iterdir()) == sorted(x["id"] for x in items)
    doc = {"kernels": {
        "a": {"kind": "cuda", "cold": {"wall_s": 4.0}, "warm": {"wall_s": 2.0},
              "build": {"cached": False, "build_seconds": 30.0},
              "phases": {"in_process_s": 2.0, "reference_s": 0.5, "candidate_s": 1.0, "grade_s": 0.5}},
        "b": {"kind": "cuda", "cold": {"wall_s": 6.0}, "warm": {"wall_s": None}, "build": {"cached": True}},
        "c": {"kind": "pytorch", "cold": {"wall_s": 3.0}}}}
    s = L.summarise(doc)
    assert s["cuda"]["cold_median_s"] == 5.0 and s["cuda"]["warm_median_s"] == 2.0
    assert s["cuda"]["build_median_s"] == 30.0  # b's build was cached and recorded no time of its own
    assert s["cuda"]["phase_share"]["candidate_s"] == 0.5
    assert s["pytorch"]["n"] == 1 and s["pytorch"]["warm_median_s"] is None


def test_table_renders_medians_and_goals(tmp_path):
    doc = {"provenance": {"gpu": {"gpu": "NVIDIA H200"}, "cpus": 16},
           "kernels": {"a": {"kind": "cuda", "cold": {"wall_s": 7.5}, "warm": {"wall_s": 2.5}}},
           "batch": {"8": {"kernels": 10, "per_kernel_s": 0.9, "wall_s": 9.0}}}
    L.render(doc, str(tmp_path / "t.md"), str(tmp_path / "t.tex"))
    md = (tmp_path / "t.md").read_text()
    assert "7.50" in md and "2.50" in md and "NVIDIA H200" in md and "0.90 s per kernel" in md


def test_cold_and_warm_runs_pass_and_record_the_reference_device(tmp_path, monkeypatch):
    """The benchmark says where the references ran: the option reaches lethe verify, and each run records the
    device its output names (and the fallback reason, when a CUDA reference went to the CPU)."""
    import json as _json
    import subprocess as _sp

    from lethe.audit import latency as L

    seen = {}

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        doc = {"status": "gated", "reference_device": "cpu", "reference_fallback": "reference on CUDA not possible: x"}
        return _sp.CompletedProcess(cmd, 0, stdout=_json.dumps(doc), stderr="")

    monkeypatch.setattr(L.subprocess, "run", fake_run)
    (tmp_path / "k").mkdir()
    out = L._cli_once({"id": "k"}, tmp_path, tmp_path / "cache", 10.0, "cuda")
    i = seen["cmd"].index("--reference-device")
    assert seen["cmd"][i + 1] == "cuda"
    assert out["reference_device"] == "cpu" and out["reference_fallback"].startswith("reference on CUDA")


def test_steps_run_in_the_order_asked_and_a_cut_run_says_where_it_ended(tmp_path, monkeypatch):
    """A device call short of time runs the step it needs first; a run cut short names the step it was in."""
    import json as _json

    import pytest as _pytest

    from lethe.audit import latency as L

    item = {"id": "k", "kind": "pytorch", "reference": "r", "candidate": "c"}
    monkeypatch.setattr(L, "cuda_items", lambda *a: [])
    monkeypatch.setattr(L, "torch_items", lambda *a: [dict(item)])
    monkeypatch.setattr(L, "_pairs_dir", lambda items, path: path)
    order = []

    def fake_cli(it, pairs, cache, timeout_s, reference_device):
        order.append(len(order))
        if len(order) == 3:
            raise RuntimeError("the device call's limit")
        return {"wall_s": 1.0, "rc": 0, "status": "gated"}

    monkeypatch.setattr(L, "_cli_once", fake_cli)
    out = tmp_path / "lat.json"
    doc = L.run(str(out), lb_dir="x", kb_root="x", kb_src="x", steps=("warm", "cold"))
    assert doc["status"] == "complete" and list(doc["kernels"]["k"]) == ["kind", "warm", "cold"]
    with _pytest.raises(RuntimeError):
        L.run(str(out), lb_dir="x", kb_root="x", kb_src="x", steps=("cold", "warm"))
    saved = _json.loads(out.read_text())
    assert saved["status"].startswith("partial: ended during the cold step (0 of 2")
    with _pytest.raises(ValueError, match="unknown latency step"):
        L.run(str(out), lb_dir="x", kb_root="x", kb_src="x", steps=("cold", "phase"))
