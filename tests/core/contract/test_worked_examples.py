"""The worked examples: small sums checked by hand, the sentence-pair numbers and the theory points."""

import numpy as np
import pytest

from bertembed import bert_embeddings

EXAMPLES = [
    (
        dict(
            token_ids=[[0, 1, 2, 3]],
            segment_ids=[[0, 0, 1, 1]],
            token_embeddings=[[0.1, 0.2], [0.3, -0.1], [-0.2, 0.4], [0.5, 0]],
            position_embeddings=[[0, 0.1], [0.1, 0], [0.2, -0.1], [-0.1, 0.2]],
            segment_embeddings=[[0.01, 0.02], [-0.03, 0.04]],
        ),
        [[[0.11, 0.32], [0.41, -0.08], [-0.03, 0.34], [0.37, 0.24]]],
    ),
    (
        dict(
            token_ids=[[1, 0], [2, 1]],
            segment_ids=[[0, 0], [1, 1]],
            token_embeddings=[[1, 0, -1], [0.5, 0.5, 0.5], [-0.2, 0.3, 0.4]],
            position_embeddings=[[0.1, 0.2, 0.3], [-0.1, 0, 0.1]],
            segment_embeddings=[[0, 0, 0], [0.2, -0.2, 0.1]],
        ),
        [[[0.6, 0.7, 0.8], [0.9, 0, -0.9]], [[0.1, 0.3, 0.8], [0.6, 0.3, 0.7]]],
    ),
    (
        dict(
            token_ids=[[0]],
            segment_ids=[[1]],
            token_embeddings=[[0.4, -0.5]],
            position_embeddings=[[0.1, 0.2]],
            segment_embeddings=[[0, 0], [-0.2, 0.3]],
        ),
        [[[0.3, 0]]],
    ),
]


@pytest.mark.parametrize(("kwargs", "expected"), EXAMPLES, ids=["two-segments", "batch", "single"])
def test_worked_examples(kwargs, expected):
    # Keyword arguments by their documented names, and positionally.
    by_name = bert_embeddings(**kwargs)
    by_position = bert_embeddings(*kwargs.values())
    assert by_name.dtype == np.float64
    assert by_name.shape == np.shape(expected)
    np.testing.assert_allclose(by_name, expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(by_name, by_position)


def _pair_tables():
    """Tables holding the sentence-pair example's hand-picked rows (H = 4)."""
    tok = np.zeros((30522, 4))
    pos = np.zeros((512, 4))
    seg = np.zeros((2, 4))
    tok[4937] = [0.12, -0.45, 0.78, 0.33]  # "cat"
    tok[14195] = [-0.31, 0.56, 0.14, -0.27]  # "slept"
    pos[2] = [0.05, 0.11, -0.03, 0.22]
    pos[6] = [0.18, -0.07, 0.29, 0.03]
    seg[0] = [0.08, -0.14, 0.06, 0.19]
    seg[1] = [-0.11, 0.22, -0.09, 0.15]
    return tok, pos, seg


# [CLS] the cat sat [SEP] it slept [SEP]
PAIR_IDS = [[101, 1996, 4937, 2938, 102, 2009, 14195, 102]]
PAIR_SEGMENTS = [[0, 0, 0, 0, 0, 1, 1, 1]]


def test_numerical_example_cat_and_slept():
    tok, pos, seg = _pair_tables()
    E = bert_embeddings(PAIR_IDS, PAIR_SEGMENTS, tok, pos, seg)
    np.testing.assert_allclose(E[0, 2], [0.25, -0.48, 0.81, 0.74], atol=1e-12)
    np.testing.assert_allclose(E[0, 6], [-0.24, 0.71, 0.34, -0.09], atol=1e-12)
    # "cat" and "slept" got different segment rows: a signal before attention.
    assert not np.allclose(E[0, 2] - tok[4937] - pos[2], E[0, 6] - tok[14195] - pos[6])


def test_sum_not_concat():
    tok, pos, seg = _pair_tables()
    E = bert_embeddings(PAIR_IDS, PAIR_SEGMENTS, tok, pos, seg)
    assert E.shape == (1, 8, 4)  # H, not 3H
    ids = np.array(PAIR_IDS)
    np.testing.assert_allclose(E[0], tok[ids[0]] + pos[:8] + seg[np.array(PAIR_SEGMENTS[0])])


def test_positions_continue_across_segments():
    """Position ids run 0..S-1 through both sentences; they do not reset at B."""
    rng = np.random.default_rng(1)
    tok, pos, seg = rng.standard_normal((50, 3)), rng.standard_normal((16, 3)), np.zeros((2, 3))
    ids = [[1, 7, 8, 2, 9, 10, 2]]
    E = bert_embeddings(ids, [[0, 0, 0, 0, 1, 1, 1]], tok, pos, seg)
    np.testing.assert_allclose(E[0] - tok[ids[0]], pos[:7])
    # The first token of sentence B (index 4) gets position 4, not position 0.
    assert not np.allclose(E[0, 4] - tok[9], pos[0])


def test_cls_gets_segment_zero():
    tok, pos, seg = _pair_tables()
    E = bert_embeddings(PAIR_IDS, PAIR_SEGMENTS, tok, pos, seg)
    np.testing.assert_allclose(E[0, 0] - tok[101] - pos[0], seg[0])
    wrong = bert_embeddings(PAIR_IDS, [[1, 0, 0, 0, 0, 1, 1, 1]], tok, pos, seg)
    assert not np.allclose(wrong[0, 0], E[0, 0])


def test_single_sentence_never_reads_segment_b():
    tok, pos, seg = _pair_tables()
    seg[1] = np.nan  # would poison any row that used it
    E = bert_embeddings(PAIR_IDS, np.zeros((1, 8), int), tok, pos, seg)
    assert np.isfinite(E).all()
    np.testing.assert_array_equal(E, bert_embeddings(PAIR_IDS, None, tok, pos, seg))
