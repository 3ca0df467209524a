"""The float64 reference results on disk, shared by every verifier process of one machine.

Why: the reference plan (every probe's inputs and float64 outputs) is a pure function of the reference source,
the seed, the probe plan, the gate filter and the software that computes it, and computing it costs more than
verifying a typical candidate. An audit or a reward loop verifies many candidates of one problem, each in a new
process, so an in-process cache alone recomputes it every time.

The key (:func:`key`) holds everything the result depends on: the cache format, the source's SHA-256, the
seed, ``PLAN_VERSION``, the gate filter, the interpreter flag, the reference's device, the lethe version and the verifier's code digest,
the machine architecture and the torch and numpy versions. Any change is a different key, so stale entries are
never read (they are only left behind).

Out of every candidate's reach: the cache lives in a directory of the verifier's uid with mode 0700, and it is
used only when children run under operating-system isolation (``lethe.sandbox.isolation``: another uid, so the
directory is unreadable to them). On a machine without that isolation a candidate of the same uid could read
the reference outputs from disk, so the cache is off there. An entry is checked on load (owner, mode, the
arrays file's SHA-256) and ignored if anything is off.

``LETHE_REF_CACHE``: a directory (default ``$XDG_CACHE_HOME/lethe/refs``, else ``~/.cache/lethe/refs``), or
``off``. ``LETHE_REF_CACHE_MAX_GB`` (default 20) bounds its size: after each store the least recently used
entries are removed until the cache fits, an entry larger than the bound is not stored, and nothing is stored
when it would leave less than RESERVE_BYTES free on the cache's disk. Unbounded, a batch over a corpus of large
problems fills the disk with references it never asks for again, and the next reference or candidate then
fails to write its result (found on a 64 GB device disk with 14 parallel workers).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import stat
import tempfile
from pathlib import Path

CACHE_FORMAT = "lethe.refcache/1"
DEFAULT_MAX_GB = 20.0
# Room left for the sandboxed processes' own result files (the reference's is capped at battery.REF_RESULT_MB).
RESERVE_BYTES = 2 * 8192 * (1 << 20)


def max_bytes() -> int:
    """The cache's size bound (``LETHE_REF_CACHE_MAX_GB``; a malformed value means the default)."""
    try:
        gb = float(os.environ.get("LETHE_REF_CACHE_MAX_GB", DEFAULT_MAX_GB))
    except ValueError:
        gb = DEFAULT_MAX_GB
    return max(0, int(gb * (1 << 30)))


def _entry_bytes(entry: Path) -> int:
    total = 0
    for f in entry.iterdir():
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def prune(root: Path, limit: int) -> int:
    """Remove least recently used entries (oldest modification time; :func:`load` touches an entry it
    serves) until the cache's entries total at most ``limit`` bytes. Returns the bytes removed."""
    entries = []
    for e in root.iterdir():
        if e.name.startswith(".tmp-") or not e.is_dir():
            continue
        try:
            entries.append((e.stat().st_mtime, e, _entry_bytes(e)))
        except OSError:
            continue
    total = sum(b for _, _, b in entries)
    removed = 0
    for _, e, b in sorted(entries, key=lambda t: t[0]):
        if total <= limit:
            break
        shutil.rmtree(e, ignore_errors=True)
        total -= b
        removed += b
    return removed


def cache_dir() -> Path | None:
    """The cache directory, or None when the cache is off (switched off, or no OS isolation of children)."""
    from lethe.sandbox import isolation

    setting = os.environ.get("LETHE_REF_CACHE", "").strip()
    if setting.lower() == "off":
        return None
    if isolation.unavailable_reason() is not None or isolation.mode() == "off":
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "lethe" / "refs"


def key(ref_src: str, seed: int, only_gates: list[str] | None, interpret: bool, device: str = "cpu") -> str:
    """The entry's name: a SHA-256 over everything the result depends on (module docstring), the reference's
    device included (a CUDA reference equals the CPU one to float64 rounding, not bit for bit)."""
    from lethe import __version__
    from lethe.provenance import library_version
    from lethe.verifier import api, battery

    # The versions as the modules state them, read without importing torch into a process that never needs it.
    parts = [CACHE_FORMAT, hashlib.sha256(ref_src.encode()).hexdigest(), int(seed), battery.PLAN_VERSION,
             sorted(only_gates or []), bool(interpret), __version__, api.code_digest(), platform.machine(),
             library_version("torch"), library_version("numpy"), device]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _private(d: Path) -> bool:
    try:
        st = os.stat(d)
    except OSError:
        return False
    return st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700


def _ensure(d: Path) -> bool:
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    except OSError:
        return False
    return _private(d)


def load(k: str):
    """(result, arrays, meta) of a cached reference run, or None."""
    from lethe.sandbox import arrays as arrays_io

    root = cache_dir()
    if root is None or not _private(root):
        return None
    entry = root / k
    if not _private(entry):
        return None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        result = json.loads((entry / "result.json").read_text())
        arrays, digest = arrays_io.read(entry / "arrays.bin")
    except (OSError, ValueError):
        return None
    if meta.get("format") != CACHE_FORMAT or meta.get("key") != k or digest != meta.get("arrays_sha256"):
        return None
    try:
        os.utime(entry)  # recently used: pruned last
    except OSError:
        pass
    return result, arrays, meta


def store(k: str, result: dict, arrays: dict, *, isolation: str, tamper_proof: bool) -> bool:
    """Write one entry atomically (a private temporary directory renamed into place); False if not stored."""
    from lethe.sandbox import arrays as arrays_io

    root = cache_dir()
    if root is None or not _ensure(root):
        return False
    entry = root / k
    if entry.exists():
        return True
    size = sum(int(getattr(v, "nbytes", 0)) for v in dict(arrays).values())
    limit = max_bytes()
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return False
    if size > limit or free - size < RESERVE_BYTES:
        return False
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    try:
        digest = arrays_io.write(tmp / "arrays.bin", dict(arrays), digest=True)
        (tmp / "result.json").write_text(json.dumps(result, sort_keys=True, allow_nan=True))
        (tmp / "meta.json").write_text(json.dumps({"format": CACHE_FORMAT, "key": k, "arrays_sha256": digest,
                                                   "isolation": isolation, "tamper_proof": tamper_proof}))
        os.chmod(tmp, 0o700)
        os.rename(tmp, entry)
        prune(root, limit)
        return entry.exists()
    except OSError:
        return False
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
