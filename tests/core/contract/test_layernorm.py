"""Fused LayerNorm against the NumPy reference, and its argument checks."""

import numpy as np
import pytest
from helpers.reference import reference, tolerance

from bertembed import BertEmbeddings, bert_embeddings


def setup(rng, b=3, s=7, h=24, dt=np.float64):
    tok = rng.standard_normal((30, h)).astype(dt)
    pos = rng.standard_normal((10, h)).astype(dt)
    seg = rng.standard_normal((2, h)).astype(dt)
    ids = rng.integers(0, 30, (b, s))
    sids = rng.integers(0, 2, (b, s))
    w = rng.uniform(0.5, 1.5, h)
    bias = rng.standard_normal(h)
    return ids, sids, tok, pos, seg, w, bias


@pytest.mark.parametrize("tdt", [np.float32, np.float64])
@pytest.mark.parametrize("rdt", [np.float32, np.float64])
@pytest.mark.parametrize("threads", [1, 2])
def test_layernorm_matches_reference(rng, tdt, rdt, threads):
    ids, sids, tok, pos, seg, w, b = setup(rng, dt=tdt)
    got = bert_embeddings(
        ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, ln_eps=1e-12, dtype=rdt, num_threads=threads
    )
    want = reference(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, ln_eps=1e-12, dtype=rdt)
    np.testing.assert_allclose(got, want, **tolerance(rdt if tdt == np.float64 else np.float32))


def test_layernorm_rows_are_normalised(rng):
    ids, sids, tok, pos, seg, _, _ = setup(rng, h=64)
    h = 64
    got = bert_embeddings(ids, sids, tok, pos, seg, ln_weight=np.ones(h), ln_bias=np.zeros(h))
    np.testing.assert_allclose(got.mean(axis=-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(got.var(axis=-1), 1.0, rtol=1e-10)


def test_layernorm_eps_matters_for_constant_rows():
    h = 4
    tok = np.ones((3, h))
    pos = np.zeros((4, h))
    w, b = np.ones(h), np.full(h, 0.5)
    got = bert_embeddings([[0, 1]], None, tok, pos, None, ln_weight=w, ln_bias=b, ln_eps=1e-5)
    np.testing.assert_allclose(got, 0.5)  # zero variance: (x - mean) = 0, eps avoids 0/0


def test_layernorm_large_offset_is_stable(rng):
    """Variance is computed from centred values in float64: a large common offset is harmless."""
    ids, sids, tok, pos, seg, w, b = setup(rng, dt=np.float32)
    tok = tok + np.float32(1000.0)
    got = bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, dtype=np.float32)
    want = reference(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, dtype=np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_layernorm_without_segment_table_and_with_positions(rng):
    ids, _, tok, pos, _, w, b = setup(rng)
    p_ids = np.arange(7)[::-1].copy()
    got = bert_embeddings(ids, None, tok, pos, None, position_ids=p_ids, ln_weight=w, ln_bias=b, ln_eps=1e-6)
    want = reference(ids, None, tok, pos, None, position_ids=p_ids, ln_weight=w, ln_bias=b, ln_eps=1e-6)
    np.testing.assert_allclose(got, want, **tolerance(np.float64))


def test_layer_with_layernorm(rng):
    ids, sids, tok, pos, seg, w, b = setup(rng, dt=np.float32)
    layer = BertEmbeddings(tok, pos, seg, ln_weight=w.astype(np.float32), ln_bias=b, ln_eps=1e-12)
    assert layer.has_layer_norm
    got = layer(ids, sids)
    assert got.dtype == np.float32
    want = reference(ids, sids, tok, pos, seg, ln_weight=w.astype(np.float32), ln_bias=b, dtype=np.float32)
    np.testing.assert_allclose(got, want, **tolerance(np.float32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weight_without_bias_is_layernorm_without_bias(rng, dtype):
    """ModernBERT's LayerNorm has no bias: a weight alone gives exactly that."""
    ids, sids, tok, pos, seg, w, _ = setup(rng)
    tables = [x.astype(dtype) for x in (tok, pos, seg)]
    got = bert_embeddings(ids, sids, *tables, ln_weight=w, dtype=dtype)
    want = reference(ids, sids, *tables, ln_weight=w, ln_bias=None, dtype=dtype)
    np.testing.assert_allclose(got, want, **tolerance(dtype))
    layer = BertEmbeddings(*tables, ln_weight=w)
    np.testing.assert_allclose(layer(ids, sids), want, **tolerance(dtype))


def test_bias_without_weight(rng):
    ids, sids, tok, pos, seg, _, b = setup(rng)
    with pytest.raises(ValueError, match=r"^ln_bias was given without ln_weight"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_bias=b)
    with pytest.raises(ValueError, match=r"^ln_bias was given without ln_weight"):
        BertEmbeddings(tok, pos, seg, ln_bias=b)


def test_layernorm_param_shapes(rng):
    ids, sids, tok, pos, seg, w, b = setup(rng)
    with pytest.raises(ValueError, match=r"^ln_weight must have shape \(24,\), got shape \(23,\)$"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w[:-1], ln_bias=b)
    with pytest.raises(ValueError, match=r"^ln_bias must have shape \(24,\), got shape \(1, 24\)$"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b[None])
    with pytest.raises(TypeError, match=r"^ln_bias must be a float array, got dtype <U1"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=["a"] * 24)


@pytest.mark.parametrize("eps", [0.0, -1e-12, float("nan"), float("inf")])
def test_eps_must_be_finite_positive(rng, eps):
    ids, sids, tok, pos, seg, w, b = setup(rng)
    with pytest.raises(ValueError, match=r"^ln_eps must be a finite positive number"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, ln_eps=eps)


@pytest.mark.parametrize("eps", ["1e-12", None, True])
def test_eps_must_be_a_number(rng, eps):
    ids, sids, tok, pos, seg, w, b = setup(rng)
    with pytest.raises(TypeError, match=r"^ln_eps must be a real number"):
        bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, ln_eps=eps)


@pytest.mark.parametrize("dt", [np.float32, np.float64])
def test_layernorm_of_an_infinite_row_is_nan_like_numpy(dt):
    """An inf in a row makes its variance inf: every output is NaN, as in NumPy and torch."""
    tok = np.array([[1.0, 2.0, 3.0]], dt)
    pos = np.array([[0.0, np.inf, 0.0]], dt)
    got = bert_embeddings([[0]], None, tok, pos, None, ln_weight=np.ones(3), ln_bias=np.zeros(3), dtype=dt)
    want = reference([[0]], None, tok, pos, None, ln_weight=np.ones(3), ln_bias=np.zeros(3), dtype=dt)
    assert np.isnan(want).all()
    assert np.isnan(got).all()
