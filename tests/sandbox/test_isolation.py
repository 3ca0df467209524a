"""The pid namespace of an isolated child (lethe.sandbox.isolation): what the candidate can see of the machine's
processes, that its exit status survives the helper processes the namespace needs, and that the namespace's end
kills everything in it. Cheap children (numpy only), in both start modes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from lethe.sandbox import isolation, run_isolated
from lethe.sandbox.testing import survivors

FAST = {"preload": ("numpy",), "timeout_s": 10, "memory_mb": 256}
ISOLATED = isolation.unavailable_reason() is None and isolation.mode() != "off"
pytestmark = pytest.mark.skipif(not ISOLATED, reason=f"no OS isolation here: {isolation.unavailable_reason()}")
SRC = str(Path(isolation.__file__).resolve().parents[2])


def _own_pidns() -> str:
    return os.readlink("/proc/self/ns/pid")


@pytest.mark.parametrize("start", ["spawn", "zygote"])
def test_candidate_sees_only_its_own_namespace(start):
    from lethe.sandbox import zygote as Z

    if start == "zygote":
        # Started first, so that its pid is one of those the candidate looks for.
        assert run_isolated("lethe.sandbox.testing:echo", start=start, **FAST).status == "ok"
    outside = [os.getpid()] + [z.proc.pid for z in Z.live_zygotes()]
    res = run_isolated("lethe.sandbox.testing:pid_view", payload={"look_for": outside}, start=start, **FAST)
    assert res.status == "ok", res.detail
    assert (res.start, res.isolation, res.tamper_proof) == (start, isolation.FULL, True)
    view = res.result
    assert view["pidns"] != _own_pidns()
    # The namespace holds its init (pid 1) and the candidate's process, nothing else; the candidate's parent is
    # outside it, which the namespace numbers 0.
    assert (view["pid"], view["ppid"], view["listed"]) == (2, 0, [1, 2]), view
    for pid in outside:
        assert view["found"][str(pid)] == {"in_proc": False, "signal_0": "ProcessLookupError"}, (pid, view)


# (payload of lethe.sandbox.testing:die, status, returncode, detail): what each ending was classified as before the
# candidate ran in a pid namespace.
ENDINGS = [
    ({"how": "exit", "code": 5}, "exit", 5, "exited with code 5 before returning a result"),
    ({"how": "exit", "code": 0}, "exit", 0, "exited with code 0 before returning a result"),
    ({"how": "signal", "sig": int(signal.SIGKILL)}, "crash", -signal.SIGKILL, "killed by SIGKILL"),
    ({"how": "signal", "sig": int(signal.SIGTERM)}, "crash", -signal.SIGTERM, "killed by SIGTERM"),
    ({"how": "abort"}, "crash", -signal.SIGABRT, "killed by SIGABRT"),
    ({"how": "segv"}, "crash", -signal.SIGSEGV, "killed by SIGSEGV"),
]


@pytest.mark.parametrize("start", ["spawn", "zygote"])
@pytest.mark.parametrize("ending", ENDINGS, ids=lambda e: "-".join(str(v) for v in e[0].values()))
def test_exit_codes_and_signal_deaths_are_relayed(start, ending):
    payload, status, rc, detail = ending
    res = run_isolated("lethe.sandbox.testing:die", payload=payload, start=start, **FAST)
    assert res.isolation == isolation.FULL
    assert (res.status, res.returncode) == (status, rc), (res.status, res.returncode, res.detail)
    assert detail in res.detail, res.detail


# A process that enters the run's pid namespace as isolation.enter does (a private mount table first), with the
# namespace's init that argv[2] names ("cat", or "fork" where there is no cat), then lets a double-forked daemon
# escape its process tree and exits with the code it was given. /proc is left as it was, so the daemon can name
# itself in the parent's numbers, and the init's name can be read through the outer process.
_DAEMON = textwrap.dedent("""
    import os, sys, time
    from lethe.sandbox import isolation as I
    if sys.argv[2] == "fork":
        access = os.access
        I.os.access = lambda p, mode: not p.endswith("/cat") and access(p, mode)
    libc = I._c()
    I._check(libc.unshare(I._CLONE_NEWNS), "unshare")
    I._mount(None, "/", None, I._MS_REC | I._MS_PRIVATE)
    assert I._enter_pid_namespace(libc) is None
    outer = open("/proc/self/stat").read().rsplit(")", 1)[1].split()[1]
    init = [k for k in open(f"/proc/{outer}/task/{outer}/children").read().split() if k != os.readlink("/proc/self")]
    print("INIT", *[open(f"/proc/{k}/comm").read().strip() for k in init], flush=True)
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, f"{os.readlink('/proc/self')} {os.readlink('/proc/self/ns/pid')}".encode())
            time.sleep(60)
            os._exit(0)
        os._exit(0)
    os.close(w)
    print("DAEMON", os.read(r, 200).decode(), flush=True)
    os._exit(int(sys.argv[1]))
""")


@pytest.mark.parametrize("init", ["cat", "fork"])
def test_double_forked_daemon_dies_with_the_namespace(init):
    proc = subprocess.run([sys.executable, "-c", _DAEMON, "7", init], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, PYTHONPATH=SRC))
    assert proc.returncode == 7, proc.stderr
    (names,) = [ln.split()[1:] for ln in proc.stdout.splitlines() if ln.startswith("INIT")]
    assert names == (["cat"] if init == "cat" else [Path(sys.executable).name[:15]]), names
    _, pid, pidns = next(ln for ln in proc.stdout.splitlines() if ln.startswith("DAEMON ")).split()
    assert pidns != _own_pidns()
    # No grace period and no sweep (the daemon is root here, sleeping for a minute): the outer process ends only
    # after the namespace's init, whose exit the kernel completes only once everything in the namespace is dead.
    assert survivors([int(pid)]) == []


def _enter_in_child(script: str, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` (which calls isolation.enter with a leased uid and a run directory, then prints its report
    as the last line) in a fresh interpreter; return that report."""
    lease = isolation.UidLease()
    uid = lease.acquire()
    run_dir = Path(tempfile.mkdtemp(prefix="lethe-pidns-test-"))
    try:
        isolation.give_to(uid, [run_dir])
        proc = subprocess.run([sys.executable, "-c", script, str(uid), str(run_dir)], capture_output=True,
                              text=True, timeout=60, cwd=run_dir,
                              env=dict(os.environ, PYTHONPATH=SRC, **(env or {})))
    finally:
        lease.release()
        isolation.give_back(run_dir, 0, 0)
        subprocess.run(["rm", "-rf", str(run_dir)], check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


# isolation.enter in a process whose kernel refuses CLONE_NEWPID (simulated) but grants everything else.
_REFUSED = textwrap.dedent("""
    import ctypes, errno, json, os, sys
    from lethe.sandbox import isolation as I
    real = I._c()
    class Refusing:
        def __getattr__(self, name):
            return getattr(real, name)
        def unshare(self, flags):
            if flags & I._CLONE_NEWPID:
                ctypes.set_errno(errno.EPERM)
                return -1
            return real.unshare(flags)
    I._libc = Refusing()
    report = I.enter(int(sys.argv[1]), [sys.argv[2]])
    report["pidns"] = os.readlink("/proc/self/ns/pid")
    report["pid"] = os.getpid()
    print(json.dumps(report), flush=True)
""")


def test_a_refused_pid_namespace_degrades_and_says_so():
    report = _enter_in_child(_REFUSED)
    # Everything else applied: tamper-proof, with the sentence that does not claim a pid namespace.
    assert (report["isolation"], report["tamper_proof"]) == (isolation.FULL_WITHOUT_PID_NAMESPACE, True), report
    assert "pid namespace" not in report["applied"] and "CLONE_NEWPID" in report["pid_namespace"], report
    # Nothing was forked: the process that isolated itself is the one that goes on, in our namespace.
    assert report["pidns"] == _own_pidns() and report["outer_pid"] == report["pid"], report


_SWITCHED_OFF = textwrap.dedent("""
    import json, os, sys
    from lethe.sandbox import isolation as I
    report = I.enter(int(sys.argv[1]), [sys.argv[2]])
    report["pidns"] = os.readlink("/proc/self/ns/pid")
    report["pid"] = os.getpid()
    print(json.dumps(report), flush=True)
""")


def test_the_pid_namespace_can_be_switched_off_and_the_row_says_so(monkeypatch):
    monkeypatch.setenv(isolation.PID_NAMESPACE_ENV, "off")
    assert isolation.make_pid_namespace() is None  # the zygote's path: no namespace made, nothing unshared
    monkeypatch.delenv(isolation.PID_NAMESPACE_ENV)
    report = _enter_in_child(_SWITCHED_OFF, {isolation.PID_NAMESPACE_ENV: "off"})
    assert (report["isolation"], report["tamper_proof"]) == (isolation.FULL_WITHOUT_PID_NAMESPACE, True), report
    assert "switched off" in report["pid_namespace"] and report["pidns"] == _own_pidns(), report
