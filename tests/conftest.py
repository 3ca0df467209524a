"""Session-wide test settings."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_reference_cache(tmp_path_factory):
    """Every test session gets its own on-disk reference cache (lethe.verifier.refcache), so no test reads an
    entry an earlier session (or the user's own runs) left behind."""
    old = os.environ.get("LETHE_REF_CACHE")
    os.environ["LETHE_REF_CACHE"] = str(tmp_path_factory.mktemp("refcache") / "refs")
    yield
    if old is None:
        os.environ.pop("LETHE_REF_CACHE", None)
    else:
        os.environ["LETHE_REF_CACHE"] = old


@pytest.fixture
def files(tmp_path):
    """Write a source into the test's directory and return its path."""

    def write(name, src):
        p = tmp_path / name
        p.write_text(src)
        return str(p)

    return write


@pytest.fixture
def local_sandbox(monkeypatch):
    """Route the verifier's sandbox through the in-process runner (trusted fixture kernels only)."""
    from lethe.verifier import api
    from lethe.verifier.testing import inprocess_runner

    monkeypatch.setattr(api, "_sandbox", lambda: inprocess_runner)
