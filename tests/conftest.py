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
