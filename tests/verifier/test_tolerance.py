"""tolerance.py: the conditioning floor (cond_floor, with_cond_floor)."""

from __future__ import annotations

import math

import numpy as np

from lethe.verifier import tolerance as T


def test_cond_floor_is_k_cond_sqrt_n_times_spread():
    spread = np.array([0.0, 1e-7, 3e-5])
    n = 400
    np.testing.assert_array_equal(T.cond_floor(spread, n), T.DEFAULT.K_COND * math.sqrt(n) * spread)


def test_non_finite_spread_gives_no_floor():
    f = T.cond_floor(np.array([np.nan, np.inf, 2.0]), 1)
    assert f[0] == 0.0 and f[1] == 0.0 and f[2] == T.DEFAULT.K_COND * 2.0


def test_with_cond_floor_only_raises_where_measured():
    t = np.array([1e-6, 1e-6, 1e-6])
    spread = np.array([0.0, 1e-9, 1e-3])
    out = T.with_cond_floor(t, spread, 16)
    assert out[0] == t[0] and out[1] == t[1]  # a small spread never lowers or changes the tolerance
    assert out[2] == T.DEFAULT.K_COND * 4 * 1e-3
    assert T.with_cond_floor(t, None, 16) is t
    assert T.with_cond_floor(t, np.ones(2), 16) is t  # measured on other elements: not applied
