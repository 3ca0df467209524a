"""Shared fixtures: where the released records are (data/published/ once copied, the shared copy otherwise)."""

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared/data/lethe-published")


@pytest.fixture(scope="session")
def published_dir() -> Path:
    for candidate in (REPO / "data" / "published", SHARED):
        if (candidate / "audit_floor_ablation.json").is_file():
            return candidate
    pytest.skip("released records (data/published/) not present")


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
