"""Fixtures for the verifier tests; the helpers themselves live in lethe.verifier.testing."""

from __future__ import annotations

import pytest

from lethe.verifier.testing import inprocess_runner


@pytest.fixture
def verify_local():
    """verify() through the in-process runner."""
    from lethe.verifier import api

    def run(ref, cand, **kw):
        kw.setdefault("device", "cpu")
        return api.verify(ref, cand, runner=inprocess_runner, **kw)

    return run
