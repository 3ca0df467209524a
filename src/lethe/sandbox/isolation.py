"""Operating-system isolation of a sandboxed child: its own uid, no capabilities, its own namespaces, a read-only
file system.

Why the operating system and not Python: a candidate kernel is arbitrary code in its own process, so any guard
written in Python inside that process can be undone by the candidate. What it cannot undo is what the kernel
enforces on its credentials and mounts. The parent (``lethe.sandbox.runner``) leases a fresh unprivileged uid for
each run (:class:`UidLease`); the child, while it is still root and single-threaded, calls :func:`enter` before any
candidate code runs:

1. ``unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)``: a private mount table, no network
   (only a down loopback), private System V IPC.
2. A pid namespace of the run's own, in which the candidate runs as pid 2 beside a trusted init (pid 1). A
   zygote forks the child straight into one it made (:func:`make_pid_namespace`); a spawned child makes it
   here (:func:`_enter_pid_namespace`, which says why pid 2 and why two children) and becomes the *outer*
   process, which only waits and then exits exactly as the candidate's process did (same code, or death by
   the same signal), so the runner's classification of a run is unchanged.
3. Mounts (private to that namespace, nothing propagates back): a fresh procfs of the new pid namespace on
   ``/proc``; a private tmpfs on ``/dev/shm``; for every directory that the run's uid could not traverse but
   the interpreter needs (``/root`` on a pyenv machine), a tmpfs over it with bind mounts of exactly the needed
   entries; the run directory bound onto itself; then the whole tree made read-only recursively
   (``mount_setattr``), and only the run directory and ``/dev/shm`` writable again.
4. Credentials: supplementary groups cleared, every capability dropped from the bounding set, ``no_new_privs``
   (a set-uid binary cannot give root back), then real/effective/saved uid and gid set to the leased id, which
   clears the permitted and effective capability sets.

What that buys, each enforced by the kernel: the candidate cannot read another process's memory or environment
(``/proc/<pid>/mem`` and ``environ`` need ptrace access to a process of another uid), cannot signal or ptrace the
verifier, the zygote, the reference process or another candidate (different uids, no CAP_KILL / CAP_SYS_PTRACE),
cannot write outside its run directory (read-only mounts it cannot remount without CAP_SYS_ADMIN), cannot reach
the network, and every process it creates carries the leased uid, which it cannot shed: the parent finds and
kills all of them by uid after the run (:func:`sweep_uid`), including double-forked daemons re-parented to init.
RLIMIT_NPROC, which root ignores, bounds a fork bomb because the uid is not root. The pid namespace adds that the
candidate cannot even see or name any process outside its run (its ``/proc`` lists the namespace's init, itself
and its own children; the verifier's pid names nothing there), and that when the init exits the kernel kills
everything left in the namespace. The parent still sees the whole tree in its own numbering: the candidate's
process reports its outer pid (``outer_pid``) before any candidate code runs, and the runner accounts memory,
walks ``/proc/<pid>/task/*/children`` and clears descendants from that process; the namespace's init and the
outer process are in the child's process group, and the runner's SIGSTOP/SIGKILL, sent from the parent's
namespace, reach an init as they reach any process.

Where a mechanism is unavailable (not root, no mount_setattr, a kernel that refuses namespaces) the child runs
with whatever could be applied, and :func:`enter` says exactly what in its report; the verifier copies that into
every row (``isolation``) and calls a row tamper-proof only when everything applied. The pid namespace is the one
exception: it hides processes, it does not protect the verifier (the uid does), so where the kernel refuses it
(or the fresh /proc) everything else still makes the row tamper-proof, and the row's sentence
(:data:`FULL_WITHOUT_PID_NAMESPACE` instead of :data:`FULL`) does not claim it; the report's ``pid_namespace``
says why. ``LETHE_ISOLATION=off`` switches isolation off explicitly (the rows then say so); ``require`` makes a
run that cannot be fully isolated fail as a harness error instead of running weaker.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import secrets
import signal
import stat
import sys
import time
from pathlib import Path

MODES = ("auto", "require", "off")
# Leased uids/gids: far above any real account (useradd stops at 60000; container ranges start at 100000 and
# are 65536 wide), and spread so that concurrent verifiers on one host rarely even probe the same slot.
UID_BASE = 1_800_000_000
UID_SLOTS = 1 << 20
LOCK_DIR = Path(os.environ.get("LETHE_UID_LOCK_DIR", "/run/lethe-uids" if os.path.isdir("/run") else "/tmp/.lethe-uids"))
SHM_MB = 64
KERNEL_FS = ("/dev", "/proc", "/sys")

# What a fully isolated row says; deterministic (no uid number), so rows stay bit-identical across runs. The pid
# namespace hides the machine's processes from the candidate but is not what makes a row tamper-proof (the uid
# is), so a machine that refuses it still gets tamper-proof rows, with the sentence that does not claim it.
_FULL = ("os: own uid, no capabilities, no_new_privs, mount+net+ipc+uts{pid} namespaces, read-only file system "
         "outside the run directory")
FULL = _FULL.format(pid="+pid")
FULL_WITHOUT_PID_NAMESPACE = _FULL.format(pid="")
TAMPER_PROOF = (FULL, FULL_WITHOUT_PID_NAMESPACE)

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUTS = 0x04000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWNET = 0x40000000
_CLONE_NEWPID = 0x20000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_AT_RECURSIVE = 0x8000
_MOUNT_ATTR_RDONLY = 0x1
_SYS_MOUNT_SETATTR = {"x86_64": 442, "aarch64": 442}
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    return _libc


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def mode() -> str:
    """The isolation mode of this process: ``LETHE_ISOLATION`` (auto | require | off), default auto."""
    m = os.environ.get("LETHE_ISOLATION", "auto").strip() or "auto"
    if m not in MODES:
        raise ValueError(f"LETHE_ISOLATION must be one of {MODES}, got {m!r}")
    return m


def unavailable_reason() -> str | None:
    """Why this process cannot isolate a child at all (None when it can try): only root can lease uids and
    create namespaces without a user namespace."""
    if not sys.platform.startswith("linux"):
        return f"not Linux ({sys.platform})"
    if os.geteuid() != 0:
        return f"the verifier runs as uid {os.geteuid()}, not root: it cannot give children another uid"
    return None


def harden_self() -> None:
    """Make the calling (verifier) process non-dumpable: belt and braces beside the uid separation, since a
    non-dumpable process's /proc/<pid>/mem, environ and fds need CAP_SYS_PTRACE to open."""
    try:
        _c().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - not Linux: nothing to harden
        pass


# ---------------------------------------------------------------------------------------------- parent side


def processes_of_uid(uid: int) -> list[int]:
    """Pids whose real, effective or saved uid is ``uid`` (read from /proc; the candidate cannot hide from it)."""
    out = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        ids = [int(x) for x in line.split()[1:4]]
                        if uid in ids:
                            out.append(int(name))
                        break
        except (OSError, ValueError):
            continue
    return out


def sweep_uid(uid: int, *, max_s: float = 10.0) -> int:
    """Stop, then kill, every process of ``uid`` until none is left; returns how many were killed.

    The uid is the run's unforgeable tag (no capabilities, no_new_privs: a process cannot change it), so this
    finds orphans re-parented to init and double-forked daemons as well as the child's own tree. Stopping
    first means a fork bomb cannot replace its killed members faster than they are found."""
    killed = 0
    deadline = time.monotonic() + max_s
    while True:
        pids = processes_of_uid(uid)
        if not pids:
            return killed
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except (ProcessLookupError, PermissionError):
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except (ProcessLookupError, PermissionError):
                pass
        if time.monotonic() > deadline:
            return killed
        time.sleep(0.002)


class UidLease:
    """An unprivileged uid that no other live run on this host holds, for one run.

    The lease is an exclusive ``flock`` on a per-slot file in a root-only directory, so a crashed verifier's
    leases are released by the kernel with its descriptors. A slot is taken only after any process still
    carrying that uid (left by a verifier that died before sweeping) has been killed."""

    def __init__(self) -> None:
        self.uid: int | None = None
        self._fd: int | None = None

    def acquire(self) -> int:
        LOCK_DIR.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(LOCK_DIR, 0o700)
        start = secrets.randbelow(UID_SLOTS)
        for i in range(4096):
            slot = (start + i) % UID_SLOTS
            fd = os.open(LOCK_DIR / f"{slot}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self.uid, self._fd = UID_BASE + slot, fd
            sweep_uid(self.uid)
            return self.uid
        raise OSError("no free sandbox uid slot")

    def release(self) -> int:
        """Kill whatever still runs under the uid, then free the slot; returns how many processes were killed."""
        killed = 0
        if self.uid is not None:
            killed = sweep_uid(self.uid)
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
        self.uid = self._fd = None
        return killed


def give_to(uid: int, paths: list[Path]) -> None:
    """Hand the run's private directories (and what the parent put in them) to the run's uid, mode 0700, so
    the child can write there and no other uid can enter."""
    for top in paths:
        _chown_tree(top, uid, uid, dir_mode=0o700)


def give_back(top: Path, uid: int, gid: int) -> None:
    """Return a caller's work directory, and whatever the run's uid wrote into it, to its owner."""
    _chown_tree(top, uid, gid, strict=False)


def _chown_tree(top: Path, uid: int, gid: int, *, dir_mode: int | None = None, strict: bool = True) -> None:
    for dirpath, dirnames, filenames in os.walk(top):
        # Symlinks to directories are listed in dirnames and not walked: chown the link itself, never its target.
        for path in [dirpath, *(os.path.join(dirpath, n) for n in filenames + (dirnames if not strict else []))]:
            try:
                os.chown(path, uid, gid, follow_symlinks=False)
            except OSError:
                if strict:
                    raise
        if dir_mode is not None:
            os.chmod(dirpath, dir_mode)


# ----------------------------------------------------------------------------------------------- child side


def _mount(src: str | None, dst: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(_c().mount(enc(src), enc(dst), enc(fstype), flags, enc(data)), f"mount {dst}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


def _setattr(path: str, *, set_: int = 0, clr: int = 0, recursive: bool = False) -> None:
    nr = _SYS_MOUNT_SETATTR.get(os.uname().machine)
    if nr is None:
        raise OSError(0, f"mount_setattr: unknown syscall number on {os.uname().machine}")
    attr = _MountAttr(set_, clr, 0, 0)
    libc = _c()
    libc.syscall.restype = ctypes.c_long
    rc = libc.syscall(ctypes.c_long(nr), ctypes.c_int(-100), ctypes.c_char_p(path.encode()),
                      ctypes.c_uint(_AT_RECURSIVE if recursive else 0), ctypes.byref(attr),
                      ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(int(rc), f"mount_setattr {path}")


def _blocked_ancestors(paths: list[str], uid: int) -> dict[str, set[str]]:
    """Directories on the way to ``paths`` that ``uid`` (not their owner, no capabilities) could not traverse,
    each with the names of the entries under it that the paths need."""
    out: dict[str, set[str]] = {}
    for p in paths:
        parts = Path(p).parts
        cur = "/"
        for name in parts[1:]:
            try:
                st = os.stat(cur)
            except OSError:
                break
            if stat.S_ISDIR(st.st_mode) and st.st_uid != uid and not st.st_mode & stat.S_IXOTH:
                out.setdefault(cur, set()).add(name)
            cur = os.path.join(cur, name)
    return out


def _needed_paths(rw: list[str]) -> list[str]:
    need = {os.path.realpath(sys.executable), sys.prefix, sys.base_prefix, sys.exec_prefix, *rw}
    # A shared, prebuilt extension cache (LETHE_SANDBOX_EXTENSIONS_DIR) may live outside the run directory.
    for var in ("TORCH_EXTENSIONS_DIR", "TRITON_CACHE_DIR"):
        if os.environ.get(var) and os.path.isdir(os.environ[var]):
            need.add(os.path.realpath(os.environ[var]))
    # Every imported module lives under one of these (the import system found it there); walking sys.modules
    # instead would cost a realpath per module, thousands with torch loaded, on every run.
    for p in sys.path + os.environ.get("PYTHONPATH", "").split(os.pathsep):
        if p and os.path.exists(p):
            need.add(os.path.realpath(p))
    return sorted(need)


def _open_views(blocked: dict[str, set[str]]) -> None:
    """Replace each untraversable directory by a tmpfs (mode 0755) that holds bind mounts of only the entries the
    interpreter needs: the run's uid can then reach the Python installation under /root, and nothing else there."""
    for top in sorted(blocked, key=lambda d: d.count("/")):
        fds = {}
        for name in sorted(blocked[top]):
            src = os.path.join(top, name)
            if os.path.lexists(src):
                fds[name] = (os.open(src, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC), os.path.isdir(src)
                             and not os.path.islink(src), os.path.islink(src), os.readlink(src)
                             if os.path.islink(src) else None)
        _mount("lethe-view", top, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
        for name, (fd, is_dir, is_link, target) in fds.items():
            dst = os.path.join(top, name)
            if is_link:
                os.symlink(target, dst)
            else:
                if is_dir:
                    os.mkdir(dst)
                else:
                    open(dst, "w").close()
                _mount(f"/proc/self/fd/{fd}", dst, None, _MS_BIND | _MS_REC)
            os.close(fd)


def enter(uid: int, rw: list[str], *, pdeathsig: bool = False, ro: list[str] = ()) -> dict:
    """Isolate the calling process (root, single-threaded, no candidate code run yet); returns the report
    ``{"isolation": str, "tamper_proof": bool, "applied": [...], "missing": [...], "pid_namespace": "applied" or
    why not, "outer_pid": int}`` in the process that goes on to run the candidate (inside a pid namespace, that
    is a child of the caller; the caller then never returns, see :func:`_enter_pid_namespace`).
    ``outer_pid`` is that process's pid in the caller's pid namespace.

    ``ro`` names paths outside the run directory the process must be able to reach (read-only, like everything
    but ``rw``), such as a prebuilt extension store under a home directory the leased uid cannot traverse.

    Each step is attempted in order and verified afterwards (the uid, the capability sets, a write outside the
    run directory); what failed is named in ``missing`` and the report is then not tamper-proof."""
    applied: list[str] = []
    missing: list[str] = []
    libc = _c()
    rw = [os.path.realpath(p) for p in rw]
    cwd = os.getcwd()
    outer_pid = os.getpid()
    pid_ns = "needs the private mount namespace"
    try:
        _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC | _CLONE_NEWUTS), "unshare")
        applied.append("namespaces")
        # Only with a private mount table: the fresh /proc below must not cover the machine's own.
        pid_ns = _enter_pid_namespace(libc)
        # Our pid as the parent sees it, read from the parent's procfs before the fresh one hides it.
        outer_pid = int(os.readlink("/proc/self"))
        _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
        if pid_ns is None:
            pid_ns = _fresh_proc()
        blocked = _blocked_ancestors(_needed_paths(rw) + [os.path.realpath(p) for p in ro if os.path.exists(p)],
                                     uid)
        _open_views(blocked)
        try:
            _mount("lethe-shm", "/dev/shm", "tmpfs", _MS_NOSUID | _MS_NODEV, f"mode=1777,size={SHM_MB}m")
        except OSError:
            pass  # no /dev/shm: nothing to make private
        for p in rw:
            _mount(p, p, None, _MS_BIND | _MS_REC)
        _setattr("/", set_=_MOUNT_ATTR_RDONLY, recursive=True)
        for p in rw + (["/dev/shm"] if os.path.ismount("/dev/shm") else []):
            _setattr(p, clr=_MOUNT_ATTR_RDONLY)
        # The kernel's own file systems stay as they were: the CUDA driver fails (error 304) under a read-only
        # /dev, and what the leased uid may write there, in /proc or /sys is already decided by ownership and
        # mode (root's files; its own /proc/self).
        for p in KERNEL_FS:
            if os.path.ismount(p):
                _setattr(p, clr=_MOUNT_ATTR_RDONLY, recursive=True)
        applied.append("read-only file system")
    except OSError as exc:
        missing.append(f"mount isolation ({exc.strerror or exc})")
    # The cwd still names the directory under the new bind mount's old dentry: re-enter it through the mount.
    try:
        os.chdir(cwd)
    except OSError:
        pass
    gpu_groups = _device_groups()
    try:
        os.setgroups(gpu_groups)
        os.setresgid(uid, uid, uid)
        last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        for cap in range(last + 1):
            libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
        _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        os.setresuid(uid, uid, uid)
        applied.append("uid")
    except OSError as exc:
        missing.append(f"uid switch ({exc.strerror or exc})")
    if pdeathsig:
        # Changing credentials clears the parent-death signal: set it again.
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    missing += _verify(uid, rw, gpu_groups)
    if pid_ns is None:
        applied.insert(applied.index("namespaces") + 1, "pid namespace")
    ok = not missing
    full = FULL if pid_ns is None else FULL_WITHOUT_PID_NAMESPACE
    return {"isolation": full if ok else "partial: missing " + "; ".join(missing) + (
        f" (applied: {', '.join(applied)})" if applied else ""), "tamper_proof": ok,
        "applied": applied, "missing": missing, "pid_namespace": pid_ns or "applied", "outer_pid": outer_pid}


def _enter_pid_namespace(libc) -> str | None:
    """Move the rest of this run into a new pid namespace; returns None in the process that goes on to run the
    candidate, or why the namespace is unavailable (then nothing was created). Never returns in the caller.
    A process that a zygote forked into a namespace made for it (:func:`make_pid_namespace`) is already there:
    nothing to do.

    A process cannot enter a pid namespace itself (``unshare(CLONE_NEWPID)`` only places its later children),
    so the caller becomes the *outer* process (the runner's child, which the runner waits for, signals and
    charges nothing to) and makes two children, both in the namespace:

    * pid 1, the namespace's init: ``cat`` reading a pipe that only the outer process can write to (spawned,
      not forked: no copy of this process's memory). It ends on the pipe's end of file, when the outer process
      closes it or dies; the kernel then kills everything left in the namespace, double-forked daemons
      included, before the init's own exit completes;
    * pid 2, the candidate's process, a fork of this one, which returns from here. It is not pid 1 because the
      kernel shields a namespace's init from the signals its own namespace sends it when no handler is
      installed: as pid 1, a candidate that sent itself SIGKILL would survive it (and its row could read
      ``ok``), and ``abort()`` would end by glibc's fallback SIGSEGV, not SIGABRT.

    The outer process waits for the candidate's process, ends the namespace and exits exactly as the candidate's
    process did (same code, or death by the same signal), so the runner's classification is unchanged. The
    outer process and the init stay root and run no candidate code: the candidate's uid cannot signal them, and
    it cannot name the outer one at all."""
    if _made_by_parent:
        return None
    if not pid_namespace_enabled():
        return f"pid namespace (switched off: {PID_NAMESPACE_ENV}=off)"
    try:
        _check(libc.unshare(_CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    except OSError as exc:
        return f"pid namespace ({exc.strerror or exc})"
    hold_r, hold_w = os.pipe()
    try:
        # From here on a failure leaves no sound way on: the next child would become the namespace's init.
        init = _spawn_init(hold_r)
        os.close(hold_r)
        runner = os.fork()
    except OSError:
        os._exit(_EX_OSERR)
    if runner == 0:
        os.close(hold_w)
        return None
    _outer(runner, init, hold_w)
    raise AssertionError("unreachable")  # pragma: no cover - _outer never returns


#: ``LETHE_PID_NAMESPACE=off`` runs the child without its pid namespace (the rows then carry
#: FULL_WITHOUT_PID_NAMESPACE): an escape hatch for a machine whose GPU driver would not work inside one.
PID_NAMESPACE_ENV = "LETHE_PID_NAMESPACE"


def pid_namespace_enabled() -> bool:
    return os.environ.get(PID_NAMESPACE_ENV, "on").strip().lower() not in ("off", "0", "no", "false")


# True in a process that a zygote forked as pid 2 of a namespace it had made for the run (make_pid_namespace).
_made_by_parent = False


def make_pid_namespace() -> tuple[int, int] | None:
    """For a parent that forks the candidate's process itself (the zygote): a new pid namespace with its init
    already spawned, so that the caller's next fork is pid 2 there and no outer process (nor its fork of a
    preloaded image) is needed. Returns the init's pid and the pipe end that keeps it alive (close it when that
    fork has exited: the namespace then ends), or None where the namespace is unavailable. After the fork the
    caller calls :func:`restore_pid_namespace`, and the forked process calls :func:`entered_pid_namespace`."""
    if not pid_namespace_enabled():
        return None
    libc = _c()
    if libc.unshare(_CLONE_NEWPID) != 0:
        return None
    hold_r, hold_w = os.pipe()
    try:
        init = _spawn_init(hold_r)
    except OSError:
        os.close(hold_w)
        restore_pid_namespace()
        return None
    finally:
        os.close(hold_r)
    return init, hold_w


def restore_pid_namespace() -> None:
    """Place this process's later children in its own pid namespace again (undoes :func:`make_pid_namespace`);
    raises if the kernel refuses, since every later fork would then fail."""
    fd = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_c().setns(fd, _CLONE_NEWPID), "setns(own pid namespace)")
    finally:
        os.close(fd)


def entered_pid_namespace() -> None:
    """Called in the process a zygote forked into a namespace of :func:`make_pid_namespace`: :func:`enter` then
    creates none of its own."""
    global _made_by_parent
    _made_by_parent = True


def in_namespace_made_by_parent() -> bool:
    """Whether :func:`entered_pid_namespace` was called in this process."""
    return _made_by_parent


# Exit code of the outer process when it could not set the namespace up (sysexits' EX_OSERR): the runner then
# reports an error during startup, since no candidate code had run.
_EX_OSERR = 71


def _spawn_init(hold_r: int) -> int:
    """Start the namespace's init: ``cat`` with ``hold_r`` as its input and no other descriptor of ours (the
    result channel, the hold pipe and the output pipes must not stay open in it). Where there is no ``cat``, a
    fork of this process does the same."""
    cat = next((p for p in ("/usr/bin/cat", "/bin/cat") if os.access(p, os.X_OK)), None)
    if cat is None:
        pid = os.fork()
        if pid == 0:
            _only_fd(hold_r)
            while os.read(hold_r, 4096):
                pass
            os._exit(0)
        return pid
    # posix_spawn passes on every inheritable descriptor; ours are made close-on-exec for the spawn only.
    shared = []
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fd > 2 and os.get_inheritable(fd):
                shared.append(fd)
        except OSError:
            continue  # the descriptor of the listing itself
    for fd in shared:
        os.set_inheritable(fd, False)
    try:
        return os.posix_spawn(cat, [cat], {}, file_actions=[
            (os.POSIX_SPAWN_DUP2, hold_r, 0),
            (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
            (os.POSIX_SPAWN_DUP2, 1, 2)])
    finally:
        for fd in shared:
            os.set_inheritable(fd, True)


def _only_fd(keep: int) -> None:
    """Close every descriptor but stdio and ``keep``: a helper process must not hold the result channel or the
    hold pipe open (the runner reads their end of file as the candidate's)."""
    os.closerange(3, keep)
    os.closerange(keep + 1, os.sysconf("SC_OPEN_MAX"))
    _c().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)


def _outer(runner: int, init: int, hold_w: int) -> None:
    """The runner's child once the candidate runs in a pid namespace: wait for the candidate's process, end the
    namespace (and with it every process still in it), then exit as the candidate's process did."""
    _only_fd(hold_w)
    _, status = os.waitpid(runner, 0)
    os.close(hold_w)
    os.waitpid(init, 0)
    _exit_like(status)


def _exit_like(status: int) -> None:
    """End this process with the given wait status: the same exit code, or death by the same signal."""
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        import resource

        # The candidate's process had no core dumps either; this one holds nothing worth dumping.
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass  # SIGKILL, SIGSTOP: cannot be caught anyway
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        os.kill(os.getpid(), sig)
    os._exit(_EX_OSERR)


def _fresh_proc() -> str | None:
    """Mount a procfs of the new pid namespace on /proc (in the private mount table), so that the candidate
    lists only its own namespace's processes; None when it is in place, else what went wrong. The driver's
    entries (``/proc/driver/nvidia``, ``/proc/devices``, ``/proc/sys``) are the kernel's, the same in every
    procfs; ``/proc/self`` is the reader's own in either."""
    try:
        _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
    except OSError as exc:
        return f"fresh /proc ({exc.strerror or exc})"
    # Our parent, the outer process, is outside the namespace, which numbers it 0.
    if os.readlink("/proc/self") != str(os.getpid()) or os.getppid() != 0:
        return f"fresh /proc (it shows pid {os.readlink('/proc/self')} for pid {os.getpid()})"
    return None


def _device_groups() -> list[int]:
    """Groups that own GPU device nodes the leased uid could not open otherwise (e.g. ``/dev/nvidia*`` at mode
    0660): the child keeps exactly those as supplementary groups, so CUDA works and nothing else is granted."""
    gids = set()
    for name in ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", *sorted(
            os.path.join("/dev", n) for n in (os.listdir("/dev") if os.path.isdir("/dev") else [])
            if n.startswith("nvidia") and n[6:].isdigit())):
        try:
            st = os.stat(name)
        except OSError:
            continue
        if (st.st_mode & 0o006) != 0o006 and (st.st_mode & 0o060) == 0o060 and st.st_gid != 0:
            gids.add(st.st_gid)
    return sorted(gids)


def _verify(uid: int, rw: list[str], groups: list[int] | None = None) -> list[str]:
    """Check from inside that the credentials and the mounts are what :func:`enter` meant to set."""
    bad = []
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (uid, uid, uid) or sorted(os.getgroups()) != sorted(
            groups or []):
        bad.append(f"credentials are uid {os.getresuid()} gid {os.getresgid()}")
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(("CapEff:", "CapPrm:", "CapBnd:")) and int(line.split()[1], 16):
                bad.append(f"capabilities remain ({line})")
    except OSError:
        bad.append("cannot read /proc/self/status")
    probe_dir = os.path.dirname(rw[0]) if rw else "/"
    # Not named by pid: inside pid namespaces every run's candidate is pid 2, and a concurrent run's probe would
    # make this one's creation fail as if the directory were read-only.
    probe = os.path.join(probe_dir, f".lethe-write-probe-{secrets.token_hex(8)}")
    try:
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.close(fd)
        os.unlink(probe)
        bad.append(f"{probe_dir} is writable")
    except OSError:
        pass
    return bad


def off_report(reason: str) -> dict:
    """The report of a child that was not isolated, for the row."""
    return {"isolation": f"none: {reason}", "tamper_proof": False, "applied": [], "missing": [reason]}
