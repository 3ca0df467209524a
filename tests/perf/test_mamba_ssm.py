"""The mamba-ssm competitor's pin: a file is used only when its SHA-256 is the pinned one, offline fetches fail
with a message naming the file to hand-supply, and extraction refuses nothing it should keep."""

import hashlib
import io
import tarfile

import pytest

from lethe.perf import mamba_ssm as M


def _sdist(tmp_path, version="9.9"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"__version__ = '9.9'\n"
        info = tarfile.TarInfo(f"mamba_ssm-{version}/mamba_ssm/__init__.py")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    p = tmp_path / f"mamba_ssm-{version}.tar.gz"
    p.write_bytes(buf.getvalue())
    pin = M.Pin(version=version, filename=p.name, url="http://127.0.0.1:9/none",
                sha256=hashlib.sha256(p.read_bytes()).hexdigest())
    return p, pin


def test_verify_accepts_only_the_pinned_bytes(tmp_path):
    p, pin = _sdist(tmp_path)
    assert M.verify(p, pin) == p
    p.write_bytes(p.read_bytes() + b"x")
    with pytest.raises(M.FetchError, match="not the pinned"):
        M.verify(p, pin)


def test_missing_file_names_what_to_hand_supply(tmp_path):
    with pytest.raises(M.FetchError, match=M.PIN.filename):
        M.verify(tmp_path / "absent.tar.gz")


def test_offline_fetch_fails_clearly(tmp_path):
    _, pin = _sdist(tmp_path)
    with pytest.raises(M.FetchError, match="hand-supply"):
        M.fetch(tmp_path / "dl", pin, timeout_s=2)


def test_extract_unpacks_the_package(tmp_path):
    p, pin = _sdist(tmp_path)
    root = M.extract(p, tmp_path / "out", pin)
    assert (root / "mamba_ssm" / "__init__.py").read_text().startswith("__version__")


def test_pin_is_the_published_sdist():
    assert M.PIN.url.endswith(M.PIN.filename) and len(M.PIN.sha256) == 64
