"""The latency benchmark's CPU-side parts: deterministic kernel selection, the pairs folder, the summary."""

from __future__ import annotations

import pytest

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


# ---------------------------------------------------------------------------------------------- served step


class _FakeServer:
    """Stands in for RunServer: pids answered on its socket in turn, and what the step asked of it."""

    def __init__(self, pids=(100,)):
        self.pids = list(pids)
        self.sock = "/nonexistent/s.sock"
        self.calls = []
        self.starts = [{"pid": 100, "wall_s": 3.5, "ok": True}]

    def client_env(self, timeout_s):
        return {"LETHE_SERVER": self.sock, "LETHE_SERVER_TIMEOUT": str(timeout_s)}

    def pid(self):
        return self.pids.pop(0) if len(self.pids) > 1 else self.pids[0]

    def ensure(self):
        self.calls.append("ensure")
        return True

    def forget(self):
        self.calls.append("forget")
        return True

    def start(self):
        self.calls.append("start")
        return self.starts[0]

    def log_tail(self):
        return ""

    def close(self):
        self.calls.append("close")


def _answer(status="pass", **extra):
    import json as _json

    return _json.dumps({"id": "k", "status": status, "seconds": 1.25, "reference_device": "cuda", **extra})


def test_served_once_runs_the_client_on_the_run_socket_and_says_where_the_answer_came_from(tmp_path, monkeypatch):
    import subprocess as _sp

    from lethe.cli import SERVER_FALLBACK

    seen = []
    replies = iter([(0, _answer(), ""), (0, _answer(), f"lethe verify: no server on x; {SERVER_FALLBACK}\n"),
                    (4, "", "lethe verify: the server on x answered: refused\n"), "timeout"])

    def fake_run(cmd, **kw):
        seen.append((cmd, kw["env"]))
        r = next(replies)
        if r == "timeout":
            raise _sp.TimeoutExpired(cmd, kw["timeout"])
        return _sp.CompletedProcess(cmd, r[0], stdout=r[1], stderr=r[2])

    monkeypatch.setattr(L.subprocess, "run", fake_run)
    it = {"id": "k"}
    got = [L._served_once(it, tmp_path, _FakeServer(), 10.0, "cuda") for _ in range(4)]
    cmd, env = seen[0]
    assert "--server" in cmd and cmd[cmd.index("--device") + 1] == "cuda"
    assert cmd[cmd.index("--reference-device") + 1] == "cuda" and cmd[cmd.index("--id") + 1] == "k"
    assert env["LETHE_SERVER"] == "/nonexistent/s.sock" and env["LETHE_SERVER_TIMEOUT"] == "10.0"
    assert [g["via"] for g in got] == ["server", "local fallback", "no answer", "timeout"]
    assert [g["from_server"] for g in got] == [True, False, False, False]
    assert got[1]["fallback"] and got[1]["status"] == "pass"  # a verdict, but the client's own: not counted
    assert "refused" in got[2]["stderr_tail"] and got[3]["wall_s"] is None
    # The same answer computed elsewhere has the same digest once its wall-clock fields are dropped.
    assert got[0]["answer_sha256"] == L._answer_digest({"id": "k", "status": "pass", "reference_device": "cuda"})
    assert all("_stderr" not in g for g in got)


def test_served_once_does_not_count_an_answer_when_the_server_changed(tmp_path, monkeypatch):
    import subprocess as _sp

    monkeypatch.setattr(L.subprocess, "run", lambda cmd, **kw: _sp.CompletedProcess(cmd, 0, _answer(), ""))
    other = L._served_once({"id": "k"}, tmp_path, _FakeServer(pids=(100, 200)), 10.0)
    gone = L._served_once({"id": "k"}, tmp_path, _FakeServer(pids=(100, None)), 10.0)
    assert (other["via"], gone["via"]) == ("other server", "server exited")
    assert not other["from_server"] and not gone["from_server"]


def _run_with_fakes(tmp_path, monkeypatch, served_replies, steps=("cold", "served"), server=None):
    """L.run over two pytorch kernels with the processes faked: the local cold answers digest "A"; the
    served ones come from ``served_replies`` (one list per kernel: served cold, served warm)."""
    items = [{"id": f"k{i}", "kind": "pytorch", "reference": "r", "candidate": "c"} for i in range(2)]
    monkeypatch.setattr(L, "cuda_items", lambda *a: [])
    monkeypatch.setattr(L, "torch_items", lambda *a: [dict(it) for it in items])
    monkeypatch.setattr(L, "_pairs_dir", lambda items, path: path)
    monkeypatch.setattr(L, "_cli_once", lambda *a: {"wall_s": 4.0, "rc": 0, "status": "pass", "answer_sha256": "A"})
    server = server or _FakeServer()
    monkeypatch.setattr(L, "RunServer", lambda *a, **kw: server)
    replies = iter([r for per_kernel in served_replies for r in per_kernel])

    def fake_served(it, pairs, srv, timeout_s, reference_device):
        assert srv is server
        r = next(replies)
        if isinstance(r, Exception):
            raise r
        return dict(r)

    monkeypatch.setattr(L, "_served_once", fake_served)
    doc = L.run(str(tmp_path / "lat.json"), lb_dir="x", kb_root="x", kb_src="x", steps=steps,
                reference_device="cuda")
    return doc, server


def _srv(wall, via="server", digest="A"):
    return {"wall_s": wall, "rc": 0, "status": "pass", "via": via, "from_server": via == "server",
            "fallback": via == "local fallback", "answer_sha256": digest}


def test_served_step_drops_the_references_before_each_cold_run_and_counts_only_server_answers(tmp_path, monkeypatch):
    doc, server = _run_with_fakes(tmp_path, monkeypatch, [
        [_srv(3.0), _srv(1.0)],
        [_srv(9.0, via="local fallback"), _srv(2.0, digest="B")]])
    k0, k1 = doc["kernels"]["k0"], doc["kernels"]["k1"]
    assert k0["served_cold"]["reference_cache_cleared"] is True and "reference_cache_cleared" not in k0["served_warm"]
    assert server.calls == ["ensure", "forget", "ensure", "ensure", "forget", "ensure", "close"]
    assert doc["provenance"]["reference_device"] == "cuda"
    assert k0["served_row_equal"] is True and k1["served_row_equal"] is False  # k1's warm answer differs
    s = doc["summary"]["pytorch"]
    assert s["served_cold_median_s"] == 3.0 and s["served_cold_n"] == 1  # the fallback's 9 s is not a server's
    assert s["served_cold_excluded"] == {"local fallback": 1}
    assert s["served_warm_median_s"] == 1.5 and s["served_warm_n"] == 2 and s["served_warm_excluded"] == {}
    assert s["served_row_equal"] == {"compared": 2, "equal": 1}
    assert s["cold_n"] == 2 and s["cold_median_s"] == 4.0
    assert doc["served"]["starts"][0]["ok"] and "row_check" in doc["served"]


def test_a_cut_served_step_stops_its_server_and_keeps_what_it_finished(tmp_path, monkeypatch):
    import json as _json

    import pytest as _pytest

    server = _FakeServer()
    with _pytest.raises(RuntimeError):
        _run_with_fakes(tmp_path, monkeypatch, [[_srv(3.0), RuntimeError("the device call's limit")]],
                        server=server)
    assert server.calls[-1] == "close"
    saved = _json.loads((tmp_path / "lat.json").read_text())
    assert saved["status"].startswith("partial: ended during the served step (1 of 2")
    assert saved["kernels"]["k0"]["served_cold"]["wall_s"] == 3.0


def test_a_server_that_cannot_start_is_recorded_not_measured(tmp_path, monkeypatch):
    server = _FakeServer()
    server.ensure = lambda: False
    monkeypatch.setattr(L, "RunServer", lambda *a, **kw: server)
    monkeypatch.setattr(L, "cuda_items", lambda *a: [])
    monkeypatch.setattr(L, "torch_items", lambda *a: [{"id": "k", "kind": "cuda", "reference": "r",
                                                       "candidate": "c"}])
    monkeypatch.setattr(L, "_pairs_dir", lambda items, path: path)
    doc = L.run(str(tmp_path / "lat.json"), lb_dir="x", kb_root="x", kb_src="x", steps=("served",))
    assert doc["kernels"]["k"]["served_cold"]["via"] == "no server"
    s = doc["summary"]["cuda"]
    assert s["served_cold_median_s"] is None and s["served_cold_excluded"] == {"no server": 1}
    assert s["served_row_equal"] == {"compared": 0, "equal": 0}


def test_served_cold_without_dropped_references_is_not_a_cold_measurement():
    rec = dict(_srv(1.0), reference_cache_cleared=False)
    assert L.served_counted("served_cold", rec) == "reference cache not cleared"
    assert L.served_counted("served_warm", rec) is None
    assert L.served_counted("served_warm", None) == "not run"


def test_table_shows_served_columns_counts_and_what_was_left_out(tmp_path):
    doc = {"provenance": {"gpu": {"gpu": "NVIDIA H200"}, "cpus": 16},
           "served": {"starts": [{"pid": 1, "wall_s": 12.0, "ok": True}]},
           "kernels": {
               "a": {"kind": "cuda", "cold": {"wall_s": 7.5, "answer_sha256": "A"}, "warm": {"wall_s": 2.5},
                     "served_cold": dict(_srv(3.25), reference_cache_cleared=True),
                     "served_warm": _srv(0.75), "served_row_equal": True},
               "b": {"kind": "cuda", "cold": {"wall_s": 8.5, "answer_sha256": "A"}, "warm": {"wall_s": None},
                     "served_cold": dict(_srv(30.0, via="local fallback"), reference_cache_cleared=True),
                     "served_warm": _srv(0.85), "served_row_equal": True}}}
    rows = L.table_rows(doc)
    assert rows[0]["served_cold"] == 3.25 and rows[0]["served_cold_n"] == 1 and rows[0]["served_warm_n"] == 2
    assert rows[0]["warm_n"] == 1 and rows[0]["cold_n"] == 2
    L.render(doc, str(tmp_path / "t.md"), str(tmp_path / "t.tex"))
    md = (tmp_path / "t.md").read_text()
    assert "served cold s" in md and "served warm s" in md
    assert "| 3.25 (n=1) |" in md and "| 0.80 |" in md and "| 2.50 (n=1) |" in md and "| 8.00 |" in md
    assert "cuda served cold: 1 local fallback" in md
    assert "2 of 2 kernels compared" in md and "12.0 s" in md
    assert "served" in (tmp_path / "t.tex").read_text()


def test_table_of_a_run_without_the_served_step_has_empty_served_cells(tmp_path):
    doc = {"kernels": {"a": {"kind": "pytorch", "cold": {"wall_s": 3.0}}},
           "summary": {"pytorch": {"n": 1, "cold_median_s": 3.0}}}  # a summary written before the counts
    (row,) = L.table_rows(doc)
    assert row["served_cold"] is None and row["served_cold_n"] == 0 and row["cold_n"] == 1
    L.render(doc, str(tmp_path / "t.md"), str(tmp_path / "t.tex"))
    md = (tmp_path / "t.md").read_text()
    assert "served cold:" not in md and "3.00 |" in md


@pytest.mark.slow
def test_run_server_serves_the_same_answer_as_the_local_path_and_leaves_nothing_behind(tmp_path, monkeypatch):
    """The served step's machinery for real, on the CPU: the run's own server in a private directory, a
    served cold answer after the references were dropped, a served warm one, both equal to the local answer
    (less wall-clock fields); closing it ends the server and removes its directory."""
    from lethe.verifier import fixtures as K

    monkeypatch.setattr(L, "DEVICE", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    item = {"id": "toy", "reference": K.SCALE_REF, "candidate": K.SCALE_DOUBLE}
    pairs = L._pairs_dir([item], tmp_path / "pairs")
    server = L.RunServer()
    try:
        start = server.start()
        assert start["ok"], server.log_tail()
        assert server.sock.parent.stat().st_mode & 0o077 == 0
        assert server.forget()
        cold = L._served_once(item, pairs, server, 300.0)
        warm = L._served_once(item, pairs, server, 300.0)
        local = L._cli_once(item, pairs, tmp_path / "cache", 300.0)
        assert cold["via"] == warm["via"] == "server", (cold, warm, server.log_tail())
        assert cold["server_pid"] == start["pid"] and cold["rc"] == warm["rc"] == local["rc"] == 1  # a failing kernel
        assert cold["answer_sha256"] == warm["answer_sha256"] == local["answer_sha256"] is not None
        served_row = {"cold": local, "served_cold": dict(cold, reference_cache_cleared=True), "served_warm": warm}
        assert L.served_row_equal(served_row) is True
    finally:
        server.close()
    assert server.proc.poll() is not None and not server.root.exists()
