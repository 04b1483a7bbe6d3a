# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True
"""Compute kernel of bertembed.

The functions here trust their arguments: the Python shim (``_api.py``,
``_checks.py``) has already checked dtypes, shapes, contiguity and every
id's range. Nothing in a loop touches a Python object, and every loop runs
without the GIL. The row arithmetic lives in C (``_rows.h``), compiled once
per instruction set.
"""

import os

cimport numpy as cnp
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc

cnp.import_array()

cdef extern from "_omp.h" nogil:
    int BE_OPENMP
    int BE_OPENMP_VERSION
    const char *BE_COMPILER
    int be_max_threads()
    int be_release_threads()

cdef extern from "_rows.h" nogil:
    ctypedef struct be_term:
        const char *data
        Py_ssize_t row_bytes
        int kind
        const char *ids
        Py_ssize_t ids_bstride

    ctypedef struct be_job:
        Py_ssize_t S, H, slot
        int id64
        const char *tok_ids
        const char *tok
        Py_ssize_t tok_row_bytes
        int tok_kind
        const float *tok_scale
        be_term terms[3]
        int nterms
        int ln
        const float *w32
        const float *b32
        const double *w64
        const double *b64
        double eps
        const unsigned char *keep
        char *out
        Py_ssize_t out_row_bytes
        int out_kind
        int wide
        int stream

    int BE_SCRATCH_SLOTS
    void be_rows_init(const char *cap)
    const char *be_isa
    void be_row(const be_job *j, Py_ssize_t r, double *scratch)
    void be_store_fence()


cdef void _init_rows():
    """Pick the row kernel for this CPU; BERTEMBED_ISA=baseline|avx2 caps it."""
    cdef bytes cap = os.environ.get("BERTEMBED_ISA", "").encode()
    be_rows_init(<const char *>cap if cap else NULL)


_init_rows()

ctypedef fused idx_t:
    int32_t
    int64_t


def openmp_enabled():
    """Whether the extension was compiled with OpenMP."""
    return BE_OPENMP != 0


def build_info():
    """Compiler, OpenMP version (``_OPENMP``, 0 without) and row-kernel ISA."""
    return {"compiler": BE_COMPILER.decode("utf-8", "replace"),
            "openmp_version": BE_OPENMP_VERSION,
            "isa": be_isa.decode()}


def max_threads():
    """``omp_get_max_threads()`` for the calling thread (1 without OpenMP)."""
    return be_max_threads()


def release_threads():
    """Release the calling thread's OpenMP pool (``omp_pause_resource_all``).

    Returns 0 on success, non-zero when the runtime cannot do it.
    """
    cdef int rc
    with nogil:
        rc = be_release_threads()
    return rc


def first_out_of_range(const idx_t[::1] ids, Py_ssize_t rows):
    """Flat index of the first id outside ``[0, rows)``, or -1.

    A negative id is out of range: ids never wrap.
    """
    cdef Py_ssize_t i, n = ids.shape[0]
    cdef Py_ssize_t found = -1
    cdef unsigned long long limit = <unsigned long long>rows
    cdef bint bad = False
    with nogil:
        # A branch-free scan first (vectorisable), the position only on failure.
        for i in range(n):
            bad |= <unsigned long long>(<int64_t>ids[i]) >= limit
        if bad:
            for i in range(n):
                if <unsigned long long>(<int64_t>ids[i]) >= limit:
                    found = i
                    break
    return found


def padding_positions(const idx_t[:, ::1] ids, idx_t padding_idx, idx_t[:, ::1] out):
    """RoBERTa's position ids: ``padding_idx`` for pads, else
    ``padding_idx + 1 + (non-pad tokens before this one in its row)``.

    Returns the largest position written (``padding_idx`` if there is none).
    """
    cdef Py_ssize_t b, s, B = ids.shape[0], S = ids.shape[1]
    cdef int64_t count, top = padding_idx
    with nogil:
        for b in range(B):
            count = padding_idx
            for s in range(S):
                if ids[b, s] == padding_idx:
                    out[b, s] = padding_idx
                else:
                    count += 1
                    out[b, s] = <idx_t>count
            if count > top:
                top = count
    return top


cdef inline const char *_data(object arr):
    return <const char *>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline Py_ssize_t _row_bytes(object arr):
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return cnp.PyArray_DIMS(a)[cnp.PyArray_NDIM(a) - 1] * cnp.PyArray_ITEMSIZE(a)


def embed(object token_ids, object tok, int tok_kind, object tok_scale, tuple terms,
          object w32, object b32, object w64, object b64, double eps,
          object keep, object out, int out_kind, bint wide, int num_threads, bint stream):
    """Fill ``out`` (C-contiguous, ``token_ids.shape + (H,)``) with the embeddings.

    ``token_ids``: (B, S) C-contiguous int32 or int64; every other id array
    has the same dtype. ``tok``: (V, H) table stored as ``tok_kind`` (0
    float32, 1 float64, 2 float16, 3 bfloat16 bits as uint16, 4 int8 with
    ``tok_scale`` (V,) float32). ``terms``: up to three ``(table, kind, ids)``
    (position, segment, task), ``ids`` (1 or B, S), or None for row 0.
    ``w32``/``w64`` None: no LayerNorm; ``b32``/``b64`` None: no bias.
    ``keep``: None, or (B, S) uint8 (rows with 0 are zeros). ``wide``: compute
    in float64. The caller has checked every id and every shape.
    """
    cdef cnp.ndarray ids = <cnp.ndarray>token_ids
    cdef be_job job
    cdef Py_ssize_t S = cnp.PyArray_DIMS(ids)[1]
    cdef Py_ssize_t n = cnp.PyArray_DIMS(ids)[0] * S
    cdef Py_ssize_t H = cnp.PyArray_DIMS(<cnp.ndarray>tok)[1]
    cdef Py_ssize_t r
    cdef int k
    cdef double *scratch = NULL
    cdef double *mine = NULL
    cdef int nt = num_threads if (num_threads > 1 and BE_OPENMP) else 1
    if n == 0:
        return
    job.S = S
    job.H = H
    job.slot = (H + 15) & ~(<Py_ssize_t>15)
    job.id64 = cnp.PyArray_ITEMSIZE(ids) == 8
    job.tok_ids = _data(ids)
    job.tok = _data(tok)
    job.tok_row_bytes = _row_bytes(tok)
    job.tok_kind = tok_kind
    job.tok_scale = <const float *>_data(tok_scale) if tok_scale is not None else NULL
    job.nterms = len(terms)
    for k in range(job.nterms):
        table, kind, tids = terms[k]
        job.terms[k].data = _data(table)
        job.terms[k].row_bytes = _row_bytes(table)
        job.terms[k].kind = kind
        if tids is None:
            job.terms[k].ids = NULL
            job.terms[k].ids_bstride = 0
        else:
            job.terms[k].ids = _data(tids)
            job.terms[k].ids_bstride = 0 if cnp.PyArray_DIMS(<cnp.ndarray>tids)[0] == 1 else S
    job.ln = w32 is not None
    job.w32 = <const float *>_data(w32) if w32 is not None else NULL
    job.b32 = <const float *>_data(b32) if b32 is not None else NULL
    job.w64 = <const double *>_data(w64) if w64 is not None else NULL
    job.b64 = <const double *>_data(b64) if b64 is not None else NULL
    job.eps = eps
    job.keep = <const unsigned char *>_data(keep) if keep is not None else NULL
    job.out = <char *>cnp.PyArray_DATA(<cnp.ndarray>out)
    job.out_row_bytes = H * cnp.PyArray_ITEMSIZE(<cnp.ndarray>out)
    job.out_kind = out_kind
    job.wide = wide
    job.stream = stream
    # Scratch rows per thread, allocated before the parallel region so that
    # no thread can fail inside it.
    scratch = <double *>malloc(nt * BE_SCRATCH_SLOTS * job.slot * sizeof(double))
    if scratch == NULL:
        raise MemoryError("bertembed: no memory for per-thread row buffers")
    try:
        if nt == 1:
            with nogil:
                for r in range(n):
                    be_row(&job, r, scratch)
                if stream:
                    be_store_fence()
        else:
            with nogil, parallel(num_threads=nt):
                mine = scratch + threadid() * BE_SCRATCH_SLOTS * job.slot
                for r in prange(n, schedule="dynamic", chunksize=16):
                    be_row(&job, r, mine)
                if stream:
                    be_store_fence()
    finally:
        free(scratch)
