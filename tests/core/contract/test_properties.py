"""Property tests (hypothesis): any valid input equals the reference; bad ids never pass."""

import numpy as np
from helpers.reference import reference, tolerance
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from bertembed import bert_embeddings

dims = st.integers(0, 6)


@st.composite
def problems(draw):
    b, s, h = draw(dims), draw(dims), draw(st.integers(1, 9))
    v, p, g = draw(st.integers(1, 12)), s + draw(st.integers(0, 3)), draw(st.integers(1, 3))
    tdt = draw(st.sampled_from([np.float32, np.float64]))
    finite = {"allow_nan": False, "allow_infinity": False, "width": 32}
    tok = draw(hnp.arrays(tdt, (v, h), elements=st.floats(-1e3, 1e3, **finite)))
    pos = draw(hnp.arrays(tdt, (max(p, 1), h), elements=st.floats(-1e3, 1e3, **finite)))
    seg = draw(hnp.arrays(tdt, (g, h), elements=st.floats(-1e3, 1e3, **finite)))
    idt = draw(st.sampled_from([np.int8, np.int32, np.int64, np.uint16, np.uint64]))
    ids = draw(hnp.arrays(idt, (b, s), elements=st.integers(0, min(v - 1, np.iinfo(idt).max))))
    sids = draw(hnp.arrays(idt, (b, s), elements=st.integers(0, g - 1)))
    return ids, sids, tok, pos, seg


@settings(max_examples=150, deadline=None)
@given(problems(), st.sampled_from([np.float32, np.float64]), st.integers(1, 3))
def test_equals_reference(problem, rdt, threads):
    ids, sids, tok, pos, seg = problem
    got = bert_embeddings(ids, sids, tok, pos, seg, dtype=rdt, num_threads=threads)
    want = reference(ids, sids, tok, pos, seg, dtype=rdt)
    tol = tolerance(np.float32) if np.float32 in (tok.dtype, rdt) else tolerance(np.float64)
    np.testing.assert_allclose(got, want, rtol=tol["rtol"], atol=tol["atol"] * 1e3)


@settings(max_examples=150, deadline=None)
@given(problems(), st.data())
def test_any_bad_token_id_is_refused(problem, data):
    ids, sids, tok, pos, seg = problem
    if ids.size == 0:
        return
    ids = ids.astype(np.int64)
    v = tok.shape[0]
    bad = data.draw(st.one_of(st.integers(-(2**63), -1), st.integers(v, 2**63 - 1)))
    where = data.draw(st.integers(0, ids.size - 1))
    ids.reshape(-1)[where] = bad
    try:
        bert_embeddings(ids, sids, tok, pos, seg)
    except IndexError as exc:
        assert f"= {bad} is out of range for token_embeddings with {v} rows" in str(exc)
    else:
        raise AssertionError("an out-of-range id was accepted")


@settings(max_examples=60, deadline=None)
@given(problems())
def test_linearity_in_the_token_table(problem):
    """Adding c to every token row adds c to every output (sum, not concat)."""
    ids, sids, tok, pos, seg = problem
    c = np.arange(tok.shape[1], dtype=np.float64)
    base = bert_embeddings(ids, sids, tok, pos, seg)
    shifted = bert_embeddings(ids, sids, tok.astype(np.float64) + c, pos, seg)
    np.testing.assert_allclose(shifted - base, np.broadcast_to(c, base.shape), atol=1e-9)
