# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True
"""Compute kernel of bertembed.

The functions here trust their arguments: the Python shim in ``_api.py``
has already checked dtypes, shapes, contiguity and every id's range.
Nothing in a loop touches a Python object, and every loop runs without
the GIL.
"""

from cython.parallel cimport prange, threadid
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc
from libc.math cimport sqrt

cdef extern from * nogil:
    """
    #ifdef _OPENMP
    #include <omp.h>
    #define BE_OPENMP 1
    static int be_max_threads(void) { return omp_get_max_threads(); }
    /* libgomp has had omp_pause_resource_all since GCC 9 while still
       reporting _OPENMP 201511; LLVM's libomp reports 201811 or newer. */
    #if _OPENMP >= 201811 || (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9)
    static int be_release_threads(void) {
        return omp_pause_resource_all(omp_pause_hard);
    }
    #else
    static int be_release_threads(void) { return -1; }
    #endif
    #else
    #define BE_OPENMP 0
    static int be_max_threads(void) { return 1; }
    static int be_release_threads(void) { return -1; }
    #endif
    #ifdef _OPENMP
    #define BE_OPENMP_VERSION _OPENMP
    #else
    #define BE_OPENMP_VERSION 0
    #endif
    #if defined(__clang__)
    #define BE_COMPILER "clang " __clang_version__
    #elif defined(__GNUC__)
    #define BE_COMPILER "gcc " __VERSION__
    #elif defined(_MSC_VER)
    #define BE_STR2(x) #x
    #define BE_STR(x) BE_STR2(x)
    #define BE_COMPILER "msvc " BE_STR(_MSC_VER)
    #else
    #define BE_COMPILER "unknown"
    #endif
    #if defined(__GNUC__)
    #define BE_PREFETCH(p) __builtin_prefetch((p), 0, 0)
    #else
    #define BE_PREFETCH(p) ((void)0)
    #endif
    """
    int BE_OPENMP
    int BE_OPENMP_VERSION
    const char *BE_COMPILER
    int be_max_threads()
    int be_release_threads()
    void BE_PREFETCH(const void *p)

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
    """Compiler and OpenMP version (``_OPENMP``, 0 without) of this build."""
    return {"compiler": BE_COMPILER.decode("utf-8", "replace"),
            "openmp_version": BE_OPENMP_VERSION}


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
                           const double *w, const double *b, double eps,
                           double *buf) noexcept nogil:
    """o = LayerNorm(t + p (+ g)) * w + b, with all statistics in float64."""
    cdef Py_ssize_t h
    cdef double x, mean, var = 0.0, total = 0.0, rstd
    if has_seg:
        for h in range(H):
            x = <double>t[h] + <double>p[h] + <double>g[h]
            buf[h] = x
            total += x
    else:
        for h in range(H):
            x = <double>t[h] + <double>p[h]
            buf[h] = x
            total += x
    mean = total / H
    # The row sits in L1 now: a second pass over it gives an exact-centred
    # variance without touching memory again.
    for h in range(H):
        x = buf[h] - mean
        var += x * x
    rstd = 1.0 / sqrt(var / H + eps)
    for h in range(H):
        o[h] = <out_t>((buf[h] - mean) * rstd * w[h] + b[h])


cdef inline void _one_row(Py_ssize_t r, Py_ssize_t S,
                          const idx_t[:, ::1] token_ids,
                          const idx_t[:, ::1] position_ids,
                          const idx_t[:, ::1] segment_ids,
                          const tok_t[:, ::1] tok, const small_t[:, ::1] pos,
                          const small_t[:, ::1] seg, bint has_seg,
                          const double *w, const double *b, double eps,
                          out_t[:, ::1] out, double *buf) noexcept nogil:
    cdef Py_ssize_t bi = r // S
    cdef Py_ssize_t s = r - bi * S
    cdef Py_ssize_t H = out.shape[1]
    cdef Py_ssize_t pb = bi if position_ids.shape[0] > 1 else 0
    cdef Py_ssize_t gb = bi if segment_ids.shape[0] > 1 else 0
    cdef const small_t *g = &pos[0, 0]
    cdef Py_ssize_t nxt
    if has_seg:
        g = &seg[<Py_ssize_t>segment_ids[gb, s], 0]
    # Start fetching the next token row while this one is summed.
    if s + 1 < S:
        nxt = <Py_ssize_t>token_ids[bi, s + 1]
        BE_PREFETCH(&tok[nxt, 0])
    if w == NULL:
        _sum_row(&tok[<Py_ssize_t>token_ids[bi, s], 0],
                 &pos[<Py_ssize_t>position_ids[pb, s], 0], g,
                 &out[r, 0], H, has_seg)
    else:
        _norm_row(&tok[<Py_ssize_t>token_ids[bi, s], 0],
                  &pos[<Py_ssize_t>position_ids[pb, s], 0], g,
                  &out[r, 0], H, has_seg, w, b, eps, buf)


def embed(const idx_t[:, ::1] token_ids,
          const idx_t[:, ::1] position_ids,
          const idx_t[:, ::1] segment_ids,
          const tok_t[:, ::1] tok,
          const small_t[:, ::1] pos,
          const small_t[:, ::1] seg,
          bint has_seg,
          const double[::1] ln_weight,
          const double[::1] ln_bias,
          double eps,
          out_t[:, ::1] out,
          int num_threads):
    """Fill ``out[b * S + s]`` with the embedding of position (b, s).

    ``position_ids`` and ``segment_ids`` have 1 or B rows (one row is shared
    by the whole batch). Without a segment table pass ``has_seg=False`` and
    any table of the right type as ``seg``. ``ln_weight``/``ln_bias`` of
    length 0 mean no LayerNorm. The caller has checked every id.
    """
    cdef Py_ssize_t S = token_ids.shape[1]
    cdef Py_ssize_t n = token_ids.shape[0] * S
    cdef Py_ssize_t H = out.shape[1]
    cdef Py_ssize_t r
    cdef const double *w = NULL
    cdef const double *b = NULL
    cdef double *buf = NULL
    cdef int nt = num_threads if (num_threads > 1 and BE_OPENMP) else 1
    if n == 0:
        return
    if ln_weight.shape[0] > 0:
        w = &ln_weight[0]
        b = &ln_bias[0]
        # One float64 row per thread, allocated before the parallel region
        # so that no thread can fail inside it.
        buf = <double *>malloc(nt * H * sizeof(double))
        if buf == NULL:
            raise MemoryError("bertembed: no memory for LayerNorm row buffers")
    try:
        if nt == 1:
            with nogil:
                for r in range(n):
                    _one_row(r, S, token_ids, position_ids, segment_ids,
                             tok, pos, seg, has_seg, w, b, eps, out, buf)
        else:
            for r in prange(n, nogil=True, num_threads=nt, schedule="static"):
                _one_row(r, S, token_ids, position_ids, segment_ids,
                         tok, pos, seg, has_seg, w, b, eps, out,
                         buf + threadid() * H if buf != NULL else NULL)
    finally:
        free(buf)
