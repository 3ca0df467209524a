"""Run one untrusted callable in its own fresh, resource-limited process and get plain data back.

Why a fresh process (not a fork of the verifier, not a thread): a candidate kernel may hang, segfault,
exhaust memory, monkeypatch torch or lethe, or leave a sticky CUDA error. All of that must cost its own
verdict row only, so the candidate never shares an address space, a CUDA context or an interpreter with the
verifier or with another candidate. The process is either spawned (``start="spawn"``: a new interpreter) or
forked from a clean, trusted zygote that has already imported torch (``start="zygote"``, see
``lethe.sandbox.zygote``); the child protocol and the supervision here are the same in both modes. See
docs/sandbox.md for what is guaranteed and what is best effort.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from lethe.sandbox import arrays as arrays_io
from lethe.sandbox import isolation

try:
    import psutil
except ImportError:  # pragma: no cover - psutil is a declared dependency
    psutil = None

START_MODES = ("spawn", "zygote")
# The default start mode when neither the call nor LETHE_SANDBOX_START chooses one. The zygote passes the
# whole hostile suite (tests/sandbox/test_hostile.py runs it under both modes) and returns bit-identical
# results; it falls back to spawn whenever it cannot serve a run.
DEFAULT_START = "zygote"

STATUSES = ("ok", "timeout", "crash", "oom", "exit", "error", "output_flood", "bad_result")

_POLL_S = 0.02
# Disk a run may fill beyond its result file (compiler caches, scratch), unless its caller says otherwise.
DISK_SLACK_MB = 1024
# The run directory's disk use is checked this often (a walk of a small tree), against the run's budget.
DISK_POLL_S = 0.5
# Beyond this many entries a run directory is a file flood in itself, whatever their size.
DISK_MAX_ENTRIES = 100_000
# Free space below this on the disk of a run directory stops a run that is writing there: the verifier's own
# next result file would fail to write (other rows charged for one candidate's flood).
DISK_RESERVE_BYTES = 1 << 30
# How long a run waits for a ready zygote to fork before it gives up on that zygote.
_FORK_WAIT_S = 20.0
_MAX_CHANNEL_BYTES = 256 << 20


@dataclass
class SandboxResult:
    """What one sandboxed run produced; every field is plain data that the candidate could not inject code
    into (JSON values and numpy arrays of non-object dtype)."""

    status: str
    result: dict | None = None
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    returncode: int | None = None
    signal: str | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    seconds: float = 0.0
    detail: str = ""
    startup_seconds: float = 0.0
    start: str = "spawn"
    start_note: str = ""
    # What the operating system enforced on the child (lethe.sandbox.isolation), as the child reported it
    # before any candidate code ran; tamper_proof only when every mechanism applied.
    isolation: str = ""
    tamper_proof: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (arrays reduced to name -> shape/dtype)."""
        return {
            "status": self.status,
            "result": self.result,
            "arrays": {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in sorted(self.arrays.items())},
            "returncode": self.returncode,
            "signal": self.signal,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
            "seconds": self.seconds,
            "detail": self.detail,
            "isolation": self.isolation,
            "tamper_proof": self.tamper_proof,
        }


class _Drain(threading.Thread):
    """Reads one pipe to EOF, keeping only the last ``keep`` bytes; counts everything it saw so the runner can
    stop a flood. Draining in a thread is what prevents the classic full-pipe deadlock."""

    def __init__(self, stream, keep: int, counter: list[int], lock: threading.Lock):
        super().__init__(daemon=True)
        self.stream = stream
        self.keep = keep
        self.buf: deque[bytes] = deque()
        self.held = 0
        self.counter = counter
        self.lock = lock

    def run(self) -> None:
        fd = self.stream.fileno()
        try:
            while True:
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                with self.lock:
                    self.counter[0] += len(chunk)
                self.buf.append(chunk)
                self.held += len(chunk)
                while self.held - len(self.buf[0]) >= self.keep and len(self.buf) > 1:
                    self.held -= len(self.buf.popleft())
        except OSError:
            pass

    def tail(self) -> str:
        data = b"".join(self.buf)[-self.keep :]
        return data.decode("utf-8", errors="replace")


class _Channel(threading.Thread):
    """Reads the private result channel: newline-delimited JSON messages that carry the run's nonce."""

    def __init__(self, fd: int, nonce: str):
        super().__init__(daemon=True)
        self.fd = fd
        self.nonce = nonce
        self.ready: dict | None = None
        self.ready_at: float | None = None
        self.done: dict | None = None
        self.done_at: float | None = None
        self.junk = 0
        self.overflow = False
        self.event = threading.Event()

    def run(self) -> None:
        buf = b""
        total = 0
        try:
            while True:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    break
                total += len(chunk)
                if total > _MAX_CHANNEL_BYTES:
                    self.overflow = True
                    break
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    self._handle(line)
        except OSError:
            pass
        finally:
            self.event.set()

    def _handle(self, line: bytes) -> None:
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            self.junk += 1
            return
        if not isinstance(msg, dict) or not secrets.compare_digest(str(msg.get("nonce", "")), self.nonce):
            self.junk += 1
            return
        if msg.get("ev") == "ready" and self.ready is None:
            self.ready = msg
            self.ready_at = time.monotonic()
        elif msg.get("ev") == "done" and self.done is None and self.ready is not None:
            self.done = msg
            self.done_at = time.monotonic()
        self.event.set()


def _descendant_pids(pid: int) -> list[int] | None:
    """The pids below ``pid``, from the kernel's per-thread ``children`` lists: a walk of the tree itself, where
    psutil's ``children()`` reads every process on the machine to find the parents. The run loop asks for the
    tree every poll, so on a busy host that scan competed with the candidate for the CPU. None when the kernel
    does not keep the lists (CONFIG_PROC_CHILDREN); the caller then asks psutil."""
    if not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/children"):
        return None
    out: list[int] = []
    stack = [pid]
    while stack:
        p = stack.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue  # gone meanwhile
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children", "rb") as fh:
                    kids = [int(k) for k in fh.read().split()]
            except (OSError, ValueError):
                continue  # the thread or the process ended meanwhile
            out += kids
            stack += kids
    return out


def _processes(pids: list[int]) -> list:
    procs = []
    for k in pids:
        try:
            procs.append(psutil.Process(k))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return procs


def _tree(pid: int) -> list:
    if psutil is None:
        return []
    pids = _descendant_pids(pid)
    if pids is not None:
        return _processes(pids)
    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def _disk_use(paths: list[Path], max_entries: int | None = None) -> tuple[int, int, bool]:
    """(bytes allocated, entries, complete) under ``paths``: st_blocks, so a sparse file counts what it holds;
    the walk stops past ``max_entries``, and ``complete`` is False when it did or some directory could not be
    read (a candidate without the OS isolation can hide its own subdirectory from a same-uid parent)."""
    max_entries = DISK_MAX_ENTRIES if max_entries is None else max_entries
    total, n, complete = 0, 0, True
    stack = [str(p) for p in paths]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            complete = False
            continue
        with it:
            for e in it:
                n += 1
                if n > max_entries:
                    return total, n, False
                try:
                    st = e.stat(follow_symlinks=False)
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(e.path)
                except OSError:
                    complete = False
    return total, n, complete


def _disk_verdict(paths: list[Path], base: int, budget: int | None) -> str:
    """Why the run must stop for what it wrote to disk, or "": past its budget above ``base`` (what was there
    when it became ready: its inputs), a file flood, or a nearly full disk while it was writing there."""
    used, n, complete = _disk_use(paths)
    grown = used - base
    if n > DISK_MAX_ENTRIES:
        return f"created more than {DISK_MAX_ENTRIES} files and directories in its run directory"
    if budget is not None and grown > budget:
        return f"wrote {grown >> 20} MB into its run directory, more than its {budget >> 20} MB disk budget"
    try:
        st = os.statvfs(paths[0])
        free = st.f_bavail * st.f_frsize
    except OSError:
        return ""
    if free < DISK_RESERVE_BYTES and (grown > (64 << 20) or not complete):
        return (f"the disk of its run directory is nearly full ({free >> 20} MB free) while it had written "
                f"{grown >> 20} MB there")
    return ""


def _tree_rss(pid: int) -> tuple[int, list]:
    """Sum of RSS over the child and its descendants (cheap; an upper bound of real use, because pages
    shared copy-on-write after fork count once per process)."""
    if psutil is None:
        return 0, []
    total = 0
    try:
        root = psutil.Process(pid)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0, []
    procs = [root, *_tree(pid)]
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total, procs


def _tree_pss(procs: list) -> int:
    """Proportional set size of the tree: shared pages split between sharers, so forks that merely inherit
    the parent's memory are not charged again. Costs ~2 ms per process, so it is only consulted when the
    cheap RSS bound is over budget."""
    total = 0
    for p in procs:
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as fh:
                for line in fh:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except (OSError, ValueError):
            try:
                total += p.memory_info().rss
            except Exception:  # noqa: BLE001 - gone meanwhile
                pass
    return total


def _live_tree(pid: int) -> list:
    out = []
    for p in _tree(pid):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except Exception:  # noqa: BLE001 - gone meanwhile
            pass
    return out


def _kill_descendants(root: int, seen: dict[int, Any]) -> None:
    """Kill every descendant of ``root``, the process that runs the candidate, while it is still alive.

    That process is a child subreaper, so as long as it lives every orphan (including ones that called setsid
    to leave the process group) stays in its tree and is found here; each pass stops then kills what it
    finds, and passes repeat until the tree holds nothing alive, so a fork bomb cannot outrun it."""
    for _ in range(50):
        victims = _live_tree(root)
        if not victims:
            break
        for p in victims:
            seen[p.pid] = p
            try:
                p.suspend()
            except Exception:  # noqa: BLE001
                pass
        for p in victims:
            try:
                p.kill()
            except Exception:  # noqa: BLE001
                pass
        time.sleep(0.005)


def _candidate_root(child: int, ready: dict | None) -> int:
    """The pid of the process that runs the candidate: the child itself, or, when the child isolated the run in
    a pid namespace, its child there (lethe.sandbox.isolation: the child and the namespace's init only
    wait). The child names it in ``ready``, sent before any candidate code; a name that is not in the child's
    tree is not taken. Memory is charged from this process down, and it is the subreaper that must stay alive
    while its descendants are cleared."""
    try:
        pid = int((ready or {}).get("pid") or child)
    except (TypeError, ValueError):
        return child
    if pid == child:
        return child
    kids = _descendant_pids(child)
    if kids is None and psutil is not None:
        kids = [p.pid for p in _tree(child)]
    return pid if kids and pid in kids else child


def _kill_everything(proc: subprocess.Popen, root: int, seen: dict[int, Any]) -> None:
    """Kill the child, its process group and every descendant ever seen. The group is frozen first and the
    candidate's process (``root``) stays alive (stopped) while its descendants are killed, which keeps orphans
    attached to it. In a pid namespace (``lethe.sandbox.isolation``) the namespace's init is among those seen,
    and its death takes whatever is left in the namespace with it."""
    pgid = proc.pid
    try:
        os.killpg(pgid, signal.SIGSTOP)
    except (ProcessLookupError, PermissionError):
        pass
    _kill_descendants(root, seen)
    for p in list(seen.values()):
        try:
            p.kill()
        except Exception:  # noqa: BLE001 - already gone, or a recycled pid psutil refuses to touch
            pass
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except ProcessLookupError:
        pass


# What a child inherits from the verifier's environment: locale, search paths, and what the GPU stack, the
# compilers and Triton read. Nothing else: the verifier's environment may hold credentials (tokens, keys),
# and a child (the candidate, or a corpus's reference) must not be able to read them from its own environment.
INHERITED_NAMES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "TERM", "LD_LIBRARY_PATH", "CC", "CXX",
                             "MAX_JOBS", "SSL_CERT_FILE"})
INHERITED_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "CUDNN_", "NCCL_", "TRITON_", "TORCH_", "PYTORCH_", "FLA_")


def inherited_environment() -> dict[str, str]:
    """The part of this process's environment that every child starts from (``INHERITED_*``)."""
    return {k: v for k, v in os.environ.items() if k in INHERITED_NAMES or k.startswith(INHERITED_PREFIXES)}


def _child_env(base: dict[str, str] | None, work: Path, device: str, omp_threads: int) -> dict[str, str]:
    env = inherited_environment()
    home = work / ".home"
    tmp = work / ".tmp"
    home.mkdir(parents=True, exist_ok=True)
    tmp.mkdir(parents=True, exist_ok=True)
    # The child must import what the parent imports (lethe, test helpers); it gets the parent's path.
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(paths),
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(omp_threads),
            "MKL_NUM_THREADS": str(omp_threads),
            "OPENBLAS_NUM_THREADS": str(omp_threads),
            "CUBLAS_WORKSPACE_CONFIG": ":4096:8",
            # Fewer glibc arenas: each one reserves 64 MB of address space that RLIMIT_AS would charge.
            "MALLOC_ARENA_MAX": "2",
            "HOME": str(home),
            "TMPDIR": str(tmp),
            "TMP": str(tmp),
            "TEMP": str(tmp),
            "TRITON_CACHE_DIR": str(home / ".triton"),
            "TORCH_EXTENSIONS_DIR": str(home / ".torch_extensions"),
            "TORCHINDUCTOR_CACHE_DIR": str(home / ".inductor"),
            # The leased uid has no passwd entry: getpass.getuser() (torch's cache paths call it) reads these
            # first and would otherwise raise KeyError from pwd.getpwuid.
            "USER": "lethe-sandbox",
            "LOGNAME": "lethe-sandbox",
        }
    )
    if "PATH" not in env:
        env["PATH"] = os.environ.get("PATH", "/usr/bin:/bin")
    # An audit may share one extension build cache across runs (load_inline names builds by source hash, so a
    # run only ever reuses a build of its own source); by default each run builds in its private directory.
    if os.environ.get("LETHE_SANDBOX_EXTENSIONS_DIR"):
        env["TORCH_EXTENSIONS_DIR"] = os.environ["LETHE_SANDBOX_EXTENSIONS_DIR"]
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    if base is not None:
        for k, v in base.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
    return env


def run_isolated(
    target: str,
    payload: dict | None = None,
    arrays: dict[str, np.ndarray] | None = None,
    *,
    timeout_s: float = 120.0,
    memory_mb: int = 8192,
    max_output_bytes: int = 1 << 20,
    device: str = "cpu",
    env: dict[str, str | None] | None = None,
    workdir: str | os.PathLike | None = None,
    startup_timeout_s: float = 180.0,
    omp_threads: int = 1,
    preload: tuple[str, ...] = ("numpy", "torch"),
    nproc: int = 256,
    gpu_memory_fraction: float | None = None,
    tail_bytes: int = 16384,
    max_file_mb: int | None = 4096,
    start: str | None = None,
    read_paths: tuple[str, ...] = (),
    disk_slack_mb: int | None = None,
) -> SandboxResult:
    """Call ``target`` ("pkg.module:function") as ``function(payload, arrays, workdir)`` in a fresh process.

    The function must return ``(result: dict JSON-able, arrays: dict[str, np.ndarray])``. Whatever it does
    instead (hang, crash, exit, flood, exhaust memory, return junk) becomes a precise ``status`` on the
    returned SandboxResult; this function itself does not raise for anything the child does.

    ``timeout_s`` is the candidate's wall-clock budget, counted from the moment the child has finished its
    trusted preload (importing torch can take seconds on a loaded machine and is not the candidate's time);
    ``startup_timeout_s`` bounds that preload. ``memory_mb`` is the candidate's budget above the preload:
    RLIMIT_AS on CPU, and in every mode a watch of the whole process tree's RSS.
    ``env`` entries override the defaults (a value of None removes a variable).
    ``start`` picks how the fresh process is made: ``"spawn"`` (a new interpreter), ``"zygote"`` (forked
    from a clean process that has already imported the preload; much faster) or None (environment variable
    ``LETHE_SANDBOX_START``, else ``DEFAULT_START``). A zygote that cannot serve the run (failed to start,
    refused, or died mid-run before a result came back) makes the run fall back to, or re-run in, spawn mode;
    ``res.start`` and ``res.start_note`` say what happened.
    ``read_paths`` are paths outside the run directory the child must reach (read-only), e.g. a prebuilt
    extension store (:mod:`lethe.sandbox.extensions`) under a home directory the leased uid cannot traverse.
    ``max_file_mb`` caps each file the child writes (RLIMIT_FSIZE); its run directory as a whole may grow by
    that plus ``disk_slack_mb`` (default DISK_SLACK_MB), checked every DISK_POLL_S, and a run that floods it
    with files, or writes there while the disk is nearly full, is stopped too (status ``output_flood``): one
    candidate filling the disk would otherwise make every later reference and result write fail.
    """
    if device not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or 'cuda', got {device!r}")
    if ":" not in target:
        raise ValueError(f"target must look like 'pkg.module:function', got {target!r}")
    mode = resolve_start(start)
    args = (target, payload, arrays, timeout_s, memory_mb, max_output_bytes, device, env, startup_timeout_s,
            omp_threads, tuple(preload), nproc, gpu_memory_fraction, tail_bytes, max_file_mb, tuple(read_paths),
            disk_slack_mb)
    if mode == "zygote":
        from lethe.sandbox.zygote import ZygoteUnavailable

        try:
            return _attempt("zygote", workdir, *args)
        except ZygoteUnavailable as exc:
            note = f"zygote unavailable ({exc}); ran spawned"
        except _ZygoteLost:
            note = "the zygote died while this run was in flight, before it returned a result; re-ran spawned"
        res = _attempt("spawn", workdir, *args)
        res.start_note = note
        return res
    return _attempt("spawn", workdir, *args)


def warm_up(device: str = "cpu", env: dict[str, str | None] | None = None, omp_threads: int = 1,
            preload: tuple[str, ...] = ("numpy", "torch")) -> None:
    """Start, in the background, the zygote that a later ``run_isolated`` with these arguments will fork from.

    A command-line verification pays the zygote's import of the preload once per invocation; started first, that
    import overlaps the command's own start-up (importing the verifier, reading the reference cache). Never
    raises and never waits: a zygote that cannot start is the later run's business (it falls back to spawn)."""
    if resolve_start(None) != "zygote":
        return
    from lethe.sandbox import zygote as Z

    tmp = Path(tempfile.mkdtemp(prefix="lethe-warm-"))
    try:
        Z.acquire(_child_env(env, tmp, device, omp_threads), tuple(preload), device, omp_threads)
    except Exception:  # noqa: BLE001 - warming is an optimisation only
        pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def resolve_start(start: str | None) -> str:
    """The start mode a call gets: the argument, else ``LETHE_SANDBOX_START``, else ``DEFAULT_START``."""
    if start is None:
        start = os.environ.get("LETHE_SANDBOX_START", "").strip() or DEFAULT_START
    if start not in START_MODES:
        raise ValueError(f"start must be one of {START_MODES}, got {start!r}")
    return start


class _ZygoteLost(Exception):
    """The zygote died while our forked child ran and no result had arrived: the run's outcome is unknown."""


def _isolation_plan() -> dict:
    """How this run will be isolated: a uid lease to take (``lease``), or the report that says why not."""
    mode = isolation.mode()
    if mode == "off":
        return {"lease": None, "require": False,
                "report": isolation.off_report("switched off (LETHE_ISOLATION=off)")}
    why = isolation.unavailable_reason()
    if why is not None:
        return {"lease": None, "require": mode == "require", "report": isolation.off_report(why)}
    isolation.harden_self()
    return {"lease": isolation.UidLease(), "require": mode == "require", "report": None}


def _attempt(mode, workdir, *args) -> SandboxResult:
    iso = _isolation_plan()
    if iso["require"] and iso["lease"] is None:
        return SandboxResult(status="error", start=mode, isolation=iso["report"]["isolation"],
                             detail="sandbox harness error: isolation required (LETHE_ISOLATION=require) but "
                                    f"unavailable: {iso['report']['isolation']}")
    root = Path(tempfile.mkdtemp(prefix="lethe-sbx-"))
    io_dir = root / "io"
    io_dir.mkdir()
    own_work = workdir is None
    work = root / "work" if own_work else Path(workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    owner = None if own_work else os.stat(work)
    try:
        res = _run(mode, root, io_dir, work, iso, *args)
    finally:
        lease = iso["lease"]
        if lease is not None:
            # Everything the run's uid still runs (a daemon that double-forked away, say) dies here.
            lease.release()
        if owner is not None and lease is not None:
            isolation.give_back(work, owner.st_uid, owner.st_gid)
        shutil.rmtree(root, ignore_errors=True)
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return res


def _spawn_child(child_env, work, w_fd, hold_r):
    return subprocess.Popen(
        [sys.executable, "-m", "lethe.sandbox.child", str(w_fd), str(hold_r)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        pass_fds=(w_fd, hold_r),
        cwd=str(work),
        env=child_env,
        start_new_session=True,
        close_fds=True,
    )


def _fork_child(child_env, work, w_fd, hold_r, device, omp_threads, preload, deadline, pid_namespace):
    """Ask the zygote for this run's key to fork the child. Returns the ZygoteProc, or None when the
    startup budget ran out (the zygote still importing its preload, or too busy to fork in time)."""
    from lethe.sandbox import zygote as Z

    try:
        z = Z.acquire(child_env, preload, device, omp_threads)
    except OSError as exc:  # could not start it (out of fds, processes, memory): spawn instead
        raise Z.ZygoteUnavailable(f"could not start a zygote: {type(exc).__name__}: {exc}") from exc
    if not z.ready.wait(max(0.0, deadline - time.monotonic())):
        return None
    if not z.alive():
        raise Z.ZygoteUnavailable(f"zygote exited during its preload: {z.log_tail(1000)!r}")
    in_r, in_w = os.pipe()
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    left = max(0.0, deadline - time.monotonic())
    try:
        proc = z.spawn(child_env, str(work), [in_r, out_w, err_w, w_fd, hold_r], timeout=min(left, _FORK_WAIT_S),
                       pid_namespace=pid_namespace)
    except BaseException as exc:
        for fd in (in_w, out_r, err_r):
            os.close(fd)
        if isinstance(exc, Z.ZygoteTimeout):
            if left <= _FORK_WAIT_S:
                return None
            # A healthy zygote forks in milliseconds even on a loaded machine: this one is stuck (stopped by a
            # candidate, say). Replace it, and run this one spawned with its own startup budget.
            z.proc.kill()
            raise Z.ZygoteUnavailable(f"zygote did not fork within {_FORK_WAIT_S:g} s; killed it") from exc
        if isinstance(exc, OSError):
            raise Z.ZygoteUnavailable(f"could not hand the run to the zygote: {type(exc).__name__}: {exc}") from exc
        raise
    finally:
        for fd in (in_r, out_w, err_w):
            os.close(fd)
    proc.stdin = os.fdopen(in_w, "wb")
    proc.stdout = os.fdopen(out_r, "rb", buffering=0)
    proc.stderr = os.fdopen(err_r, "rb", buffering=0)
    return proc


def _run(mode, root, io_dir, work, iso, target, payload, arrays, timeout_s, memory_mb, max_output_bytes, device, env,
         startup_timeout_s, omp_threads, preload, nproc, gpu_memory_fraction, tail_bytes, max_file_mb, read_paths=(),
         disk_slack_mb=None):
    t_start = time.monotonic()
    inputs_path = None
    if arrays:
        for k, v in arrays.items():
            if not isinstance(v, np.ndarray) or v.dtype.hasobject:
                raise TypeError(f"input array {k!r} must be a numpy array of non-object dtype")
        inputs_path = io_dir / "inputs.arrays"
        arrays_io.write(inputs_path, arrays, digest=False)
    nonce = secrets.token_hex(16)
    nproc_limit = None
    if iso["lease"] is not None:
        # A fresh uid runs nothing else, so RLIMIT_NPROC (which root ignores) counts exactly this run's tasks.
        nproc_limit = nproc
    elif os.geteuid() != 0 and psutil is not None:
        # RLIMIT_NPROC counts every task of the uid, not just ours: the limit is "what exists now + nproc".
        uid = os.getuid()
        count = 0
        for p in psutil.process_iter(["uids", "num_threads"]):
            try:
                if p.info["uids"] and p.info["uids"].real == uid:
                    count += p.info["num_threads"] or 1
            except Exception:  # noqa: BLE001
                pass
        nproc_limit = count + nproc
    cfg = {
        "nonce": nonce,
        "target": target,
        "payload": payload or {},
        "inputs": str(inputs_path) if inputs_path else None,
        "outputs": str(io_dir / "outputs.arrays"),
        "memory_mb": memory_mb,
        "device": device,
        "preload": list(preload),
        "nproc_limit": nproc_limit,
        "gpu_memory_fraction": gpu_memory_fraction,
        "max_file_mb": max_file_mb,
    }
    child_env = _child_env(env, work, device, omp_threads)
    if iso["lease"] is not None:
        uid = iso["lease"].acquire()
        rw = [root] if root in work.parents else [root, work]
        isolation.give_to(uid, rw)
        cfg["isolate"] = {"uid": uid, "rw": [str(p) for p in rw], "ro": [str(p) for p in read_paths],
                          "require": iso["require"],
                          "pdeathsig": mode == "zygote"}
    else:
        cfg["isolation_report"] = iso["report"]
    cfg_bytes = json.dumps(cfg).encode("utf-8")

    r_fd, w_fd = os.pipe()
    # Second pipe: the child waits on it after reporting, so it stays alive (as subreaper of any orphans)
    # until the parent has cleaned up its descendants; closing our end releases it.
    hold_r, hold_w = os.pipe()
    try:
        if mode == "zygote":
            proc = _fork_child(child_env, work, w_fd, hold_r, device, omp_threads, preload,
                               t_start + startup_timeout_s, "isolate" in cfg)
        else:
            proc = _spawn_child(child_env, work, w_fd, hold_r)
    except BaseException:
        os.close(r_fd)
        os.close(hold_w)
        raise
    finally:
        os.close(w_fd)
        os.close(hold_r)
    if proc is None:
        os.close(r_fd)
        os.close(hold_w)
        return SandboxResult(status="timeout", start=mode, startup_seconds=time.monotonic() - t_start,
                             detail=f"exceeded {startup_timeout_s:g} s startup (preload) wall clock "
                                    f"(waiting for the zygote to import its preload or to fork)")
    lock = threading.Lock()
    counter = [0]
    d_out = _Drain(proc.stdout, tail_bytes, counter, lock)
    d_err = _Drain(proc.stderr, tail_bytes, counter, lock)
    chan = _Channel(r_fd, nonce)
    for t in (d_out, d_err, chan):
        t.start()
    try:
        proc.stdin.write(cfg_bytes)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass

    seen: dict[int, Any] = {}
    reason = None  # what the sandbox itself decided: timeout / oom / output_flood
    reason_detail = ""
    last_pss = 0.0
    budget_rss = None
    cand_pid = None  # the candidate's process, known from its ready message (_candidate_root)
    # The run's writable directories (its own root, and the caller's work directory when outside it); what it
    # may add there: one result file at the cap and the slack for compiler caches and scratch.
    disk_paths = [root] if root in work.parents else [root, work]
    disk_budget = None if max_file_mb is None else (int(max_file_mb) + int(disk_slack_mb or DISK_SLACK_MB)) << 20
    disk_base = _disk_use(disk_paths)[0]  # the inputs, written above, before the child exists
    last_disk = 0.0
    try:
        while True:
            if proc.poll() is not None:
                break
            if chan.done is not None:
                break
            now = time.monotonic()
            if chan.ready_at is None:
                if now - t_start > startup_timeout_s:
                    reason, reason_detail = "timeout", f"exceeded {startup_timeout_s:g} s startup (preload) wall clock"
                    break
            else:
                if budget_rss is None:
                    budget_rss = int(chan.ready.get("rss", 0)) + memory_mb * (1 << 20)
                if now - chan.ready_at > timeout_s:
                    reason, reason_detail = "timeout", f"exceeded {timeout_s:g} s wall clock"
                    break
            with lock:
                flooded = counter[0] > max_output_bytes
            if flooded:
                reason = "output_flood"
                reason_detail = f"wrote more than {max_output_bytes} bytes to stdout/stderr"
                break
            for p in _tree(proc.pid):
                seen[p.pid] = p
            if chan.ready_at is not None and now - last_disk >= DISK_POLL_S:
                last_disk = now
                why = _disk_verdict(disk_paths, disk_base, disk_budget)
                if why:
                    reason, reason_detail = "output_flood", why
                    break
            if budget_rss is not None:
                if cand_pid is None:
                    cand_pid = _candidate_root(proc.pid, chan.ready)
                rss, procs = _tree_rss(cand_pid)
                if rss > budget_rss and now - last_pss >= 0.2:
                    last_pss = now
                    used = _tree_pss(procs) if len(procs) > 1 else rss
                    if used > budget_rss:
                        reason = "oom"
                        reason_detail = (f"process tree memory {used >> 20} MB exceeded the {memory_mb} MB budget "
                                         f"(+{(budget_rss >> 20) - memory_mb} MB preload)")
                        break
            chan.event.wait(_POLL_S)
            chan.event.clear()

        if chan.done is not None and reason is None:
            # The child reported and now waits on the hold pipe: clean up its descendants while it still holds
            # them, then let it leave on its own (exit code 0) before the final sweep.
            _kill_descendants(cand_pid or _candidate_root(proc.pid, chan.ready), seen)
            os.close(hold_w)
            hold_w = None
            try:
                proc.wait(timeout=5.0)
            except subprocess.TimeoutExpired:
                pass
        if hold_w is not None:
            os.close(hold_w)
            hold_w = None
        _kill_everything(proc, cand_pid or _candidate_root(proc.pid, chan.ready), seen)
    except BaseException:
        # Interrupted (Ctrl-C, a bug here): never leave an untrusted process tree running behind us.
        _kill_everything(proc, cand_pid or _candidate_root(proc.pid, chan.ready), seen)
        if hold_w is not None:
            os.close(hold_w)
        if mode == "zygote":
            proc.release()
        raise
    try:
        rc = proc.wait(timeout=10.0)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL not delivered: nothing else to do
        rc = None
    if mode == "zygote":
        proc.release()
    # The channel may still hold a done message written just before exit.
    chan.join(timeout=2.0)
    for d in (d_out, d_err):
        d.join(timeout=2.0)
    for s in (proc.stdout, proc.stderr):
        try:
            s.close()
        except OSError:
            pass
    try:
        os.close(r_fd)
    except OSError:
        pass
    # Measured here, not taken from the child's report: the candidate could lie about its own time.
    seconds = (chan.done_at or time.monotonic()) - (chan.ready_at or t_start)
    startup = (chan.ready_at - t_start) if chan.ready_at else time.monotonic() - t_start
    with lock:
        flooded = counter[0] > max_output_bytes

    res = SandboxResult(
        status="error",
        returncode=rc,
        signal=_signame(rc),
        stdout_tail=d_out.tail(),
        stderr_tail=d_err.tail(),
        seconds=seconds,
        startup_seconds=startup,
        start=mode,
    )
    if chan.ready is not None:
        res.isolation = str(chan.ready.get("isolation", ""))[:400]
        res.tamper_proof = bool(chan.ready.get("tamper_proof")) and res.isolation in isolation.TAMPER_PROOF
    else:
        res.isolation = "unknown: the child ended before it reported its isolation"
    done = chan.done
    if mode == "zygote" and proc.lost and done is None:
        raise _ZygoteLost()
    if reason is None and flooded:
        reason = "output_flood"
        reason_detail = f"wrote more than {max_output_bytes} bytes to stdout/stderr"
    if reason is not None:
        res.status, res.detail = reason, reason_detail
        return res
    if done is not None:
        return _from_done(res, done, io_dir / "outputs.arrays")
    if chan.overflow:
        res.status, res.detail = "bad_result", f"result channel exceeded {_MAX_CHANNEL_BYTES} bytes"
        return res
    if rc is not None and rc < 0:
        res.status = "crash"
        res.detail = f"killed by {res.signal or f'signal {-rc}'}"
        if rc == -signal.SIGKILL:
            res.detail += " (not sent by the sandbox: the process itself or the kernel's OOM killer)"
        if chan.ready is None:
            res.detail += " during startup"
        return res
    res.status = "exit"
    if chan.ready is None:
        res.detail = f"exited with code {rc} during startup, before the target was loaded"
        res.status = "error"
    else:
        res.detail = (f"process exited with code {rc} before returning a result "
                      f"(os._exit, exit from a thread, or the result channel was closed)")
    return res


def _signame(rc: int | None) -> str | None:
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _from_done(res: SandboxResult, done: dict, npz_path: Path) -> SandboxResult:
    status = done.get("status")
    res.detail = str(done.get("detail", ""))[:8000]
    if status not in STATUSES or status in ("timeout", "output_flood"):
        res.status, res.detail = "bad_result", f"child reported an unknown status {status!r}"
        return res
    if status != "ok":
        res.status = status
        return res
    try:
        result = json.loads(done["result"])
        if not isinstance(result, dict):
            raise ValueError(f"result is {type(result).__name__}")
    except (KeyError, TypeError, ValueError) as exc:
        res.status, res.detail = "bad_result", f"result is not a JSON object: {exc}"
        return res
    out_arrays: dict[str, np.ndarray] = {}
    sha = done.get("arrays_sha256")
    if sha is not None:
        try:
            # One read into one buffer, hashed as it arrives (arrays_io.read_raw).
            data, got = arrays_io.read_raw(npz_path)
        except OSError as exc:
            res.status, res.detail = "bad_result", f"output arrays missing: {exc}"
            return res
        if data is None or not secrets.compare_digest(got, str(sha)):
            res.status, res.detail = "bad_result", "output arrays file does not match the reported SHA-256"
            return res
        try:
            # Views into one writable buffer: no per-array copy (lethe.sandbox.arrays validates the header).
            out_arrays = arrays_io.parse(data)
        except Exception as exc:  # noqa: BLE001 - untrusted file: any parse failure is the candidate's
            res.status, res.detail = "bad_result", f"output arrays unreadable: {type(exc).__name__}: {exc}"
            return res
    res.status, res.result, res.arrays = "ok", result, out_arrays
    return res
