# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True
"""Compute kernel of bertembed.

The functions here trust their arguments: the Python shim (``_api.py``,
``_checks.py``) has already checked dtypes, shapes, contiguity and every
id's range. Nothing in a loop touches a Python object, and every loop runs
without the GIL. The row arithmetic lives in C (``_rows.h``), compiled once
per instruction set; whole-table conversion in ``_quantize.h``.
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
    double be_wtime()
    void be_set_max_threads(int n)
    void be_set_schedule(int dynamic, int chunk)

cdef extern from "_threads.h" nogil:
    int64_t be_in_flight
    int64_t be_min_parallel
    int64_t be_learning
    int64_t be_last_auto
    int64_t BE_ADD(int64_t *p, int64_t v)
    int64_t BE_LOAD(int64_t *p)
    void BE_STORE(int64_t *p, int64_t v)
    int be_choose_threads(int64_t elements, int share, int *arm)
    void be_record_threads(int64_t elements, int arm, double seconds)
    void be_reset_threads()
    ctypedef struct be_size_class:
        int64_t cost[2]
        int64_t samples[2]
        int64_t calls
        int64_t best
    be_size_class be_classes[64]

cdef extern from "_rows.h" nogil:
    ctypedef struct be_term:
        const char *data
        Py_ssize_t row_bytes
        int kind
        const char *ids
        Py_ssize_t ids_bstride
        int arange
        Py_ssize_t offset

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

cdef extern from "_quantize.h" nogil:
    ctypedef struct be_conv:
        const char *src
        Py_ssize_t src_row_bytes
        int src_kind
        const float *src_scale
        char *dst
        Py_ssize_t dst_row_bytes
        int dst_kind
        float *dst_scale
        Py_ssize_t H
    int be_convert_row(const be_conv *c, Py_ssize_t r, double *scratch)


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


def set_max_threads(int n):
    """``omp_set_num_threads(n)`` for the calling thread (the benchmark harness caps
    the automatic choice with it). No effect without OpenMP."""
    be_set_max_threads(n)


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


cdef int64_t _padding_positions(const char *ids, char *out, Py_ssize_t B, Py_ssize_t S, bint id64,
                                int64_t pad) noexcept nogil:
    """RoBERTa's positions into `out` (the ids' dtype); returns the largest."""
    cdef Py_ssize_t b, s, i
    cdef int64_t count, top = pad, v
    for b in range(B):
        count = pad
        for s in range(S):
            i = b * S + s
            v = (<const int64_t *>ids)[i] if id64 else (<const int32_t *>ids)[i]
            if v != pad:
                count += 1
            if id64:
                (<int64_t *>out)[i] = count if v != pad else pad
            else:
                (<int32_t *>out)[i] = <int32_t>(count if v != pad else pad)
        if count > top:
            top = count
    return top


def padding_positions(const idx_t[:, ::1] ids, idx_t padding_idx, idx_t[:, ::1] out):
    """RoBERTa's position ids: ``padding_idx`` for pads, else
    ``padding_idx + 1 + (non-pad tokens before this one in its row)``.

    Returns the largest position written (``padding_idx`` if there is none).
    """
    cdef Py_ssize_t B = ids.shape[0], S = ids.shape[1]
    cdef int64_t top = padding_idx
    if B * S == 0:
        return top
    with nogil:
        top = _padding_positions(<const char *>&ids[0, 0], <char *>&out[0, 0], B, S,
                                 sizeof(idx_t) == 8, padding_idx)
    return top


# In a forked child whose OpenMP pool could not be released: one thread only.
cdef bint _serial_only = False
# Parallel calls of at most this many rows use a static schedule.
cdef Py_ssize_t _static_max_rows = 1024


def set_static_max_rows(Py_ssize_t rows):
    """Parallel calls of at most `rows` rows use a static schedule (for benchmarks).
    Returns the previous setting."""
    global _static_max_rows
    before = _static_max_rows
    _static_max_rows = rows
    return before


def set_serial_only(bint flag):
    """Make every call single-threaded (set in a forked child, see ``_fork``)."""
    global _serial_only
    _serial_only = flag


def in_flight():
    """How many kernel calls are computing right now (any thread)."""
    return BE_LOAD(&be_in_flight)


def last_auto_threads():
    """The thread count the automatic choice took last (any thread; 0 before any)."""
    return BE_LOAD(&be_last_auto)


def auto_threads_settings(min_parallel=None, learning=None):
    """Read or set the automatic choice: the smallest result (elements) that may use
    several threads, and whether the choice is learnt (else: all allowed threads
    from ``min_parallel`` on). Returns the settings in force before the call."""
    before = (BE_LOAD(&be_min_parallel), bool(BE_LOAD(&be_learning)))
    if min_parallel is not None:
        BE_STORE(&be_min_parallel, <int64_t>min_parallel)
    if learning is not None:
        BE_STORE(&be_learning, 1 if learning else 0)
    return before


def auto_threads_state():
    """The learnt estimates: ``{size class: (ns per 65536 elements with 1 thread,
    with all allowed, samples of each, calls, the favoured choice)}``."""
    cdef int i
    out = {}
    for i in range(64):
        if be_classes[i].calls or be_classes[i].samples[0] or be_classes[i].samples[1]:
            out[i] = (be_classes[i].cost[0], be_classes[i].cost[1], be_classes[i].samples[0],
                      be_classes[i].samples[1], be_classes[i].calls, be_classes[i].best)
    return out


def reset_auto_threads():
    """Forget what the automatic choice has learnt."""
    be_reset_threads()


cdef inline const char *_data(object arr):
    return <const char *>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline Py_ssize_t _row_bytes(object arr):
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return cnp.PyArray_DIMS(a)[cnp.PyArray_NDIM(a) - 1] * cnp.PyArray_ITEMSIZE(a)


cdef int _threads_for(Py_ssize_t n, int64_t elements, int num_threads, int64_t busy, bint learn,
                      int *arm) noexcept:
    """The layer's thread rules for n rows: one thread in a forked child that
    could not release its pool (or without OpenMP), else `num_threads` (> 0),
    else the share of the threads the `busy` calls in flight leave, used as
    the automatic choice learns (`learn`; *arm: the estimate the call's time
    updates) or, without learning, whole from be_min_parallel elements on.
    Never more threads than rows."""
    cdef int nt, share
    arm[0] = -1
    if _serial_only or not BE_OPENMP:
        nt = 1
    elif num_threads > 0:
        nt = num_threads
    else:
        share = be_max_threads() // (1 + <int>busy)
        if share < 1:
            share = 1
        if learn:
            nt = be_choose_threads(elements, share, arm)
            BE_STORE(&be_last_auto, nt)
        else:
            nt = share if elements >= BE_LOAD(&be_min_parallel) else 1
    if nt > n:
        nt = <int>n
    return nt


cdef int _run(be_job *job, Py_ssize_t n, int num_threads) except -1:
    """Compute the job's n rows: `num_threads` threads, or the automatic choice (<= 0)."""
    cdef int64_t busy = BE_ADD(&be_in_flight, 1)
    cdef int64_t elements = n * job.H
    cdef int arm = -1
    cdef int nt
    cdef Py_ssize_t chunk
    cdef double t0 = 0.0
    cdef Py_ssize_t r
    cdef double *scratch = NULL
    cdef double *mine = NULL
    try:
        nt = _threads_for(n, elements, num_threads, busy, True, &arm)
        if nt > 1:
            # Small calls: one block per thread (the cheapest start and end).
            # Large ones: four chunks per thread, so that a thread that starts
            # late finds its share taken over by the others.
            chunk = n // (4 * nt)
            be_set_schedule(n > _static_max_rows, chunk if chunk > 16 else 16)
        # Scratch rows per thread, allocated before the parallel region so that
        # no thread can fail inside it.
        scratch = <double *>malloc(nt * BE_SCRATCH_SLOTS * job.slot * sizeof(double))
        if scratch == NULL:
            raise MemoryError("bertembed: no memory for per-thread row buffers")
        with nogil:
            if arm >= 0:
                t0 = be_wtime()
            if nt == 1:
                for r in range(n):
                    be_row(job, r, scratch)
                if job.stream:
                    be_store_fence()
            else:
                with parallel(num_threads=nt):
                    mine = scratch + threadid() * BE_SCRATCH_SLOTS * job.slot
                    for r in prange(n, schedule="runtime"):
                        be_row(job, r, mine)
                    if job.stream:
                        be_store_fence()
            if arm >= 0:
                be_record_threads(elements, arm, be_wtime() - t0)
    finally:
        free(scratch)
        BE_ADD(&be_in_flight, -1)
    return 0


cdef void _set_term(be_term *term, object table, int kind, object tids, Py_ssize_t S, Py_ssize_t offset):
    term.data = _data(table)
    term.row_bytes = _row_bytes(table)
    term.kind = kind
    term.arange = offset >= 0
    term.offset = offset if offset > 0 else 0
    if tids is None:
        term.ids = NULL
        term.ids_bstride = 0
    else:
        term.ids = _data(tids)
        term.ids_bstride = 0 if cnp.PyArray_DIMS(<cnp.ndarray>tids)[0] == 1 else S


def embed(object token_ids, object tok, int tok_kind, object tok_scale, tuple terms,
          object w32, object b32, object w64, object b64, double eps,
          object keep, object out, int out_kind, bint wide, int num_threads, bint stream):
    """Fill ``out`` (C-contiguous, ``token_ids.shape + (H,)``) with the embeddings.

    ``token_ids``: (B, S) C-contiguous int32 or int64; every other id array
    has the same dtype. ``tok``: (V, H) table stored as ``tok_kind`` (0
    float32, 1 float64, 2 float16, 3 bfloat16 bits as uint16, 4 int8 with
    ``tok_scale`` (V, 2) float32: each row's scale and offset). ``terms``: up to three ``(table, kind, ids,
    offset)`` (position, segment, task): ``ids`` (1 or B, S), or None for
    row ``offset + s`` (``offset`` >= 0) or row 0 (``offset`` -1).
    ``w32``/``w64`` None: no LayerNorm; ``b32``/``b64`` None: no bias.
    ``keep``: None, or (B, S) uint8 (rows with 0 are zeros). ``wide``: compute
    in float64. ``num_threads`` <= 0: the automatic choice. The caller has
    checked every id and every shape.
    """
    cdef cnp.ndarray ids = <cnp.ndarray>token_ids
    cdef be_job job
    cdef Py_ssize_t S = cnp.PyArray_DIMS(ids)[1]
    cdef Py_ssize_t n = cnp.PyArray_DIMS(ids)[0] * S
    cdef Py_ssize_t H = cnp.PyArray_DIMS(<cnp.ndarray>tok)[1]
    cdef int k
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
        table, kind, tids, offset = terms[k]
        _set_term(&job.terms[k], table, kind, tids, S, offset)
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
    _run(&job, n, num_threads)


cdef bint _in_range(const char *ids, Py_ssize_t n, bint id64, Py_ssize_t rows) noexcept nogil:
    """Whether every id is in [0, rows) (negative ids are out of range)."""
    cdef Py_ssize_t i
    cdef unsigned long long limit = <unsigned long long>rows
    cdef bint bad = False
    cdef const int64_t *p64 = <const int64_t *>ids
    cdef const int32_t *p32 = <const int32_t *>ids
    if id64:
        for i in range(n):
            bad |= <unsigned long long>p64[i] >= limit
    else:
        for i in range(n):
            bad |= <unsigned long long>(<int64_t>p32[i]) >= limit
    return not bad


cdef inline bint _plain_ids(object value):
    """A native, aligned, C-contiguous int32/int64 ndarray (no conversion needed)."""
    cdef cnp.ndarray a
    cdef int t
    if not cnp.PyArray_CheckExact(value):
        return False
    a = <cnp.ndarray>value
    t = cnp.PyArray_TYPE(a)
    return ((t == cnp.NPY_INT32 or t == cnp.NPY_INT64) and cnp.PyArray_IS_C_CONTIGUOUS(a)
            and cnp.PyArray_ISALIGNED(a) and cnp.PyArray_ISNOTSWAPPED(a))


cdef class Plan:
    """A layer's tables bound to the kernel once, for the common call.

    :meth:`run` handles a call with int32/int64 C-contiguous ids (and segment
    ids of the same dtype and shape), no other optional argument, every id in
    range: it returns the result. For anything else it returns None, and the
    caller takes the path that checks and converts everything and raises the
    precise error.
    """

    cdef be_job job
    cdef object keep_alive
    cdef int rule
    cdef Py_ssize_t offset
    cdef int64_t padding_idx
    cdef Py_ssize_t tok_rows, pos_rows, seg_rows
    cdef bint empty_default  # a segment or task table of 0 rows: row 0 is not there
    cdef int pos_term, seg_term
    cdef int out_typenum
    cdef object out_dtype
    cdef Py_ssize_t out_itemsize
    cdef object big_empty
    cdef Py_ssize_t big_bytes

    def __init__(self, tok, pos, seg, task, ln, double eps, int rule, Py_ssize_t offset,
                 padding_idx, out_dtype, int out_kind, bint wide, big_empty, Py_ssize_t big_bytes):
        """`tok`, `pos`, `seg`, `task`: tables (``.data``, ``.kind``, ``.scale``)
        or None; `ln`: (w64, b64, w32, b32) or None; `rule`: 0 absolute (from
        `offset`), 1 padding (`padding_idx`), 2 none. Results of
        `big_bytes` or more come from ``big_empty(shape, dtype)``."""
        cdef int k = 0
        self.keep_alive = (tok, pos, seg, task, ln, out_dtype)
        self.job.S = 0
        self.job.H = tok.data.shape[1]
        self.job.slot = (self.job.H + 15) & ~(<Py_ssize_t>15)
        self.job.tok = _data(tok.data)
        self.job.tok_row_bytes = _row_bytes(tok.data)
        self.job.tok_kind = tok.kind
        self.job.tok_scale = <const float *>_data(tok.scale) if tok.scale is not None else NULL
        self.tok_rows = tok.data.shape[0]
        self.pos_term = self.seg_term = -1
        self.pos_rows = self.seg_rows = 0
        self.empty_default = False
        for table, which in ((pos, 0), (seg, 1), (task, 2)):
            if table is None:
                continue
            if which != 0 and table.data.shape[0] == 0:
                self.empty_default = True
            _set_term(&self.job.terms[k], table.data, table.kind, None, 0, offset if which == 0 else -1)
            if which == 0:
                self.pos_term, self.pos_rows = k, table.data.shape[0]
            elif which == 1:
                self.seg_term, self.seg_rows = k, table.data.shape[0]
            k += 1
        self.job.nterms = k
        self.job.ln = ln is not None
        self.job.w64 = <const double *>_data(ln[0]) if ln is not None else NULL
        self.job.b64 = <const double *>_data(ln[1]) if ln is not None and ln[1] is not None else NULL
        self.job.w32 = <const float *>_data(ln[2]) if ln is not None else NULL
        self.job.b32 = <const float *>_data(ln[3]) if ln is not None and ln[3] is not None else NULL
        self.job.eps = eps
        self.job.keep = NULL
        self.job.out_kind = out_kind
        self.job.wide = wide
        self.rule = rule
        self.offset = offset
        self.padding_idx = padding_idx if padding_idx is not None else -1
        self.out_dtype = out_dtype
        self.out_typenum = out_dtype.num if out_dtype.num < 256 else -1  # 256: NPY_USERDEF
        self.out_itemsize = out_dtype.itemsize
        self.job.out_row_bytes = self.job.H * self.out_itemsize
        self.big_empty = big_empty
        self.big_bytes = big_bytes

    def run(self, token_ids, segment_ids, int num_threads, Py_ssize_t stream_min_bytes):
        """The embeddings of `token_ids`, or None if the call needs the full checks."""
        cdef cnp.ndarray ids, sids = None, positions = None, result
        cdef int nd, t
        cdef Py_ssize_t B, S, n, nbytes
        cdef cnp.npy_intp dims[3]
        cdef bint id64
        cdef int64_t top
        cdef be_job job
        cdef const char *src
        cdef char *dst
        cdef int k
        if not _plain_ids(token_ids):
            return None
        ids = <cnp.ndarray>token_ids
        nd = cnp.PyArray_NDIM(ids)
        t = cnp.PyArray_TYPE(ids)
        if nd == 2:
            B, S = cnp.PyArray_DIMS(ids)[0], cnp.PyArray_DIMS(ids)[1]
        elif nd == 1:
            B, S = 1, cnp.PyArray_DIMS(ids)[0]
        else:
            return None
        n = B * S
        id64 = t == cnp.NPY_INT64
        if n == 0 or self.empty_default:
            return None
        if segment_ids is not None:
            if self.seg_term < 0 or not _plain_ids(segment_ids):
                return None
            sids = <cnp.ndarray>segment_ids
            if (cnp.PyArray_TYPE(sids) != t or cnp.PyArray_NDIM(sids) != nd
                    or cnp.PyArray_DIMS(sids)[0] != cnp.PyArray_DIMS(ids)[0]
                    or cnp.PyArray_DIMS(sids)[nd - 1] != S):
                return None
        if not _in_range(_data(ids), n, id64, self.tok_rows):
            return None
        if sids is not None and not _in_range(_data(sids), n, id64, self.seg_rows):
            return None
        job = self.job
        if self.rule == 0 and self.pos_term >= 0:
            if S + self.offset > self.pos_rows:
                return None
        elif self.rule == 1:
            if not id64 and self.padding_idx + S > 2147483647:
                return None
            dims[0], dims[1] = B, S
            positions = cnp.PyArray_EMPTY(2, dims, t, 0)
            src = _data(ids)
            dst = <char *>cnp.PyArray_DATA(positions)
            with nogil:
                top = _padding_positions(src, dst, B, S, id64, self.padding_idx)
            if top >= self.pos_rows:
                return None
            job.terms[self.pos_term].ids = _data(positions)
            job.terms[self.pos_term].ids_bstride = S
            job.terms[self.pos_term].arange = 0
        if sids is not None:
            job.terms[self.seg_term].ids = _data(sids)
            job.terms[self.seg_term].ids_bstride = S
        for k in range(nd):
            dims[k] = cnp.PyArray_DIMS(ids)[k]
        dims[nd] = job.H
        nbytes = n * job.out_row_bytes
        if nbytes >= self.big_bytes or self.out_typenum < 0:
            result = self.big_empty(tuple([dims[k] for k in range(nd + 1)]), self.out_dtype)
        else:
            result = cnp.PyArray_EMPTY(nd + 1, dims, self.out_typenum, 0)
        job.S = S
        job.id64 = id64
        job.tok_ids = _data(ids)
        job.out = <char *>cnp.PyArray_DATA(result)
        job.stream = job.ln and nbytes >= stream_min_bytes
        _run(&job, n, num_threads)
        return result


def choose_threads(int64_t elements, int share):
    """The automatic choice for a call of `elements` allowed `share` threads:
    ``(threads, estimate it updates (-1: none))``. For tests of the policy."""
    cdef int arm = -1
    cdef int nt = be_choose_threads(elements, share, &arm)
    return nt, arm


def record_threads(int64_t elements, int arm, double seconds):
    """Fold a call's duration into the estimates (see :func:`choose_threads`)."""
    be_record_threads(elements, arm, seconds)


def convert_rows(object src, int src_kind, object src_scale, object dst, int dst_kind, object dst_scale,
                 Py_ssize_t start, Py_ssize_t stop, int num_threads):
    """Convert rows ``[start, stop)`` of the table `src` into `dst`.

    `src`: (V, H) C-contiguous table stored as `src_kind` (0 float32, 1
    float64, 2 float16, 3 bfloat16 bits, 4 int8 with `src_scale`, (V, 2)
    float32); `dst`: (V, H) C-contiguous, written as `dst_kind` (int8: with
    `dst_scale`, (V, 2) float32, the scale and offset of each row). Rows are
    converted in parallel (`num_threads`, or <= 0 for all the threads a call
    may use now), without the GIL. Returns ``(row, outcome)`` of the first row
    that could not be quantised (outcome 1: NaN or inf, 2: a range too wide
    for a float32 scale), or ``(-1, 0)``.
    """
    cdef be_conv c
    cdef Py_ssize_t n = stop - start, r, H = cnp.PyArray_DIMS(<cnp.ndarray>src)[1]
    cdef int64_t busy, failed = 0
    cdef int nt, arm, rc = 0
    cdef Py_ssize_t chunk
    cdef double *scratch = NULL
    cdef double *mine = NULL
    if n <= 0:
        return (-1, 0)
    c.src = _data(src)
    c.src_row_bytes = _row_bytes(src)
    c.src_kind = src_kind
    c.src_scale = <const float *>_data(src_scale) if src_scale is not None else NULL
    c.dst = <char *>cnp.PyArray_DATA(<cnp.ndarray>dst)
    c.dst_row_bytes = _row_bytes(dst)
    c.dst_kind = dst_kind
    c.dst_scale = <float *>cnp.PyArray_DATA(<cnp.ndarray>dst_scale) if dst_scale is not None else NULL
    c.H = H
    busy = BE_ADD(&be_in_flight, 1)
    try:
        # The layer's thread rules, without learning (one thread for a small table).
        nt = _threads_for(n, n * H, num_threads, busy, False, &arm)
        scratch = <double *>malloc(nt * (H + 8) * sizeof(double))
        if scratch == NULL:
            raise MemoryError("bertembed: no memory for per-thread row buffers")
        with nogil:
            if nt == 1:
                for r in range(start, stop):
                    if be_convert_row(&c, r, scratch) != 0:
                        failed = 1
                        break
            else:
                chunk = n // (8 * nt)
                be_set_schedule(1, chunk if chunk > 16 else 16)
                with parallel(num_threads=nt):
                    mine = scratch + threadid() * (H + 8)
                    for r in prange(start, stop, schedule="runtime"):
                        if be_convert_row(&c, r, mine) != 0:
                            BE_STORE(&failed, 1)
            if failed:
                # Which row: the first, found again in order (only on failure).
                for r in range(start, stop):
                    rc = be_convert_row(&c, r, scratch)
                    if rc != 0:
                        break
    finally:
        free(scratch)
        BE_ADD(&be_in_flight, -1)
    if rc != 0:
        return (r, rc)
    return (-1, 0)
