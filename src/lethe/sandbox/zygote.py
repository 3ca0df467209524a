"""Zygote start mode: fork each sandboxed child from a long-lived process that has already imported torch.

Spawning ``python -m lethe.sandbox.child`` costs a full interpreter start plus ``import torch`` per run
(about 2 s idle, 10 s and more on a loaded machine). A *zygote* is a trusted helper process, started by the
parent once, that imports the preload (numpy, torch) and then only waits for requests. For each run it
``os.fork()``\\ s: the forked process is a brand-new process whose memory is a copy-on-write image of the
clean zygote, and it runs exactly the child protocol of :mod:`lethe.sandbox.child` (new session, resource
limits, private cwd, the run's environment, result channel + nonce, hold pipe). The zygote never imports or
runs candidate code, and no forked child ever returns to the zygote's loop, so nothing a candidate does can
reach the image the next candidate is forked from.

Why forking is safe here: the zygote never initialises CUDA (it checks ``torch.cuda.is_initialized()`` and
refuses to fork otherwise) and stays single-threaded (checked before every fork), so the forked process
starts from a consistent state and creates its own CUDA context after it has applied the run's
``CUDA_VISIBLE_DEVICES``.

Two halves live here:

* the **server** (:func:`serve`), run as ``python -m lethe.sandbox.child --zygote <ctl-fd> <preload-json>``
  so that ``__main__`` is the same module in both start modes;
* the **client** (:func:`acquire`, :class:`Zygote`, :class:`ZygoteProc`), used by ``lethe.sandbox.runner``.
  A ``ZygoteProc`` offers the part of ``subprocess.Popen`` the runner uses (``pid``, ``stdin``, ``stdout``,
  ``stderr``, ``poll``, ``wait``, ``kill``), so the runner's supervision code is the same in both modes.

Control protocol: a ``SOCK_SEQPACKET`` Unix socket pair (message boundaries kept, file descriptors passed with
``SCM_RIGHTS``). Parent to zygote: ``spawn`` (request id, env, cwd, ``pid_namespace``; five fds: the child's
stdin read end, stdout and stderr write ends, channel write end, hold read end) and ``reap`` (pid). With
``pid_namespace`` (an isolated run) the zygote forks the child as pid 2 of a pid namespace made for it, whose init
it spawned first (``lethe.sandbox.isolation.make_pid_namespace``), and ends that namespace when the child exits. Zygote to parent:
``ready``, ``spawned`` / ``spawn_failed`` (request id), ``exit`` (pid, return code). The zygote reports an
exit with ``waitid(WNOWAIT)`` and reaps only when the parent sends ``reap``, after its cleanup: until then the
child stays a zombie, so its pid (and process group id) cannot be recycled under the parent's kill calls.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_MSG_MAX = 1 << 20
# Variables read once, when the interpreter or a native library (libgomp, MKL, glibc malloc, torch) starts:
# a forked child inherits the zygote's reading of them, so runs whose values differ get a different zygote.
_STARTUP_PREFIXES = ("PYTHON", "OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "MALLOC_", "GLIBC_", "LD_",
                     "NUMPY_", "TORCH_", "PYTORCH_", "SYMPY_", "LC_", "LANG")
# Trusted library modules that a preloaded package imports lazily on first use, imported by the zygote too.
# torch pulls in symbolic_shapes (and with it sympy, about 1.5 s idle and 2.5 s loaded) on the first autograd
# backward, which the verifier's reference runs for every kernel; a spawned child would pay that inside the
# candidate's clock every time. Importing them earlier changes which modules are loaded at ``ready``, not
# what any function computes.
# Not torch._dynamo (which the plan's meta tracing imports): it imports triton, whose settings (TRITON_INTERPRET
# above all) are read at import, and one zygote serves interpreted and compiled runs alike.
WARM_IMPORTS = {"torch": ("torch.fx.experimental.symbolic_shapes",)}
# The verifier's own sandbox entry points (trusted modules of this package, torch-based): a child imports its
# target after ``ready``, on the run's clock, and these cost some 30-40 ms there on every run
# (lethe.verifier.probes and .reference above all). At import they only define functions, classes and
# constants: they start no thread, initialise no CUDA, import no triton and read no environment variable (the
# zygote's ready message reports the first three, tests/sandbox/test_zygote.py checks them), so importing them
# here changes when they are loaded, not what a run computes.
ENTRY_IMPORTS = {"torch": ("lethe.verifier.worker", "lethe.verifier.reference", "lethe.verifier.gates")}
# Per-run paths inside the private run directory (the zygote gets its own); read lazily, so the child's
# environment can simply replace them.
PER_RUN_KEYS = ("HOME", "TMPDIR", "TMP", "TEMP", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR", "TORCHINDUCTOR_CACHE_DIR")
_PR_SET_PDEATHSIG = 1


def startup_signature(env: dict[str, str], preload: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The part of a run's environment that a forked child cannot change after the fact (it was consumed at
    interpreter or library start); two runs may share a zygote only if this is equal."""
    prefixes = _STARTUP_PREFIXES + (("TRITON_",) if "triton" in preload else ())
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(prefixes) and k not in PER_RUN_KEYS))


# ----------------------------------------------------------------------------------------------------------
# Server (runs in the zygote process)
# ----------------------------------------------------------------------------------------------------------


def _task_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:  # pragma: no cover - not Linux
        return 1


def _thread_names() -> list[str]:
    names = []
    try:
        for t in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{t}/comm") as fh:
                names.append(fh.read().strip())
    except OSError:
        pass
    return names


def _settle(limit_s: float) -> int:
    """Thread count once short-lived helper threads (some library imports start one) have ended, waiting up
    to ``limit_s``; forking is only sound with exactly one."""
    deadline = time.monotonic() + limit_s
    n = _task_count()
    while n != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
        n = _task_count()
    return n


def _cuda_initialised() -> bool:
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:  # noqa: BLE001 - a broken torch cannot have initialised CUDA through us
        return False


def serve(ctl_fd: int, preload_json: str) -> None:  # noqa: C901 - one event loop, easier to audit whole
    """Zygote main loop. Never returns in a forked child; returns (and the process exits) when the parent
    closes the control socket."""
    import importlib
    import selectors

    from lethe.sandbox import isolation

    zygote_pid = os.getpid()
    ctl = socket.socket(fileno=ctl_fd)

    def send(msg: dict) -> None:
        ctl.send(json.dumps(msg).encode("utf-8"))

    # The trusted preload, its lazy imports, plus what the child protocol imports before ``ready``.
    preload = json.loads(preload_json)
    warm = [m for top in preload for m in (*WARM_IMPORTS.get(top, ()), *ENTRY_IMPORTS.get(top, ()))]
    for name in [*preload, *warm, "faulthandler", "hashlib", "json", "resource", "traceback",
                 "ctypes", "pathlib", "random", "tempfile"]:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - same rule as the spawned child: a missing module loses the head start
            pass
    # The signal state a spawned child has at this point (after the same preload), restored in each forked
    # child: the loop below changes none of it on purpose, so this is a safety net, not a translation.
    handlers = {}
    for sig in signal.valid_signals():
        try:
            handlers[sig] = signal.getsignal(sig)
        except (OSError, ValueError, RuntimeError):
            pass
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    # Move everything imported so far out of the cyclic collector's reach: a collection in a forked child
    # would otherwise touch (and so copy-on-write duplicate) every object of the image. Those objects stay
    # alive anyway; only garbage cycles among them (none expected in freshly imported modules) are kept.
    import gc

    gc.collect()
    gc.freeze()
    if _task_count() > 1:
        # A library started a thread pool at import (numpy's OpenBLAS does when OPENBLAS_NUM_THREADS > 1).
        # Such libraries register pthread_atfork handlers that stop their pools before a fork and restart
        # them lazily on next use; one throw-away fork runs those handlers here, once, so that the zygote
        # itself is single-threaded from then on (it never calls into BLAS again). Forking with other
        # threads alive is fine for a child that only calls _exit.
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    send({"ev": "ready", "pid": zygote_pid, "tasks": _settle(5.0), "threads": _thread_names(),
          "cuda": _cuda_initialised(), "modules": len(sys.modules), "triton": "triton" in sys.modules,
          "entry_imports": [m for top in preload for m in ENTRY_IMPORTS.get(top, ()) if m in sys.modules]})

    sel = selectors.DefaultSelector()
    sel.register(ctl, selectors.EVENT_READ, None)
    pidfds: dict[int, int] = {}
    exited: set[int] = set()
    reap_asked: set[int] = set()
    # Child pid -> (its pid namespace's init, the pipe end that keeps that init alive), for isolated runs.
    ns_inits: dict[int, tuple[int, int]] = {}
    while True:
        for key, _ in sel.select():
            if isinstance(key.data, tuple):  # a namespace's init has exited
                sel.unregister(key.fileobj)
                os.close(key.fileobj)
                _reap(key.data[1])
                continue
            if key.data is not None:
                pid = key.data
                if pid in ns_inits:
                    # The run's process has ended: so does its namespace, with whatever it still holds.
                    init, hold_w = ns_inits.pop(pid)
                    os.close(hold_w)
                    sel.register(os.pidfd_open(init), selectors.EVENT_READ, ("init", init))
                sel.unregister(key.fileobj)
                os.close(pidfds.pop(pid))
                try:
                    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
                except ChildProcessError:
                    info = None
                if info is None:
                    rc = None
                elif info.si_code == os.CLD_EXITED:
                    rc = info.si_status
                else:
                    rc = -info.si_status
                send({"ev": "exit", "pid": pid, "rc": rc})
                if pid in reap_asked:
                    reap_asked.discard(pid)
                    _reap(pid)
                else:
                    exited.add(pid)
                continue
            try:
                data, fds, flags, _ = socket.recv_fds(ctl, _MSG_MAX, 8)
            except OSError:
                data, fds, flags = b"", [], 0
            if not data:
                # The parent is gone or closed us: children die with us (PR_SET_PDEATHSIG), then we leave.
                os._exit(0)
            try:
                req = json.loads(data.decode("utf-8"))
            except ValueError:
                req = {}
            op = req.get("op")
            if op == "reap":
                pid = int(req["pid"])
                if pid in exited:
                    exited.discard(pid)
                    _reap(pid)
                elif pid in pidfds:
                    reap_asked.add(pid)  # the parent gave up waiting; reap once it has died
                for fd in fds:
                    os.close(fd)
                continue
            if op != "spawn" or len(fds) != 5 or flags & socket.MSG_CTRUNC:
                for fd in fds:
                    os.close(fd)
                send({"ev": "spawn_failed", "req": req.get("req"), "error": f"malformed request {op!r}"})
                continue
            # Forking is only sound from a single-threaded process with no CUDA context.
            tasks, cuda = _settle(1.0), _cuda_initialised()
            if tasks != 1 or cuda:
                for fd in fds:
                    os.close(fd)
                send({"ev": "spawn_failed", "req": req["req"],
                      "error": f"zygote not fork-safe (threads={_thread_names()}, cuda_initialised={cuda})"})
                continue
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # noqa: BLE001
                    pass
            # An isolated run's process is forked straight into a pid namespace of its own, as its pid 2.
            ns = isolation.make_pid_namespace() if req.get("pid_namespace") and os.geteuid() == 0 else None
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    if ns is not None:
                        os.close(ns[1])
                        isolation.entered_pid_namespace()
                    _become_child(req, fds, ctl, sel, zygote_pid, handlers, mask)
                    code = 0
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                    if not isinstance(exc.code, int | None):
                        _print_exc()
                except BaseException:  # noqa: BLE001 - what a spawned interpreter does with an uncaught error
                    _print_exc()
                os._exit(code)
            if ns is not None:
                isolation.restore_pid_namespace()
                ns_inits[pid] = ns
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            pidfds[pid] = pidfd
            sel.register(pidfd, selectors.EVENT_READ, pid)
            send({"ev": "spawned", "req": req["req"], "pid": pid})


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _print_exc() -> None:
    try:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass


def _become_child(req: dict, fds: list[int], ctl, sel, zygote_pid: int, handlers: dict, mask) -> None:
    """Turn the freshly forked process into what ``python -m lethe.sandbox.child`` would be, then run the
    child protocol. Order matters: session and parent-death signal first (nothing may outlive a dead
    zygote unnoticed), then descriptors, environment and interpreter state, and only then the protocol, which
    is where the configuration, limits and the candidate come in."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; the parent's sweep still kills us
        pass
    # The zygote died between fork and prctl? Inside a pid namespace the zygote made for this run it is out of
    # sight (0), and a dead one would have left us to the namespace's init (1).
    from lethe.sandbox import isolation

    if os.getppid() != (0 if isolation.in_namespace_made_by_parent() else zygote_pid):
        os._exit(1)
    # Signal state as after a spawned child's preload. faulthandler (on if PYTHONFAULTHANDLER is set) is
    # switched off first so its handlers are not overwritten behind its back; the protocol turns it on again.
    import faulthandler

    faulthandler.disable()
    try:
        signal.set_wakeup_fd(-1)
    except (ValueError, OSError):
        pass
    for s, h in handlers.items():
        if h is None:
            continue
        try:
            signal.signal(s, h)
        except (OSError, ValueError, RuntimeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    stdin_r, stdout_w, stderr_w, chan_fd, hold_fd = fds
    sel.close()
    ctl.close()
    os.dup2(stdin_r, 0)
    os.dup2(stdout_w, 1)
    os.dup2(stderr_w, 2)
    # Like close_fds=True + pass_fds: the child holds its stdio, the channel and the hold pipe, nothing else
    # (in particular not the control socket, nor other runs' descriptors in flight).
    keep = {0, 1, 2, chan_fd, hold_fd}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        if fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass
    os.set_inheritable(chan_fd, True)
    os.set_inheritable(hold_fd, True)

    # The environment is exactly the one the runner computed for this run, before any CUDA or candidate code.
    os.environ.clear()
    os.environ.update(req["env"])
    os.chdir(req["cwd"])
    # ``python -m`` puts the working directory first on sys.path; the rest came from the same PYTHONPATH.
    if sys.path:
        sys.path[0] = os.getcwd()
    import importlib

    importlib.invalidate_caches()
    sys.argv = [str(Path(sys.modules["__main__"].__file__)), str(chan_fd), str(hold_fd)]
    # State a fresh interpreter would not share with its siblings: cached temp dir (it came from the zygote's
    # TMPDIR) and the entropy-seeded random generators (copied by fork, they would repeat across children).
    import tempfile as _tempfile

    _tempfile.tempdir = None
    import random as _random

    _random.seed()
    np = sys.modules.get("numpy")
    if np is not None:
        try:
            np.random.seed()
        except Exception:  # noqa: BLE001
            pass
    sys.modules["__main__"]._main(chan_fd, hold_fd)


# ----------------------------------------------------------------------------------------------------------
# Client (runs in the parent)
# ----------------------------------------------------------------------------------------------------------


class ZygoteUnavailable(RuntimeError):
    """This run cannot be forked from a zygote (it failed to start, died, or refused); run it spawned."""


class ZygoteTimeout(RuntimeError):
    """The zygote did not fork within the run's startup budget (it was busy or slowed down): a startup
    timeout, like a spawned child whose preload is too slow."""


class ZygoteProc:
    """A forked child seen from the parent: the subset of ``subprocess.Popen`` the runner uses.

    Signals go through a pidfd opened while the child is guaranteed to exist (the zygote reaps only on our
    ``reap``), so they can never reach a recycled pid. ``lost`` means the zygote died while this child was
    running: the child was then killed by its parent-death signal and its exit status is unknown."""

    def __init__(self, zygote: Zygote):
        self.zygote = zygote
        self.pid: int | None = None
        self.pidfd: int | None = None
        self.returncode: int | None = None
        self.lost = False
        self.error: str | None = None
        self.spawned = threading.Event()
        self.exited = threading.Event()
        self.stdin = self.stdout = self.stderr = None
        self.args = ["<zygote child>"]

    def _gone(self) -> bool:
        import select

        if self.pidfd is None:
            return True
        try:
            return bool(select.select([self.pidfd], [], [], 0)[0])
        except (OSError, ValueError):
            return True

    def poll(self) -> int | None:
        if self.returncode is not None:
            return self.returncode
        if self.lost and self._gone():
            # Killed by PR_SET_PDEATHSIG when the zygote died (or exited just before): status unknown.
            self.returncode = -signal.SIGKILL
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            self.exited.wait(0.02 if left is None else min(0.02, left))
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.pidfd is None:
            return
        try:
            signal.pidfd_send_signal(self.pidfd, sig)
        except (ProcessLookupError, OSError):
            pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def release(self) -> None:
        """Let the zygote reap the (dead) child; only after this may its pid be reused."""
        if self.pid is not None:
            self.zygote.send({"op": "reap", "pid": self.pid})
        if self.pidfd is not None:
            try:
                os.close(self.pidfd)
            except OSError:
                pass
            self.pidfd = None


class Zygote:
    """One zygote process and the thread that reads its messages. Thread-safe: any number of runner threads
    may call :meth:`spawn` at once (requests are serialised on the socket, replies matched by id)."""

    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        self.preload = preload
        self.dir = Path(tempfile.mkdtemp(prefix="lethe-zygote-"))
        work = self.dir / "work"
        home = self.dir / ".home"
        tmp = self.dir / ".tmp"
        for d in (work, home, tmp):
            d.mkdir(parents=True, exist_ok=True)
        zenv = dict(env)
        zenv.update({"HOME": str(home), "TMPDIR": str(tmp), "TMP": str(tmp), "TEMP": str(tmp),
                     "TRITON_CACHE_DIR": str(home / ".triton"), "TORCH_EXTENSIONS_DIR": str(home / ".ext"),
                     "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor")})
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.log_path = self.dir / "zygote.log"
        try:
            with open(self.log_path, "wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "lethe.sandbox.child", "--zygote", str(theirs.fileno()),
                     json.dumps(list(preload))],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                    pass_fds=(theirs.fileno(),), cwd=str(work), env=zenv, start_new_session=True,
                    close_fds=True,
                )
        finally:
            theirs.close()
        self.sock = ours
        self.started = time.monotonic()
        self.ready = threading.Event()
        self.info: dict = {}
        self.dead = False
        self.refused: str | None = None
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._pending: dict[int, ZygoteProc] = {}
        self._by_pid: dict[int, ZygoteProc] = {}
        self._reader = threading.Thread(target=self._read, name="lethe-zygote-reader", daemon=True)
        self._reader.start()

    # -- plumbing ------------------------------------------------------------------------------------------
    def send(self, msg: dict, fds: list[int] | None = None) -> bool:
        data = json.dumps(msg).encode("utf-8")
        with self._send_lock:
            if self.dead:
                return False
            try:
                if fds:
                    socket.send_fds(self.sock, [data], fds)
                else:
                    self.sock.send(data)
                return True
            except OSError:
                return False

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(_MSG_MAX)
            except OSError:
                data = b""
            if not data:
                break
            try:
                msg = json.loads(data.decode("utf-8"))
            except ValueError:
                continue
            ev = msg.get("ev")
            if ev == "ready":
                self.info = msg
                if msg.get("cuda") or msg.get("tasks") != 1:
                    self.refused = f"zygote is not fork-safe: {msg}"
                self.ready.set()
            elif ev in ("spawned", "spawn_failed"):
                with self._lock:
                    zp = self._pending.pop(msg.get("req"), None)
                    if zp is not None and ev == "spawned":
                        zp.pid = int(msg["pid"])
                        # Safe: the child cannot have been reaped yet (the zygote waits for our ``reap``).
                        try:
                            zp.pidfd = os.pidfd_open(zp.pid)
                        except OSError:
                            zp.pidfd = None
                        self._by_pid[zp.pid] = zp
                if zp is not None:
                    if ev == "spawn_failed":
                        zp.error = str(msg.get("error"))
                    zp.spawned.set()
                elif ev == "spawned":
                    # Its requester gave up (startup budget spent) and closed its ends of the pipes: the child
                    # cannot do anything useful, so it is killed and reaped rather than left as a zombie.
                    self._discard(int(msg["pid"]))
            elif ev == "exit":
                with self._lock:
                    zp = self._by_pid.pop(msg.get("pid"), None)
                if zp is not None:
                    zp.returncode = msg.get("rc")
                    if zp.returncode is None:  # not our child any more: treat like a lost one
                        zp.lost = True
                    zp.exited.set()
        with self._send_lock:
            self.dead = True
        with self._lock:
            pending = list(self._pending.values())
            running = list(self._by_pid.values())
            self._pending.clear()
            self._by_pid.clear()
        for zp in pending:
            zp.error = "zygote died"
            zp.spawned.set()
        for zp in running:
            zp.lost = True
            zp.exited.set()
        self.ready.set()
        try:
            self.proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            pass

    def _discard(self, pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            fd = None
        if fd is not None:
            try:
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            os.close(fd)
        self.send({"op": "reap", "pid": pid})

    def alive(self) -> bool:
        return not self.dead and self.proc.poll() is None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log_path.read_bytes()[-n:].decode("utf-8", errors="replace")
        except OSError:
            return ""

    # -- API -----------------------------------------------------------------------------------------------
    def spawn(self, env: dict[str, str], cwd: str, fds: list[int], timeout: float,
              pid_namespace: bool = False) -> ZygoteProc:
        """Ask the zygote to fork a child with these five fds; returns once it is forked. Raises
        ZygoteUnavailable if the zygote is dead or refuses, ZygoteTimeout if it does not answer within
        ``timeout``. ``pid_namespace``: fork it as pid 2 of a new pid namespace (an isolated run; see
        ``lethe.sandbox.isolation.make_pid_namespace``)."""
        if self.refused:
            raise ZygoteUnavailable(self.refused)
        zp = ZygoteProc(self)
        with self._lock:
            req = next(self._ids)
            self._pending[req] = zp
        if not self.send({"op": "spawn", "req": req, "env": env, "cwd": cwd, "pid_namespace": pid_namespace}, fds):
            with self._lock:
                self._pending.pop(req, None)
            raise ZygoteUnavailable("zygote control socket closed (zygote died?)")
        if not zp.spawned.wait(max(timeout, 0.0)):
            with self._lock:
                orphan = self._pending.pop(req, None) is not None
            if orphan:
                raise ZygoteTimeout(f"zygote did not fork within {timeout:g} s")
            zp.spawned.wait()  # answered meanwhile: the reader is filling it in
        if zp.error is not None:
            raise ZygoteUnavailable(zp.error)
        return zp

    def close(self) -> None:
        with self._send_lock:
            self.dead = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        try:
            self.proc.wait(timeout=2.0)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            try:
                self.proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
        import shutil

        shutil.rmtree(self.dir, ignore_errors=True)


_REGISTRY: dict[tuple, Zygote] = {}
_REGISTRY_LOCK = threading.Lock()


def acquire(env: dict[str, str], preload: tuple[str, ...], device: str, omp_threads: int) -> Zygote:
    """The zygote for this (parent process, preload, device, omp_threads, startup environment), started or
    restarted if there is none alive. Returns at once; the caller waits on ``.ready`` (the zygote imports
    the preload in the background)."""
    key = (os.getpid(), tuple(preload), device, int(omp_threads), startup_signature(env, tuple(preload)))
    with _REGISTRY_LOCK:
        z = _REGISTRY.get(key)
        if z is not None and not z.alive():
            _REGISTRY.pop(key, None)
            threading.Thread(target=z.close, daemon=True).start()
            z = None
        if z is None:
            z = Zygote(env, tuple(preload))
            _REGISTRY[key] = z
        return z


def shutdown_all() -> None:
    """Close every zygote of this process (also run at interpreter exit)."""
    with _REGISTRY_LOCK:
        zs = [z for k, z in _REGISTRY.items() if k[0] == os.getpid()]
        for k in [k for k in _REGISTRY if k[0] == os.getpid()]:
            _REGISTRY.pop(k, None)
    for z in zs:
        z.close()


def live_zygotes() -> list[Zygote]:
    with _REGISTRY_LOCK:
        return [z for k, z in _REGISTRY.items() if k[0] == os.getpid() and z.alive()]


atexit.register(shutdown_all)
