"""Shared fixtures: small random tables and ids."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def tables(rng):
    """(tok, pos, seg) float64 tables: V=50, P=16, 2 segments, H=8."""
    return (
        rng.standard_normal((50, 8)),
        rng.standard_normal((16, 8)),
        rng.standard_normal((2, 8)),
    )
