"""``lethe serve``: a long-lived verifier that keeps its sandbox zygotes warm, answering ``lethe verify --server``.

Every ``lethe verify`` otherwise pays the start of its zygotes (an interpreter that imports numpy, torch and
sympy) before the first candidate runs. The server is the verifier process of many verifications: it starts the
zygotes once and runs each request exactly as ``lethe verify`` would (:func:`lethe.cli.verify_sources`), so the
candidates are still isolated per run by the sandbox, and the client prints the server's answer unchanged.

Security model (docs/sandbox.md, "Verifier server"):

* the socket lives in a directory of mode 0700 owned by the user (:func:`default_socket`); a directory that
  is not is refused, so no other user can reach the socket;
* every connection's peer uid (``SO_PEERCRED``, taken by the kernel at ``connect``) must equal the server's
  uid, else the request is refused unread;
* the server is non-dumpable (``PR_SET_DUMPABLE`` 0, as the verifier makes itself before isolating a run):
  another process of the same uid cannot read its memory or take its file descriptors;
* it exits after ``idle_exit_s`` without a request, and on SIGTERM or SIGINT, closing its zygotes.

A server's life is the ``flock`` it holds on ``<socket>.lock`` (which holds its pid): a socket file whose lock nobody holds is
stale (its server died without removing it) and is replaced; one whose lock is held is a live server, and a
second ``lethe serve`` on that path exits.

Wire format: one request and one answer per connection, each a 4-byte big-endian length and that many
bytes of UTF-8 JSON. Request ``{"op": "verify", "args": {...}, "ref_src": ..., "cand_src": ...}`` (the
parsed ``lethe verify`` options; the sources travel by content); answer ``{"code", "stdout", "stderr",
"row"}`` or ``{"error": ...}``. ``{"op": "status"}`` answers the server's pid, uid and dumpable flag;
``{"op": "forget"}`` drops the server's in-memory reference results (``{"forgot": n}``; run between two
verifications, like a verify request), so that its next verification of a reference whose disk-cache entry is
gone computes it afresh.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

DEFAULT_IDLE_EXIT_S = 900.0
CONNECT_TIMEOUT_S = 5.0
# How long a client waits for a server it started to accept connections (the server's own start, before the
# zygotes, is an interpreter plus the verifier's imports).
START_TIMEOUT_S = 60.0
_LEN = struct.Struct(">I")
_MSG_MAX = 64 << 20


class ServerError(Exception):
    """The server could not be reached or gave no usable answer (the message says which, in one line)."""


def default_socket() -> Path:
    """``$XDG_RUNTIME_DIR/lethe/serve.sock`` where that runtime directory exists, else
    ``/tmp/lethe-<uid>/serve.sock``."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    base = Path(runtime) / "lethe" if runtime and Path(runtime).is_dir() else Path(f"/tmp/lethe-{os.getuid()}")
    return base / "serve.sock"


def socket_path(value: str | None) -> Path:
    """The socket named by ``--socket`` or ``LETHE_SERVER`` (``1``, ``yes`` or empty mean the default)."""
    if not value or value.strip().lower() in ("1", "yes", "true", "on"):
        return default_socket()
    return Path(value)


def private_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700 if absent, and check that it is a directory (not a link) owned by us
    with no access for group or others: the socket's only protection from other users is this directory."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    st = os.lstat(path)
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ServerError(f"{path} must be a directory of mode 0700 owned by uid {os.getuid()} "
                          f"(it has uid {st.st_uid}, mode {stat.filemode(st.st_mode)})")
    return path


def send_msg(sock: socket.socket, obj: dict) -> None:
    data = json.dumps(obj).encode("utf-8")
    sock.sendall(_LEN.pack(len(data)) + data)


def recv_msg(sock: socket.socket) -> dict:
    """One framed message; ServerError on a closed connection, an oversized frame or bad JSON."""
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size))
    if n > _MSG_MAX:
        raise ServerError(f"message of {n} bytes exceeds {_MSG_MAX}")
    try:
        return json.loads(_recv_exact(sock, n).decode("utf-8"))
    except ValueError as exc:
        raise ServerError(f"malformed message: {exc}") from None


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ServerError("the connection closed early")
        buf += chunk
    return bytes(buf)


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process that connected, as the kernel recorded it at ``connect`` (SO_PEERCRED)."""
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                         struct.calcsize("3i")))
    return uid


def server_uid() -> int:
    """The uid a peer must have: the server's own."""
    return os.getuid()


def _dumpable() -> int | None:
    """This process's PR_GET_DUMPABLE (0: its memory and fds are closed to same-uid processes), None off Linux."""
    try:
        import ctypes

        return int(ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0))  # PR_GET_DUMPABLE
    except Exception:  # noqa: BLE001 - not Linux
        return None


# ---------------------------------------------------------------------------------------------------- server


class Server:
    """Accepts connections on ``path`` and answers them.

    Connections are read in threads of their own (so a second client is queued, not refused), and the
    verifications run one at a time on the main thread, as in ``lethe verify``: the sandbox's runs of one
    verification already use the machine's cores, and signals reach the main thread only."""

    def __init__(self, path: Path, idle_exit_s: float = DEFAULT_IDLE_EXIT_S):
        self.path = Path(path)
        self.idle_exit_s = float(idle_exit_s)
        self._jobs: queue.Queue = queue.Queue()
        self._state = threading.Lock()
        self._open = 0  # connections being read or answered
        self._last = time.monotonic()
        self._stop = threading.Event()
        self._lock_fh = None
        self.sock: socket.socket | None = None

    def bind(self) -> bool:
        """Take the path: False when a live server already holds it. A leftover socket is replaced."""
        private_dir(self.path.parent)
        fh = open(self.path.with_name(self.path.name + ".lock"), "a")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        self._lock_fh = fh
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        self.path.unlink(missing_ok=True)  # nobody holds the lock: the socket (if any) is a dead server's
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)
        sock.listen(16)
        sock.settimeout(0.25)
        self.sock = sock
        return True

    def warm(self) -> None:
        """Start the zygotes ``lethe verify`` would start (the CPU one; the CUDA one where the device exists)."""
        from lethe.sandbox.runner import warm_up

        warm_up("cpu")
        if os.path.exists("/dev/nvidiactl"):
            warm_up("cuda", {"TRITON_INTERPRET": None})

    def stop(self, *_a) -> None:
        """Stop taking requests; the verification in progress (if any) finishes and is answered first."""
        self._stop.set()

    def _idle(self) -> bool:
        with self._state:
            return self._open == 0 and self._jobs.empty() and time.monotonic() - self._last > self.idle_exit_s

    def serve_forever(self) -> None:
        acceptor = threading.Thread(target=self._accept_loop, daemon=True)
        acceptor.start()
        try:
            while not self._stop.is_set() and not self._idle():
                try:
                    req, reply = self._jobs.get(timeout=0.25)
                except queue.Empty:
                    continue
                reply.put(self.answer(req))
        finally:
            self._stop.set()
            acceptor.join()
            self.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError as exc:
                print(f"lethe serve: accept failed: {exc}", file=sys.stderr)
                self._stop.set()
                return
            with self._state:
                self._open += 1
                self._last = time.monotonic()
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def close(self) -> None:
        """Answer what is still queued with an error, remove the socket, close the zygotes and drop the lock
        (in that order, so that a successor that gets the lock finds no socket of ours)."""
        from lethe.sandbox import zygote

        while True:
            try:
                _req, reply = self._jobs.get_nowait()
            except queue.Empty:
                break
            reply.put({"error": "the server stopped before this request ran"})
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            self.path.unlink(missing_ok=True)
        zygote.shutdown_all()
        if self._lock_fh is not None:
            self._lock_fh.close()
            self._lock_fh = None

    def _handle(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(CONNECT_TIMEOUT_S)
            uid = peer_uid(conn)
            if uid != server_uid():
                send_msg(conn, {"error": f"refused: peer uid {uid} is not the server's uid {server_uid()}"})
                return
            req = recv_msg(conn)
            conn.settimeout(None)
            if req.get("op") == "status" or self._stop.is_set():
                ans = self.answer(req) if not self._stop.is_set() else {"error": "the server is stopping"}
            else:
                reply: queue.Queue = queue.Queue(1)
                self._jobs.put((req, reply))
                ans = reply.get()
            send_msg(conn, ans)
        except (OSError, ServerError) as exc:
            print(f"lethe serve: connection dropped: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            conn.close()
            with self._state:
                self._open -= 1
                self._last = time.monotonic()

    def answer(self, req: dict) -> dict:
        from lethe import cli

        if req.get("op") == "status":
            return {"pid": os.getpid(), "uid": server_uid(), "dumpable": _dumpable(),
                    "idle_exit_s": self.idle_exit_s}
        if req.get("op") == "forget":
            from lethe.verifier import api

            # The in-process results only (api._REF_CACHE, as lethe.trusted.run drops them); the disk cache is
            # the caller's to empty. Not a function of the verifier package: its sources are the code digest.
            n = len(api._REF_CACHE)
            api._REF_CACHE.clear()
            api._REF_MEMO.clear()  # the tolerances kept with them
            return {"forgot": n}
        if req.get("op") != "verify":
            return {"error": f"unknown op {req.get('op')!r}"}
        try:
            args = argparse.Namespace(**req["args"])
            code, out, err, row = cli.verify_sources(args, req["ref_src"], req["cand_src"])
        except Exception as exc:  # noqa: BLE001 - the verifier's own failure, answered as the CLI answers it
            from lethe.verifier.report import escape
            from lethe.verifier.verdict import EXIT_HARNESS

            if os.environ.get("LETHE_DEBUG"):
                import traceback

                traceback.print_exc()
            return {"code": EXIT_HARNESS, "stdout": "", "row": None,
                    "stderr": f"lethe verify: internal error: {escape(type(exc).__name__)}: "
                              f"{escape(str(exc)[:400])} (set LETHE_DEBUG=1 for the traceback)\n"}
        return {"code": code, "stdout": out, "stderr": err, "row": row}


def run_server(path: Path, idle_exit_s: float) -> int:
    """``lethe serve``: 0 after an idle exit or a signal, 1 when a live server already holds ``path``."""
    from lethe.sandbox import isolation

    isolation.harden_self()
    server = Server(path, idle_exit_s)
    try:
        bound = server.bind()
    except ServerError as exc:
        print(f"lethe serve: {exc}", file=sys.stderr)
        return 2
    if not bound:
        print(f"lethe serve: a server is already running on {path}", file=sys.stderr)
        return 1
    # SIGTERM lets the verification in progress finish and be answered; SIGINT (KeyboardInterrupt) abandons
    # it, as in ``lethe verify``. Either way serve_forever closes the zygotes and removes the socket.
    signal.signal(signal.SIGTERM, server.stop)
    server.warm()
    print(f"lethe serve: listening on {path} (pid {os.getpid()}, idle exit after {idle_exit_s:g} s)",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        return 130
    return 0


# ---------------------------------------------------------------------------------------------------- client


def request(path: Path, req: dict, *, response_timeout_s: float) -> dict:
    """Send one request and return the answer; ServerError if no server listens on ``path`` (the message
    then starts with ``no server``), or it is not of our uid, refuses, closes or exceeds the timeout."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(CONNECT_TIMEOUT_S)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise ServerError(f"no server on {path}: {type(exc).__name__}") from None
        except socket.timeout:
            raise ServerError(f"the server on {path} did not accept within {CONNECT_TIMEOUT_S:g} s") from None
        except OSError as exc:
            raise ServerError(f"cannot connect to {path}: {type(exc).__name__}: {exc}") from None
        # The sources go only to a server of our own uid (the kernel's record of who listens).
        if peer_uid(sock) != os.getuid():
            raise ServerError(f"the server on {path} runs as uid {peer_uid(sock)}, not {os.getuid()}")
        sock.settimeout(response_timeout_s)
        try:
            try:
                send_msg(sock, req)
            except (BrokenPipeError, ConnectionResetError):
                pass  # a server that refuses us closes before reading the request: its answer says why
            ans = recv_msg(sock)
        except socket.timeout:
            raise ServerError(f"no answer from the server on {path} within {response_timeout_s:g} s") from None
        except OSError as exc:
            raise ServerError(f"the server on {path} failed: {type(exc).__name__}: {exc}") from None
    finally:
        sock.close()
    if "error" in ans:
        raise ServerError(f"the server on {path} answered: {ans['error']}")
    return ans


def start_detached(path: Path, idle_exit_s: float = DEFAULT_IDLE_EXIT_S) -> subprocess.Popen:
    """Start ``lethe serve --socket path`` in a session of its own, logging to ``<socket>.log``; it outlives
    the caller (until its idle exit)."""
    private_dir(path.parent)
    log = open(path.with_name(path.name + ".log"), "ab")
    env = {k: v for k, v in os.environ.items() if k not in ("LETHE_SERVER", "LETHE_SERVER_TIMEOUT")}
    try:
        return subprocess.Popen([sys.executable, "-m", "lethe.cli", "serve", "--socket", str(path),
                                 "--idle-exit", str(idle_exit_s)], env=env,
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    finally:
        log.close()


def wait_listening(path: Path, proc: subprocess.Popen | None, timeout_s: float = START_TIMEOUT_S) -> bool:
    """Whether a server on ``path`` answers a status request within ``timeout_s`` (False at once if ``proc``
    exits first, e.g. because another server won the race: then the caller simply tries that one)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            request(path, {"op": "status"}, response_timeout_s=CONNECT_TIMEOUT_S)
            return True
        except ServerError:
            pass
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def response_timeout(args: argparse.Namespace) -> float:
    """How long a client waits for its verdict: ``LETHE_SERVER_TIMEOUT`` seconds, else a bound derived from
    the run's own budgets (the reference's and the candidate's, each run several times by the battery)."""
    env = os.environ.get("LETHE_SERVER_TIMEOUT", "").strip()
    if env:
        return float(env)
    return 4.0 * (float(args.timeout) + float(args.ref_timeout)) + 600.0


def verify_via_server(path: Path, args: argparse.Namespace, ref_src: str, cand_src: str) -> dict:
    """The server's answer for this verification, starting a server on ``path`` if none listens there.
    The socket's directory must be private (:func:`private_dir`) before anything is sent or started."""
    private_dir(path.parent)
    fields = {k: v for k, v in vars(args).items() if k not in ("func", "server")}
    req = {"op": "verify", "args": fields, "ref_src": ref_src, "cand_src": cand_src}
    timeout = response_timeout(args)
    try:
        return request(path, req, response_timeout_s=timeout)
    except ServerError as exc:
        if not str(exc).startswith("no server"):
            raise
    proc = start_detached(path)
    if not wait_listening(path, proc) and not wait_listening(path, None, CONNECT_TIMEOUT_S):
        raise ServerError(f"no server on {path}: the one started did not listen within {START_TIMEOUT_S:g} s "
                          f"(see {path.name}.log beside it)")
    return request(path, req, response_timeout_s=timeout)
