"""Entry point of a sandboxed child process: ``python -m lethe.sandbox.child <channel-fd> <hold-fd>``.

The same protocol runs in both start modes: a spawned interpreter calls :func:`_main` from ``__main__``; in
zygote mode (``python -m lethe.sandbox.child --zygote ...``, see ``lethe.sandbox.zygote``) a long-lived
process that has already imported the preload forks, and the forked process calls :func:`_main` with the fds
it was handed. ``__main__`` is this module in both modes.

The parent (``lethe.sandbox.runner``) writes one JSON configuration to our stdin and closes it. We then
preload the heavy modules (so their address space is not charged to the candidate), set the resource limits,
announce ``ready`` on the private channel fd, import and call the target, and announce ``done`` with a
JSON-able result. Output arrays go to a raw array file (``lethe.sandbox.arrays``; never a pickle) whose SHA-256 travels in the ``done``
message, so a file swapped after the fact is detected.

Everything this module needs after the candidate has been imported is bound to local names *before* the
import: a candidate that monkeypatches ``builtins``, ``json`` or ``numpy`` in our process can then at worst
corrupt the report of its own row (which the sandbox accepts and documents), not crash the reporting path
in a way that looks like another status.
"""

from __future__ import annotations

import os
import sys


def _main(chan_fd: int | None = None, hold_fd: int | None = None) -> None:  # noqa: C901 - one linear protocol
    if chan_fd is None:
        chan_fd = int(sys.argv[1])
        hold_fd = int(sys.argv[2]) if len(sys.argv) > 2 else None
    # Bind what the reporting path needs now, before any untrusted code can patch it.
    import faulthandler
    import hashlib
    import importlib
    import json
    import resource
    import time
    import traceback

    _write = os.write
    _read = os.read
    _exit = os._exit
    _dumps = json.dumps
    _sha256 = hashlib.sha256
    _format_exc = traceback.format_exc
    _clear_frames = traceback.clear_frames
    _monotonic = time.monotonic

    raw = sys.stdin.buffer.read()
    cfg = json.loads(raw.decode("utf-8"))
    # The configuration (with the nonce) is consumed; stdin is not for the candidate.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    nonce = cfg["nonce"]

    # Operating-system isolation (own uid, namespaces, read-only file system) comes first, while this process is
    # still root, single-threaded and has run nothing of the candidate's; lethe.sandbox.isolation says why.
    iso_cfg = cfg.get("isolate")
    if iso_cfg:
        from lethe.sandbox import isolation as _isolation

        iso = _isolation.enter(int(iso_cfg["uid"]), list(iso_cfg["rw"]), pdeathsig=bool(iso_cfg.get("pdeathsig")),
                                   ro=list(iso_cfg.get("ro") or []))
    else:
        iso = cfg.get("isolation_report") or {"isolation": "none: not requested", "tamper_proof": False}

    def send(msg: dict) -> None:
        msg["nonce"] = nonce
        data = (_dumps(msg, allow_nan=False, separators=(",", ":")) + "\n").encode("utf-8")
        view = memoryview(data)
        while view:
            n = _write(chan_fd, view)
            view = view[n:]

    faulthandler.enable(file=sys.stderr, all_threads=True)

    # Preload (trusted phase): importing torch alone reserves ~600 MB of address space, which must not count
    # against the candidate's memory budget.
    for name in cfg.get("preload", []):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing optional module only loses the head start
            pass

    import numpy as np

    from lethe.sandbox import arrays as _arrays_mod

    # Bound before any candidate code runs, like the other trusted entry points.
    _arr_map = _arrays_mod.map_file
    _arr_write = _arrays_mod.write
    _ndarray = np.ndarray

    device = cfg.get("device", "cpu")
    if device == "cuda" and "torch" in sys.modules:
        torch = sys.modules["torch"]
        frac = cfg.get("gpu_memory_fraction")
        if frac is not None and torch.cuda.is_available():
            torch.cuda.set_per_process_memory_fraction(float(frac))

    def _self_tree_rss_vms() -> tuple[int, int]:
        with open("/proc/self/statm") as fh:
            parts = fh.read().split()
        page = os.sysconf("SC_PAGE_SIZE")
        return int(parts[1]) * page, int(parts[0]) * page

    rss0, vms0 = _self_tree_rss_vms()
    mem_bytes = int(cfg["memory_mb"]) * (1 << 20)
    limits_applied = []
    if device == "cpu" and cfg.get("rlimit_as", True):
        # RLIMIT_AS is relative to what the trusted preload already mapped, so memory_mb is the candidate's
        # own budget. Under CUDA this limit would break the driver's huge virtual reservations (the parent
        # watches RSS instead).
        lim = vms0 + mem_bytes
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
        limits_applied.append("RLIMIT_AS")
    nproc = cfg.get("nproc_limit")
    if nproc is not None:
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (int(nproc), int(nproc)))
            limits_applied.append("RLIMIT_NPROC")
        except (ValueError, OSError):
            pass
    core = cfg.get("core_dumps", False)
    if not core:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    max_file = cfg.get("max_file_mb")
    if max_file is not None:
        fb = int(max_file) * (1 << 20)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fb, fb))
        limits_applied.append("RLIMIT_FSIZE")
    try:
        # Orphaned grandchildren (including ones that call setsid) are re-parented to us rather than to init,
        # so the parent can still find and kill them by walking our process tree.
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_CHILD_SUBREAPER, PR_SET_DUMPABLE = 36, 4
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        # Not dumpable: other non-root processes of this uid cannot open /proc/<us>/mem or our fds.
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort hardening
        pass

    # ``pid``: this process as the parent sees it (inside a pid namespace os.getpid() is a number of that
    # namespace); the parent accounts memory and clears descendants from it.
    send({"ev": "ready", "rss": rss0, "vms": vms0, "limits": limits_applied,
          "isolation": iso["isolation"], "tamper_proof": bool(iso["tamper_proof"]),
          "pid": int(iso.get("outer_pid") or os.getpid())})

    status, detail, result, arrays, out = "ok", "", None, {}, None
    t0 = _monotonic()
    try:
        if iso_cfg and iso_cfg.get("require") and not iso["tamper_proof"]:
            # Never run weaker than asked: the candidate is not even imported.
            raise _IsolationRefused(f"sandbox harness error: isolation required but incomplete: {iso['isolation']}")
        inputs_path = cfg.get("inputs")
        in_arrays: dict = {}
        if inputs_path:
            # Mapped, not read: a run touches each input once or twice, and reading the whole file first cost a
            # copy of every byte (about half a second for a 2048x2048 matmul plan) before the target even started.
            in_arrays = _arr_map(inputs_path)
            # Gone from the file system once mapped (the mapping keeps the data): nothing can open it by name
            # later and change the pages this run has not touched yet.
            try:
                os.unlink(inputs_path)
            except OSError:
                pass
        mod_name, _, func_name = cfg["target"].partition(":")
        try:
            mod = importlib.import_module(mod_name)
            func = getattr(mod, func_name)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, (SystemExit, KeyboardInterrupt)):
                raise
            raise _TargetImportError(f"cannot import target {cfg['target']!r}: {type(exc).__name__}: {exc}") from exc
        from pathlib import Path

        out = func(cfg.get("payload") or {}, in_arrays, Path(os.getcwd()))
        if not (isinstance(out, tuple) and len(out) == 2):
            raise _BadResult(f"target returned {type(out).__name__}, expected a (dict, dict) tuple")
        result, arrays = out
        if result is None:
            result = {}
        if not isinstance(result, dict):
            raise _BadResult(f"result is {type(result).__name__}, expected dict")
        if arrays is None:
            arrays = {}
        if not isinstance(arrays, dict):
            raise _BadResult(f"arrays is {type(arrays).__name__}, expected dict")
        for k, v in arrays.items():
            if not isinstance(k, str) or not isinstance(v, _ndarray):
                raise _BadResult(f"array {k!r} is {type(v).__name__}, expected numpy.ndarray")
            if v.dtype.hasobject:
                raise _BadResult(f"array {k!r} has object dtype (would need pickle)")
        try:
            _dumps(result, allow_nan=True)
        except (TypeError, ValueError) as exc:
            raise _BadResult(f"result is not JSON-able: {exc}") from exc
    except _BadResult as exc:
        status, detail, result, arrays = "bad_result", str(exc), None, {}
    except _TargetImportError as exc:
        status, detail, result, arrays = "error", f"{exc}\n{_tail(_format_exc())}", None, {}
    except _IsolationRefused as exc:
        status, detail, result, arrays = "error", str(exc), None, {}
    except SystemExit as exc:
        status, result, arrays = "exit", None, {}
        detail = f"called sys.exit({exc.code!r}) before returning a result"
    except MemoryError as exc:
        # The traceback's frames still hold what was allocated: free it before formatting anything.
        result = arrays = out = None
        _clear_frames(exc.__traceback__)
        status, detail = "oom", "MemoryError: memory limit reached\n" + _tail(_format_exc())
        result, arrays = None, {}
    except BaseException as exc:  # noqa: BLE001 - every failure of the candidate is its row's status
        result = arrays = out = None
        _clear_frames(exc.__traceback__)
        name = type(exc).__name__
        msg = str(exc)
        low = msg.lower()
        if name == "OutOfMemoryError" or "can't allocate memory" in low or "out of memory" in low:
            status = "oom"
        else:
            status = "error"
        detail = f"exception: {name}: {msg[:2000]}\n{_tail(_format_exc())}"
        result, arrays = None, {}
    seconds = _monotonic() - t0

    msg: dict = {"ev": "done", "status": status, "detail": detail, "seconds": seconds}
    if status == "ok":
        try:
            if arrays:
                msg["arrays_sha256"] = _arr_write(cfg["outputs"], arrays)
            msg["result"] = _dumps(result, allow_nan=True)
        except BaseException as exc:  # noqa: BLE001
            msg = {"ev": "done", "status": "bad_result", "seconds": seconds,
                   "detail": f"could not serialise result: {type(exc).__name__}: {exc}"}
    try:
        send(msg)
    except BaseException:  # noqa: BLE001 - channel closed by the candidate: the parent reports "exit"
        _exit(70)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    # Stay alive until the parent has killed our descendants (as subreaper we keep them visible to it);
    # the parent closes its end of the hold pipe when done, which reads as EOF here.
    if hold_fd is not None:
        try:
            while _read(hold_fd, 1):
                pass
        except BaseException:  # noqa: BLE001
            pass
    # Skip atexit handlers and finalizers the candidate may have registered.
    _exit(0)


class _BadResult(Exception):
    pass


class _TargetImportError(Exception):
    pass


class _IsolationRefused(Exception):
    pass


def _tail(text: str, n: int = 4000) -> str:
    return text if len(text) <= n else "..." + text[-n:]


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--zygote":
        from lethe.sandbox.zygote import serve

        serve(int(sys.argv[2]), sys.argv[3])
    else:
        _main()
