"""Pinned fetch: offline fails fast with a usable message; corrupt or truncated files never get through."""

from __future__ import annotations

import hashlib
import io
import time
import urllib.error

import pytest

from lethe.corpora import fetch as F

PAYLOAD = bytes(range(256)) * 4000  # ~1 MB, spans several read chunks


def make_pin(payload=PAYLOAD, **kw):
    return F.Pin(dataset="org/some-corpus", revision="a" * 40, filename="train.parquet",
                 sha256=kw.pop("sha256", hashlib.sha256(payload).hexdigest()), size=kw.pop("size", len(payload)))


class FakeResponse(io.BytesIO):
    def __init__(self, data, status):
        super().__init__(data)
        self.status = status


class FakeHub:
    """Serves one file, honours Range, can cut a transfer short to simulate a dropped connection."""

    def __init__(self, payload, cut_at=None, honour_range=True):
        self.payload, self.cut_at, self.honour_range, self.requests = payload, cut_at, honour_range, []

    def __call__(self, req, timeout):
        self.requests.append(req)
        rng = req.get_header("Range")
        start = int(rng.split("=")[1].rstrip("-")) if rng and self.honour_range else 0
        data = self.payload[start:]
        if self.cut_at is not None:
            data, self.cut_at = data[: self.cut_at - start], None
        return FakeResponse(data, 206 if start else 200)


def test_url_is_the_hub_resolve_scheme():
    pin = make_pin()
    assert pin.url("https://huggingface.co") == (
        "https://huggingface.co/datasets/org/some-corpus/resolve/" + "a" * 40 + "/train.parquet")


def test_offline_fails_fast_naming_dataset_revision_and_manual_route(tmp_path):
    pin = F.DRKERNEL
    t0 = time.monotonic()
    with pytest.raises(F.FetchError) as exc:
        F.fetch(pin, tmp_path, endpoint="http://127.0.0.1:9", timeout_s=5)  # nothing listens on port 9
    assert time.monotonic() - t0 < 5
    msg = str(exc.value)
    for needle in (pin.dataset, pin.revision, pin.sha256, str(pin.path(tmp_path)), "by hand"):
        assert needle in msg
    assert not pin.path(tmp_path).exists()


def test_offline_with_an_opener_that_raises(tmp_path):
    def down(req, timeout):
        raise urllib.error.URLError("Name or service not known")

    with pytest.raises(F.FetchError, match="org/some-corpus"):
        F.fetch(make_pin(), tmp_path, opener=down)


def test_download_then_cached(tmp_path):
    hub = FakeHub(PAYLOAD)
    path = F.fetch(make_pin(), tmp_path, opener=hub)
    assert path.read_bytes() == PAYLOAD and not path.with_name(path.name + ".part").exists()
    F.fetch(make_pin(), tmp_path, opener=hub)
    assert len(hub.requests) == 1  # second call verified the cached file, no download


def test_empty_pinned_file_is_downloaded_and_verified(tmp_path):
    # A pinned empty file (a package's __init__.py) has nothing to resume: it must still land in place.
    path = F.fetch(make_pin(b""), tmp_path, opener=FakeHub(b""))
    assert path.is_file() and path.read_bytes() == b""


def test_git_host_pin_uses_its_raw_url_and_never_the_hub_token(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    pin = F.Pin(dataset="owner/repo", revision="b" * 40, filename="docs/a.json",
                sha256=hashlib.sha256(PAYLOAD).hexdigest(), size=len(PAYLOAD), url_base="https://git.example/owner/repo")
    hub = FakeHub(PAYLOAD)
    path = F.fetch(pin, tmp_path, endpoint="https://huggingface.co", opener=hub)
    assert hub.requests[0].full_url == "https://git.example/owner/repo/" + "b" * 40 + "/docs/a.json"
    assert hub.requests[0].get_header("Authorization") is None
    assert path == tmp_path / "owner__repo" / ("b" * 40) / "docs" / "a.json" and path.read_bytes() == PAYLOAD


def test_resume_after_interrupted_download(tmp_path):
    pin = make_pin()
    hub = FakeHub(PAYLOAD, cut_at=300_000)
    with pytest.raises(F.HashMismatch, match="truncated"):
        F.fetch(pin, tmp_path, opener=hub)
    # A truncated prefix is dropped on hash failure; simulate a kept .part from a killed process instead.
    part = pin.path(tmp_path).with_name(pin.filename + ".part")
    part.write_bytes(PAYLOAD[:300_000])
    hub2 = FakeHub(PAYLOAD)
    path = F.fetch(pin, tmp_path, opener=hub2)
    assert hub2.requests[0].get_header("Range") == "bytes=300000-"
    assert path.read_bytes() == PAYLOAD


def test_server_ignoring_range_restarts_cleanly(tmp_path):
    pin = make_pin()
    part = pin.path(tmp_path).with_name(pin.filename + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(PAYLOAD[:1000])
    path = F.fetch(pin, tmp_path, opener=FakeHub(PAYLOAD, honour_range=False))
    assert path.read_bytes() == PAYLOAD


def test_corrupt_download_is_rejected_and_not_kept(tmp_path):
    bad = bytearray(PAYLOAD)
    bad[12345] ^= 0xFF
    pin = make_pin()
    with pytest.raises(F.HashMismatch, match="does not match"):
        F.fetch(pin, tmp_path, opener=FakeHub(bytes(bad)))
    assert not pin.path(tmp_path).exists()
    assert not pin.path(tmp_path).with_name(pin.filename + ".part").exists()


def test_corrupt_or_truncated_file_in_cache_is_rejected(tmp_path):
    pin = make_pin()
    dest = pin.path(tmp_path)
    dest.parent.mkdir(parents=True)
    dest.write_bytes(PAYLOAD[:-1])
    with pytest.raises(F.HashMismatch, match="truncated"):
        F.fetch(pin, tmp_path, opener=FakeHub(PAYLOAD))
    dest.write_bytes(PAYLOAD[:-1] + b"\x00")
    with pytest.raises(F.HashMismatch, match="SHA-256"):
        F.fetch(pin, tmp_path, opener=FakeHub(PAYLOAD))


def test_unpinned_corpus_refuses_without_network(tmp_path):
    def never(req, timeout):
        raise AssertionError("must not try the network without a complete pin")

    with pytest.raises(F.PinIncomplete, match="SakanaAI/AI-CUDA-Engineer-Archive"):
        F.fetch(F.SAKANA, tmp_path, opener=never)
