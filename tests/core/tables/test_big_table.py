"""64-bit offsets: a token table with more than 2**31 elements.

The table is a sparse file (~8.6 GB apparent size, a few KB on disk) opened
with ``np.memmap`` read-only; only the rows looked up are ever paged in. On
Windows (where ``long`` is 32-bit: the platform that most needs this test) the
file is marked sparse first (``FSCTL_SET_SPARSE``) and its size on disk read
with ``GetCompressedFileSizeW``; elsewhere a file is sparse when it is
extended and ``st_blocks`` tells its size on disk.
"""

from __future__ import annotations

import gc
import os
import sys

import numpy as np
import pytest
from helpers.reference import reference

import bertembed

ROWS = 1 << 21
H = 1025  # ROWS * H = 2_149_580_800 > 2**31 elements
ITEM = np.dtype(np.float32).itemsize


def _last_row_values() -> np.ndarray:
    return (np.arange(H, dtype=np.float32) - 512.0) / 8.0 + 0.25


def _make_sparse(f) -> None:
    """Windows: mark the open file sparse, so that extending it allocates nothing."""
    if sys.platform != "win32":
        return
    import ctypes
    import msvcrt
    from ctypes import wintypes

    fsctl_set_sparse = 0x000900C4
    returned = wintypes.DWORD()
    handle = msvcrt.get_osfhandle(f.fileno())
    if not ctypes.windll.kernel32.DeviceIoControl(  # type: ignore[attr-defined]
        wintypes.HANDLE(handle), fsctl_set_sparse, None, 0, None, 0, ctypes.byref(returned), None
    ):
        raise OSError(ctypes.get_last_error(), "FSCTL_SET_SPARSE failed")


def _bytes_on_disk(path) -> int | None:
    """What the file takes on disk (None: the platform cannot tell)."""
    if sys.platform == "win32":
        import ctypes
        from ctypes import wintypes

        get_size = ctypes.windll.kernel32.GetCompressedFileSizeW  # type: ignore[attr-defined]
        get_size.restype = wintypes.DWORD
        high = wintypes.DWORD()
        low = get_size(str(path), ctypes.byref(high))
        return (high.value << 32) | low
    st = os.stat(path)
    return st.st_blocks * 512 if hasattr(st, "st_blocks") else None


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "tok.f32"
    size = ROWS * H * ITEM
    try:
        with open(path, "wb") as f:
            _make_sparse(f)
            f.truncate(size)
            f.seek((ROWS - 1) * H * ITEM)
            f.write(_last_row_values().tobytes())
    except (OSError, OverflowError) as exc:
        pytest.skip(f"cannot create an {size / 2**30:.1f} GiB sparse file: {exc}")
    on_disk = _bytes_on_disk(path)
    if on_disk is None or on_disk > 64 * 2**20:
        path.unlink()
        pytest.skip("the filesystem does not store sparse files sparsely")
    yield path
    gc.collect()
    try:
        path.unlink()
    except PermissionError:
        # Windows refuses to delete a mapped file, and pytest holds the last
        # test's map (its arguments) until after this teardown; the file (a few
        # KB on disk) goes with pytest's own clean-up of old temporary folders.
        pass


@pytest.fixture
def big_table(big_file):
    """The file mapped for one test (a module-wide map would outlive the file's removal)."""
    try:
        table = np.memmap(big_file, dtype=np.float32, mode="r", shape=(ROWS, H))
    except (OSError, ValueError, OverflowError) as exc:  # e.g. 32-bit address space
        pytest.skip(f"cannot map the table: {exc}")
    assert table.size > 2**31
    return table


def _small_tables(rng):
    return rng.standard_normal((8, H)).astype(np.float32), rng.standard_normal((2, H)).astype(np.float32)


def test_last_and_first_rows_of_a_huge_table(big_table):
    rng = np.random.default_rng(0)
    pos, seg = _small_tables(rng)
    ids = np.array([[ROWS - 1, 0, ROWS - 1, ROWS - 2]])
    sids = np.array([[0, 1, 1, 0]])
    # Only the rows used by the reference (NumPy fancy indexing reads just those).
    got = bertembed.bert_embeddings(ids, sids, big_table, pos, seg, dtype=np.float64)
    expected_rows = {ROWS - 1: _last_row_values(), 0: np.zeros(H, np.float32), ROWS - 2: np.zeros(H, np.float32)}
    small_tok = np.stack([expected_rows[int(i)] for i in ids[0]])
    expected = reference([[0, 1, 2, 3]], sids, small_tok, pos, seg)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    # The last row itself, not just something close: ids past 2**31 / H rows.
    np.testing.assert_array_equal(got[0, 0] - pos[0] - seg[0], _last_row_values())


def test_layer_on_a_memory_mapped_huge_table(big_table):
    rng = np.random.default_rng(1)
    pos, seg = _small_tables(rng)
    layer = bertembed.BertEmbeddings(big_table, pos, seg, ln_weight=np.ones(H), ln_bias=np.zeros(H), ln_eps=1e-5)
    assert layer.vocab_size == ROWS
    ids = np.array([ROWS - 1, 0], dtype=np.uint32)
    got = layer(ids, num_threads=2)
    small_tok = np.stack([_last_row_values(), np.zeros(H, np.float32)])
    expected = reference(
        [0, 1], None, small_tok, pos, seg, ln_weight=np.ones(H), ln_bias=np.zeros(H), ln_eps=1e-5, dtype=np.float32
    )
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_out_of_range_just_past_the_end(big_table):
    rng = np.random.default_rng(2)
    pos, seg = _small_tables(rng)
    with pytest.raises(
        IndexError,
        match=rf"token_ids\[0, 1\] = {ROWS} is out of range "
        rf"for token_embeddings with {ROWS} rows",
    ):
        bertembed.bert_embeddings([[0, ROWS]], None, big_table, pos, seg)
