"""Small child-side functions for exercising the sandbox (the hostile-kernel suite and smoke tests).

These run INSIDE the sandboxed child via ``run_isolated("lethe.sandbox.testing:<name>", ...)``.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np


def run_candidate_forward(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Exec a KernelBench-style candidate source, build ``ModelNew(*init_inputs)`` under a fixed seed and call
    ``forward`` on the input arrays (named ``x0``, ``x1``, ... in order, moved to ``payload["device"]``).

    A tensor output comes back as the array ``out``; anything else is passed through untouched so that the
    sandbox, not this helper, classifies it (``bad_result``). If the model has a ``sandbox_report()`` method
    its dict is returned as ``result["report"]`` (hostile kernels use it to say what they attempted).
    """
    import torch

    src = payload["cand_src"]
    mod = types.ModuleType("candidate")
    mod.__file__ = str(workdir / "cand.py")
    code = compile(src, mod.__file__, "exec")
    exec(code, mod.__dict__)  # noqa: S102 - executing untrusted code is the point; we are in the sandbox
    torch.manual_seed(int(payload.get("seed", 0)))
    model = mod.ModelNew(*payload.get("init_inputs", []))
    device = payload.get("device", "cpu")
    inputs = [torch.from_numpy(arrays[f"x{i}"]).to(device) for i in range(len(arrays))]
    with torch.no_grad():
        out = model(*inputs)
    result: dict = {}
    report = getattr(model, "sandbox_report", None)
    if callable(report):
        result["report"] = report()
    if isinstance(out, torch.Tensor):
        return result, {"out": out.detach().cpu().contiguous().numpy()}
    return result, {"out": out}


def echo(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Return the payload and the arrays doubled: the smallest round trip through the sandbox."""
    return {"payload": payload, "cwd": str(workdir)}, {k: v * 2 for k, v in arrays.items()}


def env_probe(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Report what the child sees: selected environment variables, cwd, temp dir and resource limits."""
    import os
    import resource
    import tempfile

    keys = ["PYTHONHASHSEED", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG", "HOME", "TMPDIR",
            "CUDA_VISIBLE_DEVICES", *payload.get("extra_keys", [])]
    return {
        "env": {k: os.environ.get(k) for k in keys},
        "cwd": os.getcwd(),
        "workdir": str(workdir),
        "gettempdir": tempfile.gettempdir(),
        "rlimit_as": resource.getrlimit(resource.RLIMIT_AS)[0],
        "rlimit_core": resource.getrlimit(resource.RLIMIT_CORE)[0],
        "hash_of_abc": hash("abc"),
        "getuser": _getuser(),
        "uid": os.getuid(),
    }, {}


def _getuser() -> str:
    """getpass.getuser() as torch's cache-path helpers call it, or the error it raises."""
    import getpass

    try:
        return getpass.getuser()
    except Exception as exc:  # noqa: BLE001 - reported, the test decides
        return f"error: {type(exc).__name__}: {exc}"


def fill_disk(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Write ``payload["files"]`` files of ``payload["mb"]`` MiB each into the working directory (synced, so
    the blocks are allocated), pausing ``payload.get("pause_s", 0)`` after each; return how many it wrote."""
    import os
    import time

    chunk = os.urandom(1 << 20) * int(payload["mb"])
    for i in range(int(payload["files"])):
        with open(workdir / f"fill-{i:04d}.bin", "wb") as fh:
            fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        time.sleep(float(payload.get("pause_s", 0)))
    return {"files": int(payload["files"])}, {}


def chatter(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Write ``payload["bytes"]`` bytes to stdout then a marker line; return normally."""
    import sys

    n = int(payload["bytes"])
    line = "." * 1023 + "\n"
    for _ in range(n // 1024):
        sys.stdout.write(line)
    sys.stdout.write("END-OF-CHATTER\n")
    sys.stdout.flush()
    return {"wrote": n}, {}


def hog_and_wait(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Hold ``payload["mb"]`` MB of touched memory, then sleep: the sandbox's RSS watch must stop it."""
    import time

    block = bytearray(int(payload["mb"]) << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(float(payload.get("sleep_s", 30)))
    return {"survived": True}, {}


def fork_and_hang(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Fork ``payload["n"]`` sleepers (half of them leave the process group with setsid), record our pid
    namespace, uid and their pids in ``payload["pid_file"]``, then hang: the timeout must kill all of them."""
    import os
    import time

    pids = []
    for i in range(int(payload["n"])):
        pid = os.fork()
        if pid == 0:
            try:
                if i % 2:
                    os.setsid()
                time.sleep(60)
            finally:
                os._exit(0)
        pids.append(pid)
    with open(payload["pid_file"], "w") as fh:
        # The pid namespace and uid first: inside a namespace of the run's own, these numbers are not the parent's.
        fh.write(" ".join([os.readlink("/proc/self/ns/pid"), str(os.getuid()), *map(str, pids)]))
    while True:
        time.sleep(1)


def process_state(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Report the process state a candidate starts from, for comparing start modes: the whole environment,
    sys.path, argv, signal dispositions and mask, open descriptors, limits, threads, session, CUDA state,
    ``__main__``, interpreter flags, the first draws of the entropy-seeded generators and the CPU time used."""
    import os
    import random
    import resource
    import signal
    import sys
    import tempfile

    def disp(h):
        if h in (signal.SIG_DFL, signal.SIG_IGN):
            return signal.Handlers(h).name
        return "handler" if h is not None else None

    torch = sys.modules.get("torch")
    if payload.get("touch_cuda") and torch is not None and torch.cuda.is_available():
        # A fresh process pays for its own CUDA context in both modes (used by lethe.sandbox.bench).
        torch.zeros(1, device="cuda").sum().item()
    fds = {}
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            fds[name] = os.readlink(f"/proc/self/fd/{name}").split("[")[0]
        except OSError:
            pass  # the descriptor of the listing itself, closed meanwhile
    limits = {n: resource.getrlimit(getattr(resource, n)) for n in
              ("RLIMIT_AS", "RLIMIT_CORE", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_STACK")}
    import ctypes

    libc = ctypes.CDLL(None)
    libc.getenv.restype = ctypes.c_char_p
    # What C code (the CUDA driver, OpenMP, glibc) sees, as opposed to Python's os.environ mapping.
    c_env = {}
    for k in ("HOME", "TMPDIR", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "PYTHONPATH"):
        v = libc.getenv(k.encode())
        c_env[k] = "<unset>" if v is None else v.decode()
    return {
        "pid": os.getpid(),
        "env": dict(os.environ),
        "c_env": c_env,
        "sys_path": list(sys.path),
        "argv_len": len(sys.argv),
        "argv0": sys.argv[0],
        "signals": {s.name: disp(signal.getsignal(s)) for s in signal.valid_signals()
                    if isinstance(s, signal.Signals) and s not in (signal.SIGKILL, signal.SIGSTOP)},
        "sigmask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "fds": fds,
        "limits": {k: list(v) for k, v in limits.items()},
        "threads": len(os.listdir("/proc/self/task")),
        # Inside the run's own pid namespace, made by a spawned child, the leader of our session and group is
        # that child, the sandbox's outer process, which the namespace does not number (0).
        "session_leader": _leader(os.getsid(0)),
        "pgid_leader": _leader(os.getpgid(0)),
        "pidns": os.readlink("/proc/self/ns/pid"),
        "cwd": os.getcwd(),
        "gettempdir": tempfile.gettempdir(),
        "main": sys.modules["__main__"].__spec__.name if sys.modules["__main__"].__spec__ else None,
        "flags": {k: getattr(sys.flags, k) for k in ("optimize", "dont_write_bytecode", "hash_randomization",
                                                     "no_user_site", "isolated", "safe_path")},
        "hash_of_abc": hash("abc"),
        "cuda_initialised": bool(torch.cuda.is_initialized()) if torch is not None else None,
        "torch_threads": torch.get_num_threads() if torch is not None else None,
        "random": random.random(),
        "np_random": float(np.random.random()),
        "umask": os.umask(0o022),
        # CPU this process has used so far (a forked child's count starts at the fork): the start-up cost
        # of each mode without the machine's load in it.
        "cpu_s": sum(resource.getrusage(resource.RUSAGE_SELF)[:2]),
    }, {}


def _leader(pid: int) -> str:
    import os

    return "self" if pid == os.getpid() else "outside the pid namespace" if pid == 0 else "another process"


def numerics(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Deterministic float work through numpy and torch (seeded generator, matmul, reductions,
    transcendental functions, a linear solve): its output bytes must not depend on the start mode."""
    import torch

    torch.manual_seed(int(payload.get("seed", 0)))
    x = torch.randn(96, 96, dtype=torch.float32)
    w = torch.randn(96, 96, dtype=torch.float64)
    rng = np.random.default_rng(int(payload.get("seed", 0)))
    a = rng.standard_normal((64, 64))
    out = {
        "mm": (x @ x.T).numpy(),
        "softmax": torch.softmax(x, dim=-1).numpy(),
        "gelu": torch.nn.functional.gelu(x).numpy(),
        "sum64": w.sum(dim=0).numpy(),
        "solve": np.linalg.solve(a + 64 * np.eye(64), np.ones(64)),
        "exp": np.exp(a).astype(np.float32),
    }
    if arrays:
        out["in_mm"] = arrays["x"] @ arrays["x"]
    return {"torch_initial_seed": int(torch.initial_seed())}, out


def pollute(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Leave every kind of in-process trace a candidate could leave (a patched torch function, a new module,
    a changed attribute of a lethe module, an environment variable, a global RNG draw), then report whether
    traces of an *earlier* run are visible: in a fresh process none may be."""
    import os
    import sys

    import torch

    import lethe.sandbox.testing as me

    seen = {
        "patched_allclose": getattr(torch.allclose, "_lethe_polluted", False),
        "module": "lethe_polluter" in sys.modules,
        "attr": getattr(me, "POLLUTED", False),
        "env": os.environ.get("LETHE_POLLUTED"),
    }

    def fake(*_a, **_k):
        return True

    fake._lethe_polluted = True
    torch.allclose = fake
    sys.modules["lethe_polluter"] = type(sys)("lethe_polluter")
    me.POLLUTED = True
    os.environ["LETHE_POLLUTED"] = "1"
    torch.manual_seed(123)
    return {"seen": seen}, {}


def kill_parent_if_zygote(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Hostile to the zygote mode only: SIGKILL the sandbox zygote, which is our parent process if (and only if)
    that is a zygote (in spawn mode the parent is the verifier itself, which this helper must never touch), or
    the pids of ``payload["zygote_pids"]`` (inside a pid namespace the parent is out of sight), then sleep."""
    import os
    import signal
    import time

    targets = [int(p) for p in payload.get("zygote_pids", [])]
    if not targets:
        ppid = os.getppid()
        try:
            with open(f"/proc/{ppid}/cmdline", "rb") as fh:
                targets = [ppid] if b"--zygote" in fh.read().split(b"\0") else []
        except OSError:
            pass
    time.sleep(float(payload.get("delay_s", 0.0)))
    delivered, refused = 0, set()
    for pid in targets:
        try:
            os.kill(pid, signal.SIGKILL)
            delivered += 1
        except OSError as exc:
            # Isolated (lethe.sandbox.isolation): the zygote runs under another uid and cannot be signalled
            # (PermissionError), or, from a pid namespace of the run's own, not even named (ProcessLookupError).
            refused.add(type(exc).__name__)
    if delivered:
        time.sleep(30)
    out = {"killed": bool(delivered)}
    if refused:
        out["refused"] = " ".join(sorted(refused))
    return out, {}


def sleep_then_echo(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Sleep ``payload["sleep_s"]`` seconds, then return the payload: a well-behaved run that is in flight for
    a while."""
    import time

    time.sleep(float(payload.get("sleep_s", 1.0)))
    return {"payload": payload}, {k: v * 2 for k, v in arrays.items()}


def blas_probe(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """A BLAS matrix product (numpy's OpenBLAS, multi-threaded when ``OPENBLAS_NUM_THREADS`` > 1) and the
    thread count around it: the result bytes and the thread pool must not depend on the start mode."""
    import os

    a = np.random.default_rng(int(payload.get("seed", 0))).standard_normal((256, 256))
    before = len(os.listdir("/proc/self/task"))
    out = a @ a.T
    return {"threads_before": before, "threads_after": len(os.listdir("/proc/self/task"))}, {"out": out}


# A float64 bit pattern no allocator or driver writes by itself (a quiet NaN with a chosen payload).
GPU_SENTINEL = 0x7FF8_1E7E_5EED_0001


def gpu_fill_sentinel(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Fill ``payload["mb"]`` MB of fresh GPU memory with ``GPU_SENTINEL`` and exit, as a reference process
    leaves its float64 outputs behind in device memory."""
    import torch

    n = int(payload["mb"]) * (1 << 20) // 8
    t = torch.full((n,), GPU_SENTINEL, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    return {"filled": int(t.numel())}, {}


def gpu_count_sentinel(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Count ``GPU_SENTINEL`` words in ``payload["mb"]`` MB of uninitialised GPU memory (``torch.empty``), as a
    hostile candidate would look for what an earlier process left there."""
    import torch

    n = int(payload["mb"]) * (1 << 20) // 8
    t = torch.empty((n,), dtype=torch.int64, device="cuda")
    return {"found": int((t == GPU_SENTINEL).sum())}, {}


def pid_view(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """Report which processes the child can see and name: its own pid and parent's, its pid namespace, the pids
    /proc lists, and, for each pid in ``payload["look_for"]`` (numbers from the parent's namespace), whether
    /proc shows it and what signal 0 (an existence and permission probe) to it returns."""
    import os

    found = {}
    for pid in payload.get("look_for", []):
        try:
            os.kill(int(pid), 0)
            probe = "delivered"
        except OSError as exc:
            probe = type(exc).__name__
        found[str(pid)] = {"in_proc": os.path.exists(f"/proc/{int(pid)}"), "signal_0": probe}
    return {"pid": os.getpid(), "ppid": os.getppid(), "pidns": os.readlink("/proc/self/ns/pid"),
            "listed": sorted(int(n) for n in os.listdir("/proc") if n.isdigit()), "found": found}, {}


def die(payload: dict, arrays: dict[str, np.ndarray], workdir: Path):
    """End the process without a result, as ``payload["how"]`` says: ``exit`` (``os._exit(code)``), ``signal``
    (``os.kill(os.getpid(), sig)``), ``abort`` (``os.abort()``) or ``segv`` (a read of address 0)."""
    import os

    how = payload["how"]
    if how == "exit":
        os._exit(int(payload["code"]))
    if how == "signal":
        os.kill(os.getpid(), int(payload["sig"]))
    elif how == "abort":
        os.abort()
    elif how == "segv":
        import ctypes

        ctypes.string_at(0)
    return {"survived": how}, {}


def survivors(pids: list[int], pidns: str | None = None, uid: int | None = None) -> list[int]:
    """Parent side: which of a run's processes are still alive (zombies count as dead). ``pids`` are numbers the
    child saw; when the child ran in a pid namespace of its own (``pidns``, its ``/proc/self/ns/pid``, differs
    from ours) those numbers mean nothing here, so every process of the run's ``uid`` still in that namespace
    counts instead. The uid matters: the kernel reuses a dead namespace's number for a new one, perhaps another
    run's, but a live run's uid is leased to it alone."""
    import os

    def alive(path: str) -> bool:
        try:
            with open(f"{path}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def real_uid(path: str) -> int | None:
        # From status, not the directory's owner: /proc shows a non-dumpable process's directory as root's.
        with open(f"{path}/status") as fh:
            return next((int(line.split()[1]) for line in fh if line.startswith("Uid:")), None)

    if pidns is None or pidns == os.readlink("/proc/self/ns/pid"):
        return [p for p in pids if alive(f"/proc/{p}")]
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == pidns and alive(f"/proc/{name}") and (
                        uid is None or real_uid(f"/proc/{name}") == uid):
                    out.append(int(name))
            except OSError:
                continue
    return out
