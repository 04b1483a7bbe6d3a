"""Every code path of the kernel gives the reference result: streaming
stores, each row-kernel instruction set, odd widths, serial and parallel."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import cpu
from helpers.reference import reference, tolerance

from bertembed import bert_embeddings
from bertembed._core import _kernel
from bertembed._core import embed as _api

# The row kernels of this machine's architecture, narrowest first
# (BERTEMBED_ISA names one as a cap).
ISAS = list(cpu.order())


@pytest.mark.parametrize("h", [1, 3, 7, 8, 9, 17, 64, 385])
@pytest.mark.parametrize("rdt", [np.float32, np.float64])
@pytest.mark.parametrize("ln", [False, True])
def test_streaming_stores_match(monkeypatch, rng, h, rdt, ln):
    """Force the non-temporal path on small results: odd widths make rows
    start at every alignment, which the head/tail handling must get right."""
    monkeypatch.setattr(_api, "STREAM_MIN_BYTES", 0)
    tok = rng.standard_normal((40, h)).astype(np.float32)
    pos = rng.standard_normal((12, h)).astype(np.float32)
    seg = rng.standard_normal((2, h)).astype(np.float32)
    ids, sids = rng.integers(0, 40, (5, 12)), rng.integers(0, 2, (5, 12))
    kw = dict(ln_weight=rng.standard_normal(h), ln_bias=rng.standard_normal(h)) if ln else {}
    for threads in (1, 2):
        got = bert_embeddings(ids, sids, tok, pos, seg, dtype=rdt, num_threads=threads, **kw)
        want = reference(ids, sids, tok, pos, seg, dtype=rdt, **kw)
        np.testing.assert_allclose(got, want, **tolerance(np.float32))


def test_large_results_are_right(rng):
    """Results above STREAM_MIN_BYTES, unpatched: streamed with LayerNorm, plain without."""
    h = 256
    b, s = 4, 2 * _api.STREAM_MIN_BYTES // (4 * h * 8) + 1
    tok, pos, seg = rng.standard_normal((100, h)), rng.standard_normal((s, h)), rng.standard_normal((2, h))
    ids, sids = rng.integers(0, 100, (b, s)), rng.integers(0, 2, (b, s))
    got = bert_embeddings(ids, sids, tok, pos, seg)
    assert got.nbytes >= _api.STREAM_MIN_BYTES
    np.testing.assert_array_equal(got, tok[ids] + pos[np.arange(s)] + seg[sids])
    w, bias = rng.standard_normal(h), rng.standard_normal(h)
    got = bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=bias)
    want = reference(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=bias)
    np.testing.assert_allclose(got, want, **tolerance(np.float64))


SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, bertembed
    from bertembed._core import _kernel
    rng = np.random.default_rng(3)
    h = int(sys.argv[2])
    tok, pos, seg = (rng.standard_normal((n, h)).astype(np.float32) for n in (30, 9, 2))
    w, b = rng.uniform(0.5, 2, h).astype(np.float32), rng.standard_normal(h).astype(np.float32)
    ids, sids = rng.integers(0, 30, (4, 9)), rng.integers(0, 2, (4, 9))
    out = bertembed.bert_embeddings(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b,
                                    dtype=np.float32, num_threads=2)
    np.save(sys.argv[1], out)
    print(_kernel.build_info()["isa"])
    """
)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("h", [5, 384, 768])
def test_each_row_kernel_isa(tmp_path, isa, h):
    """BERTEMBED_ISA caps the instruction set; each one equals the reference."""
    path = tmp_path / "out.npy"
    env = dict(os.environ, BERTEMBED_ISA=isa)
    res = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(path), str(h)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    chosen = res.stdout.strip()
    # The best this CPU runs and the build holds, never above the cap.
    assert chosen == cpu.best_isa(_kernel.build_info()["isas"], cap=isa)
    rng = np.random.default_rng(3)
    tok, pos, seg = (rng.standard_normal((n, h)).astype(np.float32) for n in (30, 9, 2))
    w, b = rng.uniform(0.5, 2, h).astype(np.float32), rng.standard_normal(h).astype(np.float32)
    ids, sids = rng.integers(0, 30, (4, 9)), rng.integers(0, 2, (4, 9))
    want = reference(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, dtype=np.float32)
    np.testing.assert_allclose(np.load(path), want, **tolerance(np.float32))


def test_build_info_names_the_isa():
    info = _kernel.build_info()
    assert isinstance(info["compiler"], str) and info["compiler"]
    built = info["isas"]
    assert isinstance(built, tuple)
    # Every build of this platform holds these (an x86-64 build without the
    # AVX2 body runs the baseline on every CPU, and would pass the rest).
    assert set(cpu.required_built(info["compiler"])) <= set(built), (info["compiler"], built)
    # The kernel picked the widest the CPU runs (or BERTEMBED_ISA allows).
    assert info["isa"] == cpu.best_isa(built, cap=os.environ.get("BERTEMBED_ISA") or None)


def test_first_out_of_range_scans_every_position():
    for dt in (np.int32, np.int64):
        ids = np.zeros(1000, dt)
        assert _kernel.first_out_of_range(ids, 1) == -1
        for where in (0, 1, 511, 999):
            bad = ids.copy()
            bad[where] = -1
            assert _kernel.first_out_of_range(bad, 1) == where
            bad[where] = 1
            assert _kernel.first_out_of_range(bad, 1) == where


def test_in_flight_counter_returns_to_zero_after_errors():
    rng = np.random.default_rng(0)
    tok, pos = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    bert_embeddings([[1, 2]], None, tok, pos, None)
    with pytest.raises(IndexError):
        bert_embeddings([[1, 9]], None, tok, pos, None)
    assert _kernel.in_flight() == 0
