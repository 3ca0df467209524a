"""`lethe serve` and `lethe verify --server`: same answer as verifying locally, peer-uid refusal, stale socket,
idle exit, concurrent clients, SIGTERM.

The fast tests run a Server in a thread of the test process with the sandbox routed through the in-process
runner (trusted fixtures only); the slow one starts the real server from the `lethe` entry point and compares
red-team members under the three profiles with the local path.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from lethe import cli
from lethe import server as S
from lethe.verifier import fixtures as K
from lethe.verifier import records

REPO = Path(__file__).resolve().parents[1]


def _short_dir() -> Path:
    # AF_UNIX paths are limited to 107 bytes; pytest's tmp_path can be longer. mkdtemp makes it 0700.
    return Path(tempfile.mkdtemp(prefix="lethe-srv-", dir="/tmp"))


@pytest.fixture
def sock_dir():
    d = _short_dir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def served(sock_dir, local_sandbox, monkeypatch):
    """A server on a fresh socket, running in a thread; LETHE_SERVER points `lethe verify` at it."""
    srv = S.Server(sock_dir / "s.sock", idle_exit_s=120)
    assert srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    monkeypatch.setenv("LETHE_SERVER", str(srv.path))
    yield srv
    srv.stop()
    t.join(20)
    assert not t.is_alive()


def _no_wall_clock_json(text: str) -> dict:
    return {k: v for k, v in json.loads(text).items() if k not in records.WALL_CLOCK_FIELDS}


def _no_wall_clock_human(text: str) -> str:
    first, _, rest = text.partition("\n")
    return re.sub(r"\d+\.\ds$", "<s>", first) + "\n" + rest


def _both(argv, capsys, monkeypatch):
    """Run `lethe verify argv` through the server and locally: ((code, out, err) server, (code, out, err) local)."""
    got = []
    for env in ("served", None):
        if env is None:
            monkeypatch.delenv("LETHE_SERVER")
        code = cli.main(["verify", *argv])
        cap = capsys.readouterr()
        # The in-process runner writes the reference's phase notes on this process's stderr (a real sandbox
        # keeps them in the child's), and only when the reference is not cached yet: not part of the answer.
        err = "".join(ln for ln in cap.err.splitlines(True) if not ln.startswith("lethe-reference-phase:"))
        got.append((code, cap.out, err))
    return got


@pytest.mark.parametrize("cand, code", [(K.as_candidate(K.SCALE_REF), 0), (K.SCALE_DOUBLE, 1)])
def test_server_answers_what_local_prints(served, files, tmp_path, capsys, monkeypatch, cand, code):
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", cand)
    (sc, so, se), (lc, lo, le) = _both([ref, cand, "--device", "cpu", "--json"], capsys, monkeypatch)
    assert (sc, se) == (lc, le) == (code, "")
    assert _no_wall_clock_json(so) == _no_wall_clock_json(lo)
    monkeypatch.setenv("LETHE_SERVER", str(served.path))
    (sc, so, se), (lc, lo, le) = _both([ref, cand, "--device", "cpu"], capsys, monkeypatch)
    assert (sc, se) == (lc, le) == (code, "")
    assert _no_wall_clock_human(so) == _no_wall_clock_human(lo) and "verdict:" in so


def test_server_json_carries_the_local_causes(served, capsys, monkeypatch):
    """A red-team member with one narrow accumulator behind many failed gates: the server's `--json`, causes
    included, is the local one."""
    d = REPO / "data" / "red_team" / "ord03_sequential_rowsum"
    (sc, so, se), (lc, lo, le) = _both([str(d / "ref.py"), str(d / "cand.py"), "--device", "cpu", "--json"],
                                       capsys, monkeypatch)
    assert (sc, se) == (lc, le) == (1, "")
    srv, loc = _no_wall_clock_json(so), _no_wall_clock_json(lo)
    assert srv == loc and [c["cause"] for c in srv["causes"]] == ["narrow_accumulator"]
    assert srv["causes"][0]["gates"] == sorted(srv["failed_gates"])


def test_rows_written_by_the_client_equal_local_rows(served, files, tmp_path, capsys, monkeypatch):
    ref, cand = files("ref.py", K.SUM_REF), files("cand.py", K.SUM_SEQUENTIAL)
    srv_out, loc_out = str(tmp_path / "s.parquet"), str(tmp_path / "l.parquet")
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--seed", "3", "--out", srv_out]) == 1
    monkeypatch.delenv("LETHE_SERVER")
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--seed", "3", "--out", loc_out]) == 1
    (s_row,), (l_row,) = records.read_rows(srv_out), records.read_rows(loc_out)
    assert records.deterministic_view(s_row) == records.deterministic_view(l_row)
    assert s_row["gates"]["ORD-03"]["status"] == "fail"


def test_usage_errors_are_the_local_ones(served, files, tmp_path, capsys, monkeypatch):
    """A missing file is reported by the client (nothing is sent); an unknown gate by the server: both as
    the local path reports them, exit 2."""
    calls = []
    real = cli.verify_sources
    monkeypatch.setattr(cli, "verify_sources", lambda *a: calls.append(1) or real(*a))
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.as_candidate(K.SCALE_REF))
    missing = str(tmp_path / "nope.py")
    (sc, so, se), (lc, lo, le) = _both([ref, missing], capsys, monkeypatch)
    assert (sc, so, se) == (lc, lo, le) and sc == 2 and "not found" in se and calls == []
    monkeypatch.setenv("LETHE_SERVER", str(served.path))
    (sc, so, se), (lc, lo, le) = _both([ref, cand, "--gates", "CMP-01,XYZ-9"], capsys, monkeypatch)
    assert (sc, so, se) == (lc, lo, le) and sc == 2 and "XYZ-9" in se and len(calls) == 2


def test_peer_with_another_uid_is_refused(served, files, capsys, monkeypatch):
    """The server compares SO_PEERCRED's uid with its own; here it believes it runs as another uid, so this
    process is a stranger to it: refused before the request is read, and the client exits 4 in one line."""
    ran = []
    monkeypatch.setattr(cli, "verify_sources", lambda *a: ran.append(a))
    monkeypatch.setattr(S, "server_uid", lambda: os.getuid() + 1)
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.as_candidate(K.SCALE_REF))
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--json"]) == 4
    cap = capsys.readouterr()
    assert cap.out == "" and len(cap.err.splitlines()) == 1 and "refused: peer uid" in cap.err, cap.err
    assert ran == []


@pytest.mark.skipif(os.geteuid() != 0, reason="changing uid needs root")
def test_real_other_uid_is_stopped_by_the_directory_and_by_the_uid_check(served):
    """A process of another uid cannot reach the socket through its 0700 directory; with the directory and
    the socket opened up (as a misconfiguration would), the peer-uid check still refuses it."""

    def as_nobody() -> str:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # child: become uid 65534, connect, report what happened
            os.close(r)
            try:
                os.setgid(65534)
                os.setuid(65534)
                # A raw client: S.request would itself refuse to talk to a server of another uid.
                sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                sock.settimeout(10)
                try:
                    sock.connect(str(served.path))
                    try:
                        S.send_msg(sock, {"op": "status"})
                    except BrokenPipeError:
                        pass  # refused before the request was read; the answer is still there
                    msg = f"answered {S.recv_msg(sock)}"
                except PermissionError as exc:
                    msg = f"PermissionError {exc}"
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                msg = f"child failed: {exc!r}"
            os.write(w, msg.encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r, "rb") as fh:
            out = fh.read().decode()
        os.waitpid(pid, 0)
        return out

    assert as_nobody().startswith("PermissionError")
    os.chmod(served.path.parent, 0o711)
    os.chmod(served.path, 0o666)
    got = as_nobody()
    assert "refused: peer uid 65534" in got, got
    assert S.request(served.path, {"op": "status"}, response_timeout_s=10)["uid"] == os.getuid()


def test_forget_drops_the_servers_reference_results_between_verifications(served, monkeypatch):
    """The latency benchmark's served cold runs: after ``forget`` the server holds no reference result in
    memory (the disk cache is the caller's to empty), and it keeps answering."""
    from lethe.verifier import api

    memo = {"a": ("ok", {}, {}, None), "b": ("ok", {}, {}, None)}
    monkeypatch.setattr(api, "_REF_CACHE", memo)
    assert S.request(served.path, {"op": "forget"}, response_timeout_s=10) == {"forgot": 2}
    assert memo == {}
    assert S.request(served.path, {"op": "forget"}, response_timeout_s=10) == {"forgot": 0}
    assert S.request(served.path, {"op": "status"}, response_timeout_s=10)["pid"] == os.getpid()


def test_stale_socket_is_replaced_and_a_live_server_is_not(sock_dir):
    path = sock_dir / "s.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(path))
    dead.close()  # the file stays, nobody listens: what a killed server leaves behind
    with pytest.raises(S.ServerError, match="no server"):
        S.request(path, {"op": "status"}, response_timeout_s=5)
    srv = S.Server(path, idle_exit_s=120)
    assert srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        assert S.request(path, {"op": "status"}, response_timeout_s=5)["pid"] == os.getpid()
        assert not S.Server(path).bind()  # the lock is held: a second server leaves the live one alone
        assert S.request(path, {"op": "status"}, response_timeout_s=5)["pid"] == os.getpid()
        assert path.with_name("s.sock.lock").read_text().strip() == str(os.getpid())
    finally:
        srv.stop()
        t.join(20)
    assert not path.exists()


def test_socket_directory_must_be_private(sock_dir, files, capsys, monkeypatch):
    """Neither the server nor a client uses a socket in a directory others can enter or write: a client would
    send its sources to whoever placed a server there (and start none of its own)."""
    os.chmod(sock_dir, 0o755)
    with pytest.raises(S.ServerError, match="0700"):
        S.Server(sock_dir / "s.sock").bind()
    started = []
    monkeypatch.setattr(S, "start_detached", lambda path: started.append(path))
    monkeypatch.setenv("LETHE_SERVER", str(sock_dir / "s.sock"))
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.SCALE_DOUBLE)
    assert cli.main(["verify", ref, cand, "--json"]) == 4
    cap = capsys.readouterr()
    assert cap.out == "" and "0700" in cap.err and len(cap.err.splitlines()) == 1 and started == []


def test_idle_exit_waits_for_the_request_in_progress(sock_dir, monkeypatch):
    """The server leaves after idle_exit_s without requests, but not while one is being answered."""

    def slow(args, ref_src, cand_src):
        time.sleep(1.0)
        return 0, "done\n", "", None

    monkeypatch.setattr(cli, "verify_sources", slow)
    srv = S.Server(sock_dir / "s.sock", idle_exit_s=0.3)
    assert srv.bind()
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    ans = S.request(srv.path, {"op": "verify", "args": {}, "ref_src": "", "cand_src": ""}, response_timeout_s=10)
    assert ans["stdout"] == "done\n"
    t.join(10)
    assert not t.is_alive() and not srv.path.exists()
    assert S.Server(srv.path).bind()  # the lock was released


def test_two_concurrent_clients_both_get_their_own_answer(served, files):
    ref = files("ref.py", K.SCALE_REF)
    cands = {"good": (files("good.py", K.as_candidate(K.SCALE_REF)), 0),
             "bad": (files("bad.py", K.SCALE_DOUBLE), 1)}
    parser = cli.build_parser()
    barrier, answers, errors = threading.Barrier(len(cands)), {}, []

    def client(name, cand):
        args = parser.parse_args(["verify", ref, cand, "--device", "cpu", "--json", "--id", name])
        try:
            barrier.wait()
            answers[name] = S.verify_via_server(served.path, args, Path(ref).read_text(), Path(cand).read_text())
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=client, args=(n, c)) for n, (c, _) in cands.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    for name, (_cand, code) in cands.items():
        ans = answers[name]
        assert ans["code"] == code and ans["row"]["id"] == name and json.loads(ans["stdout"])["id"] == name


def test_unstartable_server_falls_back_to_local_with_one_notice(sock_dir, files, local_sandbox, capsys,
                                                                monkeypatch):
    monkeypatch.setenv("LETHE_SERVER", str(sock_dir / "s.sock"))
    monkeypatch.setattr(S, "start_detached", lambda path: subprocess.Popen(["false"]))
    ref, cand = files("ref.py", K.SCALE_REF), files("cand.py", K.SCALE_DOUBLE)
    assert cli.main(["verify", ref, cand, "--device", "cpu", "--json"]) == 1
    cap = capsys.readouterr()
    assert json.loads(cap.out)["verdict"] == "fail"
    assert len(cap.err.splitlines()) == 1 and "verifying without the server" in cap.err, cap.err


# ------------------------------------------------------------------------------------------- end to end

RED_TEAM = ("cmp01_softmax_no_max", "ord03_sequential_rowsum", "exc02_scale_flush_triton")


def _lethe(*args, env=None, timeout=600):
    exe = Path(sys.executable).with_name("lethe")
    full = dict(os.environ, OMP_NUM_THREADS="1")
    full.pop("LETHE_SERVER", None)
    full.update(env or {})
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=timeout, env=full)


def _children(pid: int) -> list[int]:
    kids = []
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as fh:
            kids += [int(k) for k in fh.read().split()]
    return kids


@pytest.mark.slow
def test_real_server_rows_match_local_on_red_team_and_sigterm_reaps(sock_dir, tmp_path):
    """The first `--server` call starts a detached server; for red-team members under the three profiles its
    exit codes, JSON (less wall-clock fields) and rows (deterministic_view) equal the local path's. SIGTERM
    then ends the server, its socket and its zygotes."""
    from lethe.verifier.profiles import PROFILES

    sock = sock_dir / "s.sock"
    local_env = {"LETHE_SERVER": "0"}
    try:
        for name in RED_TEAM:
            d = REPO / "data" / "red_team" / name
            for profile in sorted(PROFILES):
                common = [str(d / "ref.py"), str(d / "cand.py"), "--device", "cpu", "--json", "--profile", profile]
                s_out, l_out = tmp_path / f"{name}-{profile}-s.parquet", tmp_path / f"{name}-{profile}-l.parquet"
                srv = _lethe("verify", *common, "--out", str(s_out), env={"LETHE_SERVER": str(sock)})
                loc = _lethe("verify", *common, "--out", str(l_out), env=local_env)
                assert (srv.returncode, srv.stderr) == (loc.returncode, loc.stderr), (name, profile, srv.stderr)
                assert srv.returncode in (0, 1), loc.stderr
                assert _no_wall_clock_json(srv.stdout) == _no_wall_clock_json(loc.stdout), (name, profile)
                (s_row,), (l_row,) = records.read_rows(s_out), records.read_rows(l_out)
                assert records.deterministic_view(s_row) == records.deterministic_view(l_row), (name, profile)
        status = S.request(sock, {"op": "status"}, response_timeout_s=10)
        pid = status["pid"]
        assert status["dumpable"] == 0 and status["uid"] == os.getuid()
        assert sock.with_name("s.sock.lock").read_text().strip() == str(pid)
        zygotes = _children(pid)
        assert zygotes, "the server keeps its zygotes"
    finally:
        lock = sock.with_name("s.sock.lock")
        if lock.exists() and lock.read_text().strip():
            os.kill(int(lock.read_text()), signal.SIGTERM)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and \
            "zombie" not in Path(f"/proc/{pid}/status").read_text():
        time.sleep(0.1)
    assert not sock.exists()
    for z in zygotes:
        assert not Path(f"/proc/{z}").exists() or "zombie" in Path(f"/proc/{z}/status").read_text()
