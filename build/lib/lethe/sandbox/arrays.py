"""The file format arrays cross the sandbox boundary in: a JSON header and raw, aligned buffers.

Why not ``.npz``: a zip container computes a CRC-32 over every member on write and again on read, and
``np.load`` copies each member out of the archive; a corpus audit moves about a gigabyte per kernel (inputs in,
outputs out), so the format cost seconds per kernel. Here the writer streams each array's bytes once (hashing
them on the way for the ``done`` message, on a helper thread so the hash overlaps the writing), and the reader
takes one read into a writable buffer (hashed the same way) and returns views into it; :func:`map_file` maps a
file instead of reading it, for a reader that needs no digest.

Layout: ``MAGIC`` (8 bytes), header length (8 bytes, little-endian), the UTF-8 JSON header
``{"arrays": [{"name", "dtype", "shape", "offset", "nbytes"}, ...]}``, then the data; offsets count from the
start of the data and are multiples of ``ALIGN``.

The reader treats the file as untrusted (the candidate's process wrote the output file): plain numeric dtypes
only (no objects, no structured or string types), shapes and offsets checked against the file's size, names
unique. Any violation raises ``ValueError``; the caller turns it into a ``bad_result``.
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import queue
import threading

import numpy as np

MAGIC = b"LETHEAR1"
ALIGN = 64
MAX_HEADER = 16 << 20
NUMERIC_KINDS = frozenset("biufc")
# Unit of I/O handed to the hashing thread; the thread may lag at most _LAG units behind, which bounds what it
# keeps alive (a strided array's contiguous copy, say) while the writer moves on.
_SLICE = 16 << 20
_LAG = 2


def _pad(n: int) -> int:
    return (-n) % ALIGN


def write(path: str | os.PathLike, arrays: dict[str, np.ndarray], digest: bool = True) -> str:
    """Write ``arrays`` to ``path``; return the SHA-256 of the file's bytes, computed while writing (``""`` when
    ``digest`` is false: the parent's inputs need no digest, the child's outputs do)."""
    entries, offset = [], 0
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray):
            raise TypeError(f"array {name!r} is not a numpy array")
        _check_dtype(a.dtype, name)
        entries.append({"name": str(name), "dtype": a.dtype.str, "shape": list(a.shape), "offset": offset,
                        "nbytes": int(a.nbytes)})
        offset += int(a.nbytes) + _pad(int(a.nbytes))
    header = json.dumps({"arrays": entries}, sort_keys=True).encode()
    header += b" " * _pad(len(MAGIC) + 8 + len(header))
    h = _Hasher() if digest else None
    try:
        with open(path, "wb") as fh:
            for chunk in (MAGIC, len(header).to_bytes(8, "little"), header):
                fh.write(chunk)
                if h:
                    h.update(chunk)
            for e, a in zip(entries, arrays.values(), strict=True):
                data = memoryview(np.ascontiguousarray(a)).cast("B") if a.nbytes else memoryview(b"")
                for i in range(0, len(data), _SLICE):
                    fh.write(data[i: i + _SLICE])
                    if h:
                        h.update(data[i: i + _SLICE])
                pad = b"\0" * _pad(e["nbytes"])
                fh.write(pad)
                if h:
                    h.update(pad)
        return h.hexdigest() if h else ""
    finally:
        if h:
            h.close()


def read(path: str | os.PathLike, digest: bool = True) -> tuple[dict[str, np.ndarray], str]:
    """Read a file written by :func:`write`: (arrays as writable views into one buffer, SHA-256 of the bytes,
    or ``""`` when ``digest`` is false)."""
    buf, sha = read_raw(path, digest=digest)
    if buf is None:
        raise ValueError("array file shorter than its size")
    return parse(buf), sha


def read_raw(path: str | os.PathLike, digest: bool = True) -> tuple[bytearray | mmap.mmap | None, str]:
    """The file's bytes in one writable buffer, unparsed, and their SHA-256 (``""`` when ``digest`` is false);
    ``(None, "")`` when the file ended before the size it had when opened."""
    h = _Hasher() if digest else None
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            # Anonymous memory, not bytearray(size): that zero-fills (and so faults in) every page before the
            # first read, time in which the hashing thread has nothing to do; here each page is first touched by
            # the read that fills it, while the thread hashes the slice before.
            buf = mmap.mmap(-1, size) if size else bytearray(0)
            view, got = memoryview(buf), 0
            while got < size:
                n = fh.readinto(view[got: got + _SLICE])
                if not n:
                    return None, ""
                if h:
                    h.update(view[got: got + n])
                got += n
        return buf, h.hexdigest() if h else ""
    finally:
        if h:
            h.close()


def map_file(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Arrays of a file written by :func:`write`, as writable views of a private (copy-on-write) mapping of it:
    nothing is read or copied up front, pages come from the page cache as the arrays are used, and writes to
    the arrays never reach the file. For the child's inputs, which carry no digest."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise ValueError("not a lethe array file (bad magic)")
        m = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_COPY)
    return parse(m)


def parse(buf: bytearray) -> dict[str, np.ndarray]:
    """Arrays from a buffer in this format (validated; see the module docstring)."""
    if len(buf) < len(MAGIC) + 8 or bytes(buf[: len(MAGIC)]) != MAGIC:
        raise ValueError("not a lethe array file (bad magic)")
    hlen = int.from_bytes(buf[len(MAGIC): len(MAGIC) + 8], "little")
    start = len(MAGIC) + 8
    if hlen > MAX_HEADER or start + hlen > len(buf):
        raise ValueError("array file header length out of range")
    try:
        header = json.loads(bytes(buf[start: start + hlen]).decode())
        entries = header["arrays"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"array file header unreadable: {exc}") from None
    if not isinstance(entries, list):
        raise ValueError("array file header: 'arrays' is not a list")
    data0 = start + hlen
    out: dict[str, np.ndarray] = {}
    for e in entries:
        try:
            name, dt = str(e["name"]), np.dtype(str(e["dtype"]))
            shape = tuple(int(x) for x in e["shape"])
            offset, nbytes = int(e["offset"]), int(e["nbytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"array file header entry malformed: {exc}") from None
        _check_dtype(dt, name)
        if name in out:
            raise ValueError(f"array {name!r} appears twice")
        if any(d < 0 for d in shape) or offset < 0 or nbytes < 0:
            raise ValueError(f"array {name!r}: negative shape or offset")
        if nbytes != int(np.prod(shape, dtype=np.int64)) * dt.itemsize:
            raise ValueError(f"array {name!r}: {nbytes} bytes do not match shape {shape} of {dt}")
        if data0 + offset + nbytes > len(buf) or offset % ALIGN:
            raise ValueError(f"array {name!r} lies outside the file or is misaligned")
        out[name] = np.frombuffer(buf, dtype=dt, count=nbytes // dt.itemsize if dt.itemsize else 0,
                                  offset=data0 + offset).reshape(shape)
    return out


class _Hasher:
    """SHA-256 of the bytes given to :meth:`update`, in order, computed on a helper thread: hashlib releases the
    GIL on large buffers, so hashing overlaps the caller's file I/O instead of adding to it. Where no thread can
    be started (a process at its task limit), it hashes inline; the digest is the same either way."""

    def __init__(self):
        self._h = hashlib.sha256()
        self._error: BaseException | None = None
        self._q: queue.Queue = queue.Queue(maxsize=_LAG)
        self._t: threading.Thread | None = threading.Thread(target=self._run, name="lethe-arrays-sha256",
                                                              daemon=True)
        try:
            self._t.start()
        except RuntimeError:
            self._t = None

    def _run(self) -> None:
        # Keeps draining after a failure, so that update() can never block on a queue nobody empties.
        while (b := self._q.get()) is not None:
            if self._error is None:
                try:
                    self._h.update(b)
                except BaseException as exc:  # noqa: BLE001 - re-raised by hexdigest, in the caller's thread
                    self._error = exc

    def update(self, b) -> None:
        if self._t is None:
            self._h.update(b)
        else:
            self._q.put(b)

    def hexdigest(self) -> str:
        self.close()
        if self._error is not None:
            raise self._error
        return self._h.hexdigest()

    def close(self) -> None:
        if self._t is not None:
            self._q.put(None)
            self._t.join()
            self._t = None


def _check_dtype(dt: np.dtype, name: str) -> None:
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.kind not in NUMERIC_KINDS:
        raise ValueError(f"array {name!r}: dtype {dt} is not a plain numeric dtype")
