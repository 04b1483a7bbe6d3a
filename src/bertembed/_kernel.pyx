# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True
"""Compute kernel of bertembed.

The functions here trust their arguments: the Python shim in ``_api.py``
has already checked dtypes, shapes, contiguity and every id's range.
Nothing in a loop touches a Python object, and every loop runs without
the GIL.
"""

import os

from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.math cimport sqrt

cdef extern from "_omp.h" nogil:
    int BE_OPENMP
    int BE_OPENMP_VERSION
    const char *BE_COMPILER
    int be_max_threads()
    int be_release_threads()
    void be_prefetch_row(const void *p, size_t nbytes)

cdef extern from "_rows.h" nogil:
    void be_rows_init(const char *cap)
    const char *be_isa
    void be_ln32(const float *t, const float *p, const float *g, float *o, Py_ssize_t H,
                 int has_seg, const float *w, const float *b, double eps, float *buf)
    void be_row_stats(const double *x, Py_ssize_t n, double *mean, double *var)
    void be_stream_copy(void *dst, const void *src, size_t n)
    void be_store_fence()


cdef void _init_rows():
    """Pick the row kernel for this CPU; BERTEMBED_ISA=baseline|avx2 caps it."""
    cdef bytes cap = os.environ.get("BERTEMBED_ISA", "").encode()
    be_rows_init(<const char *>cap if cap else NULL)


_init_rows()

ctypedef fused idx_t:
    int32_t
    int64_t

ctypedef fused tok_t:
    float
    double

ctypedef fused small_t:
    float
    double

ctypedef fused out_t:
    float
    double


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


cdef inline void _sum_row(const tok_t *t, const small_t *p, const small_t *g,
                          out_t *o, Py_ssize_t H, bint has_seg) noexcept nogil:
    """o = t + p (+ g), in the wider precision of the inputs and the result."""
    cdef Py_ssize_t h
    if tok_t is float and small_t is float and out_t is float:
        if has_seg:
            for h in range(H):
                o[h] = t[h] + p[h] + g[h]
        else:
            for h in range(H):
                o[h] = t[h] + p[h]
    else:
        if has_seg:
            for h in range(H):
                o[h] = <out_t>(<double>t[h] + <double>p[h] + <double>g[h])
        else:
            for h in range(H):
                o[h] = <out_t>(<double>t[h] + <double>p[h])


cdef inline void _norm_row(const tok_t *t, const small_t *p, const small_t *g,
                           out_t *o, Py_ssize_t H, bint has_seg,
                           const double *w, const double *b,
                           const float *w32, const float *b32, double eps,
                           double *buf) noexcept nogil:
    """o = LayerNorm(t + p (+ g)) * w + b; mean and variance in float64.

    All-float32 rows go to the C kernel (float32 data, vectorised for the
    CPU's widest ISA); every other combination is computed in float64.
    """
    cdef Py_ssize_t h
    cdef double mean, var, rstd
    if tok_t is float and small_t is float and out_t is float:
        be_ln32(t, p, g, o, H, has_seg, w32, b32, eps, <float *>buf)
    else:
        if has_seg:
            for h in range(H):
                buf[h] = <double>t[h] + <double>p[h] + <double>g[h]
        else:
            for h in range(H):
                buf[h] = <double>t[h] + <double>p[h]
        be_row_stats(buf, H, &mean, &var)
        rstd = 1.0 / sqrt(var + eps)
        for h in range(H):
            o[h] = <out_t>((buf[h] - mean) * rstd * w[h] + b[h])


cdef inline void _one_row(Py_ssize_t r, Py_ssize_t S,
                          const idx_t[:, ::1] token_ids,
                          const idx_t[:, ::1] position_ids,
                          const idx_t[:, ::1] segment_ids,
                          const tok_t[:, ::1] tok, const small_t[:, ::1] pos,
                          const small_t[:, ::1] seg, bint has_seg,
                          const double *w, const double *b,
                          const float *w32, const float *b32, double eps,
                          out_t[:, ::1] out, double *scratch, bint stream) noexcept nogil:
    cdef Py_ssize_t bi = r // S
    cdef Py_ssize_t s = r - bi * S
    cdef Py_ssize_t H = out.shape[1]
    cdef Py_ssize_t pb = bi if position_ids.shape[0] > 1 else 0
    cdef Py_ssize_t gb = bi if segment_ids.shape[0] > 1 else 0
    cdef const small_t *g = &pos[0, 0]
    cdef out_t *dst = &out[r, 0]
    if has_seg:
        g = &seg[<Py_ssize_t>segment_ids[gb, s], 0]
    # Start fetching the whole next token row (a random row of a big table:
    # the hardware prefetcher cannot guess it) while this one is computed.
    if s + 1 < S:
        be_prefetch_row(&tok[<Py_ssize_t>token_ids[bi, s + 1], 0], H * sizeof(tok_t))
    if stream:
        dst = <out_t *>(scratch + H)
    if w == NULL:
        _sum_row(&tok[<Py_ssize_t>token_ids[bi, s], 0],
                 &pos[<Py_ssize_t>position_ids[pb, s], 0], g, dst, H, has_seg)
    else:
        _norm_row(&tok[<Py_ssize_t>token_ids[bi, s], 0],
                  &pos[<Py_ssize_t>position_ids[pb, s], 0], g,
                  dst, H, has_seg, w, b, w32, b32, eps, scratch)
    if stream:
        be_stream_copy(&out[r, 0], dst, H * sizeof(out_t))


def embed(const idx_t[:, ::1] token_ids,
          const idx_t[:, ::1] position_ids,
          const idx_t[:, ::1] segment_ids,
          const tok_t[:, ::1] tok,
          const small_t[:, ::1] pos,
          const small_t[:, ::1] seg,
          bint has_seg,
          const double[::1] ln_weight,
          const double[::1] ln_bias,
          const float[::1] ln_weight32,
          const float[::1] ln_bias32,
          double eps,
          out_t[:, ::1] out,
          int num_threads,
          bint stream):
    """Fill ``out[b * S + s]`` with the embedding of position (b, s).

    ``position_ids`` and ``segment_ids`` have 1 or B rows (one row is shared
    by the whole batch). Without a segment table pass ``has_seg=False`` and
    any table of the right type as ``seg``. LayerNorm parameters of length 0
    mean no LayerNorm (the float32 copies are used by all-float32 rows).
    ``stream``: write finished rows with non-temporal stores (large results).
    The caller has checked every id.
    """
    cdef Py_ssize_t S = token_ids.shape[1]
    cdef Py_ssize_t n = token_ids.shape[0] * S
    cdef Py_ssize_t H = out.shape[1]
    cdef Py_ssize_t r
    cdef const double *w = NULL
    cdef const double *b = NULL
    cdef const float *w32 = NULL
    cdef const float *b32 = NULL
    cdef double *scratch = NULL
    cdef double *mine = NULL
    cdef int nt = num_threads if (num_threads > 1 and BE_OPENMP) else 1
    if n == 0:
        return
    if ln_weight.shape[0] > 0:
        w, b = &ln_weight[0], &ln_bias[0]
        w32, b32 = &ln_weight32[0], &ln_bias32[0]
    if w != NULL or stream:
        # Two float64 rows per thread (LayerNorm row, finished row to
        # stream), allocated before the parallel region so that no thread
        # can fail inside it.
        scratch = <double *>malloc(nt * 2 * H * sizeof(double))
        if scratch == NULL:
            raise MemoryError("bertembed: no memory for per-thread row buffers")
    try:
        if nt == 1:
            with nogil:
                for r in range(n):
                    _one_row(r, S, token_ids, position_ids, segment_ids, tok, pos, seg,
                             has_seg, w, b, w32, b32, eps, out, scratch, stream)
                if stream:
                    be_store_fence()
        else:
            with nogil, parallel(num_threads=nt):
                mine = scratch + threadid() * 2 * H if scratch != NULL else NULL
                for r in prange(n, schedule="dynamic", chunksize=16):
                    _one_row(r, S, token_ids, position_ids, segment_ids, tok, pos, seg,
                             has_seg, w, b, w32, b32, eps, out, mine, stream)
                if stream:
                    be_store_fence()
    finally:
        free(scratch)
