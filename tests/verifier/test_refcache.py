"""The on-disk reference cache: a second process gets the same reference without recomputing it, the rows are
identical, any key change misses, and it is off wherever children are not OS-isolated."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lethe.sandbox import isolation
from lethe.verifier import api, battery, records, refcache

HOSTILE = Path(__file__).resolve().parents[2] / "data" / "hostile"
needs_isolation = pytest.mark.skipif(isolation.unavailable_reason() is not None, reason="needs OS isolation (root)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "refs"
    monkeypatch.setenv("LETHE_REF_CACHE", str(d))
    monkeypatch.setenv("LETHE_ISOLATION", "auto")
    return d


def _verify():
    api._REF_CACHE.clear()  # as a new process would start
    timings: dict = {}
    rows = api.verify_profiles((HOSTILE / "ref.py").read_text(), (HOSTILE / "good" / "cand.py").read_text(),
                               device="cpu", seed=2, only_gates=["CMP-01", "EXC-01"], timings=timings)
    return rows[0], timings


@needs_isolation
def test_second_process_reads_the_reference_from_disk(cache, monkeypatch):
    first, _ = _verify()
    entries = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert len(entries) == 1
    for d in (cache, entries[0]):
        st = os.stat(d)
        assert st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
    calls = []
    real = api._sandbox()

    def counting(target, **kw):
        calls.append(target)
        return real(target, **kw)

    monkeypatch.setattr(api, "_sandbox", lambda: counting)
    second, _ = _verify()
    assert "lethe.verifier.reference:run_reference" not in calls and calls, calls
    assert records.deterministic_view(first) == records.deterministic_view(second)
    assert second["tamper_proof"] is True


@needs_isolation
def test_any_key_change_misses(cache, monkeypatch):
    _verify()
    k = refcache.key((HOSTILE / "ref.py").read_text(), 2, ["CMP-01", "EXC-01"], False)
    assert refcache.load(k) is not None
    assert refcache.load(refcache.key((HOSTILE / "ref.py").read_text() + "\n", 2, ["CMP-01", "EXC-01"], False)) is None
    assert refcache.load(refcache.key((HOSTILE / "ref.py").read_text(), 3, ["CMP-01", "EXC-01"], False)) is None
    monkeypatch.setattr(battery, "PLAN_VERSION", battery.PLAN_VERSION + "-changed")
    assert refcache.key((HOSTILE / "ref.py").read_text(), 2, ["CMP-01", "EXC-01"], False) != k


@needs_isolation
def test_a_tampered_entry_is_ignored(cache):
    _verify()
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    data = bytearray((entry / "arrays.bin").read_bytes())
    data[-1] ^= 1
    (entry / "arrays.bin").write_bytes(bytes(data))
    k = refcache.key((HOSTILE / "ref.py").read_text(), 2, ["CMP-01", "EXC-01"], False)
    assert refcache.load(k) is None


def test_off_without_isolation(tmp_path, monkeypatch):
    monkeypatch.setenv("LETHE_REF_CACHE", str(tmp_path / "refs"))
    monkeypatch.setenv("LETHE_ISOLATION", "off")
    assert refcache.cache_dir() is None
    monkeypatch.setenv("LETHE_ISOLATION", "auto")
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: "pretend: not root")
    assert refcache.cache_dir() is None
    monkeypatch.setattr(isolation, "unavailable_reason", lambda: None)
    monkeypatch.setenv("LETHE_REF_CACHE", "off")
    assert refcache.cache_dir() is None


def _store(name: str, nbytes: int) -> bool:
    import numpy as np

    return refcache.store(name, {"ok": True}, {"a": np.zeros(nbytes, dtype=np.uint8)}, isolation="test",
                          tamper_proof=True)


@needs_isolation
def test_the_cache_keeps_to_its_size_bound_dropping_the_least_recently_used(cache, monkeypatch):
    """Entries beyond LETHE_REF_CACHE_MAX_GB are pruned oldest-use first; an entry served by load() counts as
    used; an entry larger than the bound is not stored at all."""
    monkeypatch.setenv("LETHE_REF_CACHE_MAX_GB", str(2.5 * (1 << 20) / (1 << 30)))  # 2.5 MiB
    for i, name in enumerate(("a", "b")):
        assert _store(name, 1 << 20)
        os.utime(cache / name, (1000 + i, 1000 + i))
    assert refcache.load("a") is not None  # "a" becomes the most recently used
    assert _store("c", 1 << 20)
    assert sorted(p.name for p in cache.iterdir() if not p.name.startswith(".")) == ["a", "c"]
    assert not _store("huge", 3 << 20) and not (cache / "huge").exists()


@needs_isolation
def test_nothing_is_stored_when_the_disk_would_be_left_without_its_reserve(cache, monkeypatch):
    import shutil as sh

    real = sh.disk_usage
    monkeypatch.setattr(refcache.shutil, "disk_usage",
                        lambda p: real(p)._replace(free=refcache.RESERVE_BYTES + (1 << 19)))
    assert not _store("x", 1 << 20)
    assert _store("y", 1 << 10)
