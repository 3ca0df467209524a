"""lethe.sandbox.arrays: round trips every plain numeric dtype and shape, digests the bytes it wrote, and
rejects files a hostile candidate could write (the parent parses the child's output file)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from lethe.sandbox import arrays as A


def _sample():
    rng = np.random.default_rng(0)
    return {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f16": rng.standard_normal(7).astype(np.float16),
        "f64_big_endian": rng.standard_normal((2, 2)).astype(">f8"),
        "c64": (rng.standard_normal(3) + 1j).astype(np.complex64),
        "i64": np.arange(11),
        "u8": np.arange(5, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(3.5),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "strided": np.arange(20.0).reshape(4, 5)[:, ::2],
    }


def test_round_trip_and_digest(tmp_path):
    src = _sample()
    digest = A.write(tmp_path / "a", src)
    assert digest == hashlib.sha256((tmp_path / "a").read_bytes()).hexdigest()
    back, digest2 = A.read(tmp_path / "a")
    assert digest2 == digest and list(back) == list(src)
    for k, v in src.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        assert np.array_equal(back[k], v)
        assert back[k].flags.writeable
    assert A.write(tmp_path / "b", src, digest=False) == ""
    assert (tmp_path / "b").read_bytes() == (tmp_path / "a").read_bytes()


def test_refuses_to_write_objects(tmp_path):
    with pytest.raises(ValueError):
        A.write(tmp_path / "a", {"o": np.array([object()], dtype=object)})


def _forge(entries, data=b"\0" * 128):
    header = json.dumps({"arrays": entries}).encode()
    header += b" " * ((-(len(A.MAGIC) + 8 + len(header))) % A.ALIGN)
    return bytearray(A.MAGIC + len(header).to_bytes(8, "little") + header + data)


@pytest.mark.parametrize("entries, why", [
    ([{"name": "x", "dtype": "|O", "shape": [1], "offset": 0, "nbytes": 8}], "not a plain numeric"),
    ([{"name": "x", "dtype": "<U4", "shape": [1], "offset": 0, "nbytes": 16}], "not a plain numeric"),
    ([{"name": "x", "dtype": "<f4", "shape": [100], "offset": 0, "nbytes": 400}], "outside the file"),
    ([{"name": "x", "dtype": "<f4", "shape": [4], "offset": 0, "nbytes": 8}], "do not match"),
    ([{"name": "x", "dtype": "<f4", "shape": [2], "offset": 8, "nbytes": 8}], "misaligned"),
    ([{"name": "x", "dtype": "<f4", "shape": [-2], "offset": 0, "nbytes": -8}], "negative"),
    ([{"name": "x", "dtype": "<f4", "shape": [2], "offset": 0, "nbytes": 8}] * 2, "twice"),
    ([{"name": "x", "dtype": "<f4"}], "malformed"),
])
def test_rejects_hostile_headers(entries, why):
    with pytest.raises(ValueError, match=why):
        A.parse(_forge(entries))


def test_rejects_bad_magic_and_header_length():
    with pytest.raises(ValueError, match="magic"):
        A.parse(bytearray(b"PK\x03\x04" + b"\0" * 60))
    with pytest.raises(ValueError, match="header length"):
        A.parse(bytearray(A.MAGIC + (1 << 40).to_bytes(8, "little")))


def test_hashing_thread_and_inline_hashing_agree(tmp_path, monkeypatch):
    big = {"x": np.arange(5 * A._SLICE // 8 + 3, dtype=np.float64), "s": np.arange(40.0).reshape(8, 5)[:, ::2]}
    digest = A.write(tmp_path / "a", big)
    assert digest == hashlib.sha256((tmp_path / "a").read_bytes()).hexdigest()
    buf, got = A.read_raw(tmp_path / "a")
    assert got == digest and bytes(buf) == (tmp_path / "a").read_bytes()

    def no_threads(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(A.threading.Thread, "start", no_threads)
    assert A.write(tmp_path / "b", big) == digest
    assert A.read_raw(tmp_path / "b")[1] == digest


def test_a_file_cut_short_reads_as_none(tmp_path, monkeypatch):
    """A file that ends before the size it had when opened (truncated meanwhile) gives no buffer to parse."""
    A.write(tmp_path / "a", _sample())
    real = A.os.fstat

    class Grown:
        def __init__(self, st):
            self.st_size = st.st_size + 4096

    monkeypatch.setattr(A.os, "fstat", lambda fd: Grown(real(fd)))
    assert A.read_raw(tmp_path / "a") == (None, "")
    with pytest.raises(ValueError, match="shorter"):
        A.read(tmp_path / "a")


def test_mapped_file_gives_writable_private_views(tmp_path):
    src = _sample()
    A.write(tmp_path / "a", src, digest=False)
    back = A.map_file(tmp_path / "a")
    assert list(back) == list(src)
    for k, v in src.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape and np.array_equal(back[k], v)
        assert back[k].flags.writeable
    before = (tmp_path / "a").read_bytes()
    back["f32"][:] = 7.0
    assert (tmp_path / "a").read_bytes() == before  # copy-on-write: the file is untouched
    (tmp_path / "e").write_bytes(b"")
    with pytest.raises(ValueError):
        A.map_file(tmp_path / "e")
