"""The file format arrays cross the sandbox boundary in: a JSON header and raw, aligned buffers.

Why not ``.npz``: a zip container computes a CRC-32 over every member on write and again on read, and
``np.load`` copies each member out of the archive; a corpus audit moves about a gigabyte per kernel (inputs in,
outputs out), so the format cost seconds per kernel. Here the writer streams each array's bytes once (hashing
them on the way for the ``done`` message), and the reader takes one read into a writable buffer and returns
views into it.

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
import os
from pathlib import Path
import time as _ovt  # OVH
try:  # OVH
    from ovhtrace import mark as _ovh, acc as _ovacc, flush as _ovflush  # OVH
except ImportError:  # OVH
    _ovh = _ovacc = _ovflush = lambda *a, **k: None  # OVH

import numpy as np

MAGIC = b"LETHEAR1"
ALIGN = 64
MAX_HEADER = 16 << 20
NUMERIC_KINDS = frozenset("biufc")


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
    h = hashlib.sha256() if digest else None
    with open(path, "wb") as fh:
        for chunk in (MAGIC, len(header).to_bytes(8, "little"), header):
            fh.write(chunk)
            if h:
                h.update(chunk)
        for e, a in zip(entries, arrays.values(), strict=True):
            _q = _ovt.perf_counter()  # OVH
            data = memoryview(np.ascontiguousarray(a)).cast("B") if a.nbytes else b""
            pad = b"\0" * _pad(e["nbytes"])
            fh.write(data)
            fh.write(pad)
            _q = _ovacc('aw_write', _q)  # OVH
            if h:
                h.update(data)
                h.update(pad)
            _ovacc('aw_hash', _q)  # OVH
    _ovflush('AW')  # OVH
    return h.hexdigest() if h else ""


def read(path: str | os.PathLike, digest: bool = True) -> tuple[dict[str, np.ndarray], str]:
    """Read a file written by :func:`write`: (arrays as writable views into one buffer, SHA-256 of the bytes,
    or ``""`` when ``digest`` is false)."""
    size = Path(path).stat().st_size
    buf = bytearray(size)
    with open(path, "rb") as fh:
        view, got = memoryview(buf), 0
        while got < size:
            n = fh.readinto(view[got:])
            if not n:
                raise ValueError("array file shorter than its size")
            got += n
    return parse(buf), hashlib.sha256(buf).hexdigest() if digest else ""


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


def _check_dtype(dt: np.dtype, name: str) -> None:
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.kind not in NUMERIC_KINDS:
        raise ValueError(f"array {name!r}: dtype {dt} is not a plain numeric dtype")
