# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True
"""Compute kernel of bertembed.

The functions here trust their arguments: the Python shim (``embed.py``,
``validate.py``) has already checked dtypes, shapes, contiguity and every
id's range. Nothing in a loop touches a Python object, and every loop runs
without the GIL. The row arithmetic lives in C (``be_rows.h``), compiled once
per instruction set; whole-table conversion in ``be_convert.h``; the numbers
shared with the shim (storage kinds, position rules) in ``be_kinds.h``, and
exported here as ``KIND_*`` and ``RULE_*``.

Entry points: :class:`Plan` (tables, a position rule and a result dtype
bound once; :meth:`Plan.run` is the layer's common call, :meth:`Plan.embed`
a call the shim has checked), :func:`convert_rows`, :func:`first_out_of_range`,
:func:`padding_positions`, and the runtime's switches. The functions at the
end of this file exist for tests and diagnostics only.
"""

from . import knobs

cimport numpy as cnp
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc

cnp.import_array()

cdef extern from "be_kinds.h" nogil:
    enum:
        BE_F32
        BE_F64
        BE_F16
        BE_BF16
        BE_I8
        BE_RULE_ABSOLUTE
        BE_RULE_PADDING
        BE_RULE_NONE

cdef extern from "be_runtime.h" nogil:
    int BE_OPENMP
    int BE_OPENMP_VERSION
    const char *BE_COMPILER
    int be_max_threads()
    int be_release_threads()
    void be_set_max_threads(int n)
    void be_set_schedule(int dynamic, int chunk)

cdef extern from "be_threads.h" nogil:
    enum:
        BE_ELEMENTS_PER_THREAD
    int64_t *be_in_flight
    int64_t be_last_auto
    int64_t be_elements_per_thread
    int64_t BE_ADD(int64_t *p, int64_t v)
    int64_t BE_LOAD(int64_t *p)
    void BE_STORE(int64_t *p, int64_t v)
    void be_threads_init()
    int be_auto_threads(int64_t elements, int share)

cdef extern from "be_rows.h" nogil:
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
        const int32_t *tok_map
        int *unmapped
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
    const char *be_isas
    void be_row(const be_job *j, Py_ssize_t r, double *scratch)
    void be_store_fence()

cdef extern from "be_convert.h" nogil:
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


#: Storage kinds of tables and results (``be_kinds.h``); ``dtypes.py`` names them.
KIND_F32 = BE_F32
KIND_F64 = BE_F64
KIND_F16 = BE_F16
KIND_BF16 = BE_BF16
KIND_I8 = BE_I8
#: Position rules (``be_kinds.h``); ``positions.py`` names them.
RULE_ABSOLUTE = BE_RULE_ABSOLUTE
RULE_PADDING = BE_RULE_PADDING
RULE_NONE = BE_RULE_NONE
#: Result values per thread of the automatic thread choice (``be_threads.h``).
ELEMENTS_PER_THREAD = BE_ELEMENTS_PER_THREAD


cdef void _init_rows():
    """Pick the row kernel for this CPU; BERTEMBED_ISA (read by knobs.py) caps it."""
    cdef bytes cap = knobs.ISA.read().encode()
    be_rows_init(<const char *>cap if cap else NULL)


_init_rows()
be_threads_init()

ctypedef fused idx_t:
    int32_t
    int64_t


def openmp_enabled():
    """Whether the extension was compiled with OpenMP."""
    return BE_OPENMP != 0


def build_info():
    """Compiler, OpenMP version (``_OPENMP``, 0 without), the row-kernel ISA
    chosen and the ones built (narrowest first)."""
    return {"compiler": BE_COMPILER.decode("utf-8", "replace"),
            "openmp_version": BE_OPENMP_VERSION,
            "isa": be_isa.decode(),
            "isas": tuple(be_isas.decode().split())}


def max_threads():
    """``omp_get_max_threads()`` for the calling thread clipped to the ceiling of
    :func:`set_thread_limits` (1 without OpenMP)."""
    return _cap()


def max_threads_unclipped():
    """``omp_get_max_threads()`` for the calling thread, without the ceiling."""
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


def last_auto_threads():
    """The thread count the automatic choice took last (any thread; 0 before any)."""
    return BE_LOAD(&be_last_auto)


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


def first_unmapped(const idx_t[::1] ids, const int32_t[::1] tok_map):
    """Flat index of the first id whose entry in a trimmed table's map is -1
    (trimmed away), or -1. Every id is already checked to be in the map's range."""
    cdef Py_ssize_t i, n = ids.shape[0]
    cdef Py_ssize_t found = -1
    if n == 0 or tok_map.shape[0] == 0:
        return found
    with nogil:
        if not _all_mapped(<const char *>&ids[0], n, sizeof(idx_t) == 8, &tok_map[0]):
            for i in range(n):
                if tok_map[ids[i]] < 0:
                    found = i
                    break
    return found


cdef bint _all_mapped(const char *ids, Py_ssize_t n, bint id64, const int32_t *tok_map) noexcept nogil:
    """Whether every id (each already in the map's range) has a row in a trimmed table's map."""
    cdef Py_ssize_t i
    cdef bint bad = False
    cdef const int64_t *p64 = <const int64_t *>ids
    cdef const int32_t *p32 = <const int32_t *>ids
    if id64:
        for i in range(n):
            bad |= tok_map[p64[i]] < 0
    else:
        for i in range(n):
            bad |= tok_map[p32[i]] < 0
    return not bad


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
cdef enum:
    _STATIC_MAX_ROWS = 1024


# The thread ceiling (0: none beyond OpenMP's own maximum) and the process-wide
# thread count (0: automatic), both set by ``runtime.py`` (at import, in a
# forked child and from ``bertembed.set_num_threads``). Plain ints: a call
# reads them, it calls nothing.
cdef int _ceiling = 0
cdef int _process_threads = 0


def set_thread_limits(int ceiling, int process_threads):
    """The ceiling every call's threads are clipped to (<= 0: none) and the
    process-wide count used when a call gives none (<= 0: automatic)."""
    global _ceiling, _process_threads
    _ceiling = ceiling if ceiling > 0 else 0
    _process_threads = process_threads if process_threads > 0 else 0


def thread_limits():
    """``(ceiling, process_threads)`` as set by :func:`set_thread_limits`."""
    return (_ceiling, _process_threads)


cdef inline int _cap() noexcept nogil:
    """The most threads a call from this thread may use: OpenMP's maximum for it,
    clipped to the ceiling."""
    cdef int cap = be_max_threads()
    if _ceiling > 0 and cap > _ceiling:
        cap = _ceiling
    return cap if cap > 0 else 1


def set_serial_only(bint flag):
    """Make every call single-threaded (set in a forked child, see ``runtime.py``)."""
    global _serial_only
    _serial_only = flag


cdef inline const char *_data(object arr):
    return <const char *>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline const char *_data_or_null(object arr):
    # (an if, not a conditional expression: Cython would join NULL and the
    # pointer as void *, dropping const)
    if arr is None:
        return NULL
    return <const char *>cnp.PyArray_DATA(<cnp.ndarray>arr)


cdef inline Py_ssize_t _row_bytes(object arr):
    cdef cnp.ndarray a = <cnp.ndarray>arr
    return cnp.PyArray_DIMS(a)[cnp.PyArray_NDIM(a) - 1] * cnp.PyArray_ITEMSIZE(a)


cdef int _threads_for(Py_ssize_t n, int64_t elements, int num_threads, int64_t busy) noexcept nogil:
    """The layer's thread rules for n rows: one thread in a forked child that
    could not release its pool (or without OpenMP), else `num_threads` (> 0)
    or the process-wide count, clipped to the cap (OpenMP's maximum for the
    calling thread and the ceiling), else the automatic choice
    (``be_threads.h``) within the share of the cap the `busy` calls in flight
    (in this process and the processes forked from it) leave. Never more
    threads than rows."""
    cdef int nt, share, cap
    if _serial_only or not BE_OPENMP:
        nt = 1
    elif num_threads > 0 or _process_threads > 0:
        nt = num_threads if num_threads > 0 else _process_threads
        cap = _cap()
        if nt > cap:
            nt = cap
    else:
        share = _cap() // (1 + <int>busy)
        nt = be_auto_threads(elements, share if share > 1 else 1)
        BE_STORE(&be_last_auto, nt)
    if nt > n:
        nt = <int>n
    return nt


cdef int _run(be_job *job, Py_ssize_t n, int num_threads) except -1:
    """Compute the job's n rows: `num_threads` threads, or the automatic choice (<= 0)."""
    cdef int64_t busy = BE_ADD(be_in_flight, 1)
    cdef int nt
    cdef Py_ssize_t chunk
    cdef Py_ssize_t r
    cdef double *scratch = NULL
    cdef double *mine = NULL
    try:
        nt = _threads_for(n, n * job.H, num_threads, busy)
        if nt > 1:
            # Small calls: one block per thread (the cheapest start and end).
            # Large ones: four chunks per thread, so that a thread that starts
            # late finds its share taken over by the others.
            chunk = n // (4 * nt)
            be_set_schedule(n > _STATIC_MAX_ROWS, <int>(chunk if chunk > 16 else 16))
        # Scratch rows per thread, allocated before the parallel region so that
        # no thread can fail inside it.
        scratch = <double *>malloc(nt * BE_SCRATCH_SLOTS * job.slot * sizeof(double))
        if scratch == NULL:
            raise MemoryError("bertembed: no memory for per-thread row buffers")
        with nogil:
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
    finally:
        free(scratch)
        BE_ADD(be_in_flight, -1)
    return 0


cdef void _bind_term(be_term *term, object table, bint arange, Py_ssize_t offset):
    """A term's table; rows come from ids given per call, else row `offset` + s
    (`arange`) or row 0."""
    term.data = _data(table.data)
    term.row_bytes = _row_bytes(table.data)
    term.kind = table.kind
    term.ids = NULL
    term.ids_bstride = 0
    term.arange = arange
    term.offset = offset if arange else 0


cdef inline void _term_ids(be_job *job, int k, const char *ids, Py_ssize_t bstride) noexcept nogil:
    """Term k reads the rows `ids` (`bstride` ids between two sequences: 0 or S)."""
    if k >= 0 and ids != NULL:
        job.terms[k].ids = ids
        job.terms[k].ids_bstride = bstride
        job.terms[k].arange = 0


cdef class Plan:
    """Tables, a position rule and a result dtype bound to the kernel once.

    The layer builds one when it is made; ``bert_embeddings`` one per call.
    Both ways of computing go through the one job builder (:meth:`_job`):

    - :meth:`run`, the layer's common call: int32/int64 C-contiguous ids (and
      segment ids of the same dtype and shape), no other optional argument,
      every id in range. It returns the result, or None for anything else:
      the caller then takes the checked path, which converts everything and
      raises the precise error.
    - :meth:`embed`, a call the shim (``embed.py``) has checked and converted.

    Parameters
    ----------
    tables : bertembed._core.tables.Tables
        Validated tables (each ``.data``, ``.kind``, ``.scale``) and LayerNorm
        parameters (``.ln.weight64`` ... or None) and ``.eps``; for a trimmed
        token table, ``.token_map.map``: the (V,) int32 row of each original
        id (checked: every entry -1 or a row), read in the same pass as the
        rows; ids are then checked against V, and against the map's -1
        entries unless ``.token_map.unknown`` is set.
    rule : bertembed._core.positions.PositionRule
        How positions are numbered without position ids (``.code``, ``.offset``,
        ``.padding_idx``).
    output : bertembed._core.embed.Output
        The result dtype and kind, whether rows are computed in float64, and
        how results are allocated (``.empty`` from ``.pool_min_bytes`` bytes
        on) and written (non-temporal stores from ``.stream_min_bytes`` on,
        with LayerNorm).
    """

    cdef be_job job  # what every call's job shares; the per-call fields are unset
    cdef readonly object tables
    cdef readonly object rule
    cdef readonly object output
    cdef int rule_code
    cdef Py_ssize_t offset
    cdef int64_t padding_idx
    cdef Py_ssize_t tok_rows, pos_rows, seg_rows
    cdef bint map_drops  # a trimmed table whose map holds -1 (trimmed-away ids are an error)
    cdef bint empty_default  # a segment or task table of 0 rows: row 0 is not there
    cdef int pos_term, seg_term, task_term
    cdef int out_typenum
    cdef object out_dtype
    cdef object big_empty
    cdef Py_ssize_t big_bytes, stream_bytes

    def __init__(self, tables, rule, output):
        cdef int k = 0
        cdef object tok = tables.tok, ln = tables.ln
        self.tables, self.rule, self.output = tables, rule, output
        self.rule_code = rule.code
        self.offset = rule.offset
        self.padding_idx = rule.padding_idx if rule.padding_idx is not None else -1
        self.job.S = 0
        self.job.H = tok.data.shape[1]
        self.job.slot = (self.job.H + 15) & ~(<Py_ssize_t>15)
        self.job.tok_ids = NULL
        self.job.tok = _data(tok.data)
        self.job.tok_row_bytes = _row_bytes(tok.data)
        self.job.tok_kind = tok.kind
        self.job.tok_scale = <const float *>_data_or_null(tok.scale)
        self.tok_rows = tok.data.shape[0]
        self.job.tok_map = NULL
        self.job.unmapped = NULL
        self.map_drops = False
        if tables.token_map is not None:
            self.job.tok_map = <const int32_t *>_data(tables.token_map.map)
            self.tok_rows = tables.token_map.map.shape[0]
            self.map_drops = tables.token_map.unknown is None
        self.pos_term = self.seg_term = self.task_term = -1
        self.pos_rows = self.seg_rows = 0
        self.empty_default = False
        if tables.pos is not None:
            _bind_term(&self.job.terms[k], tables.pos, self.rule_code == BE_RULE_ABSOLUTE, self.offset)
            self.pos_term, self.pos_rows = k, tables.pos.data.shape[0]
            k += 1
        if tables.seg is not None:
            _bind_term(&self.job.terms[k], tables.seg, False, 0)
            self.seg_term, self.seg_rows = k, tables.seg.data.shape[0]
            self.empty_default |= self.seg_rows == 0
            k += 1
        if tables.task is not None:
            _bind_term(&self.job.terms[k], tables.task, False, 0)
            self.task_term = k
            self.empty_default |= tables.task.data.shape[0] == 0
            k += 1
        self.job.nterms = k
        self.job.ln = ln is not None
        self.job.w64 = <const double *>_data_or_null(ln.weight64 if ln is not None else None)
        self.job.b64 = <const double *>_data_or_null(ln.bias64 if ln is not None else None)
        self.job.w32 = <const float *>_data_or_null(ln.weight32 if ln is not None else None)
        self.job.b32 = <const float *>_data_or_null(ln.bias32 if ln is not None else None)
        self.job.eps = tables.eps
        self.job.keep = NULL
        self.job.out = NULL
        self.out_dtype = output.dtype
        self.out_typenum = self.out_dtype.num if self.out_dtype.num < 256 else -1  # 256: NPY_USERDEF
        self.job.out_row_bytes = self.job.H * self.out_dtype.itemsize
        self.job.out_kind = output.kind
        self.job.wide = output.wide
        self.job.stream = 0
        self.big_empty = output.empty
        self.big_bytes = output.pool_min_bytes
        self.stream_bytes = output.stream_min_bytes

    cdef inline void _job(self, be_job *job, Py_ssize_t n, Py_ssize_t S, bint id64, const char *tok_ids,
                          const char *pos_ids, bint pos_shared, const char *seg_ids, const char *task_ids,
                          const unsigned char *keep, char *out) noexcept nogil:
        """The job of one call of n rows (sequences of S): the plan's, and the
        call's ids, mask and result. A term without ids reads what the plan
        bound (row offset + s for absolute positions, else row 0);
        `pos_shared`: one row of position ids for every sequence."""
        job[0] = self.job
        job.S = S
        job.id64 = id64
        job.tok_ids = tok_ids
        _term_ids(job, self.pos_term, pos_ids, 0 if pos_shared else S)
        _term_ids(job, self.seg_term, seg_ids, S)
        _term_ids(job, self.task_term, task_ids, S)
        job.keep = keep
        job.out = out
        job.stream = job.ln and n * job.out_row_bytes >= self.stream_bytes

    def embed(self, call, int num_threads):
        """Fill ``call.out`` with the embeddings of a checked call.

        `call` (``embed.Call``): ``token_ids`` (B, S), C-contiguous int32 or
        int64; ``position_ids`` (1 or B, S), ``segment_ids`` and
        ``task_type_ids`` (B, S), each None (the plan's rule, row 0) or of the
        token ids' dtype; ``keep`` None or (B, S) uint8 (rows with 0 are
        zeros); ``out`` C-contiguous ``(B, S, H)`` of the plan's dtype.
        `num_threads` <= 0: the automatic choice. The shim has checked every
        id and every shape.
        """
        cdef cnp.ndarray ids = <cnp.ndarray>call.token_ids
        cdef object pos = call.position_ids
        cdef be_job job
        cdef Py_ssize_t S = cnp.PyArray_DIMS(ids)[1]
        cdef Py_ssize_t n = cnp.PyArray_DIMS(ids)[0] * S
        if n == 0:
            return
        self._job(&job, n, S, cnp.PyArray_ITEMSIZE(ids) == 8, _data(ids),
                  _data_or_null(pos), pos is not None and cnp.PyArray_DIMS(<cnp.ndarray>pos)[0] == 1,
                  _data_or_null(call.segment_ids), _data_or_null(call.task_type_ids),
                  <const unsigned char *>_data_or_null(call.keep), <char *>_data(call.out))
        _run(&job, n, num_threads)

    def run(self, token_ids, segment_ids, int num_threads):
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
        cdef int unmapped = 0
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
        if self.rule_code == BE_RULE_ABSOLUTE and self.pos_term >= 0:
            if S + self.offset > self.pos_rows:
                return None
        elif self.rule_code == BE_RULE_PADDING:
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
        for k in range(nd):
            dims[k] = cnp.PyArray_DIMS(ids)[k]
        dims[nd] = self.job.H
        nbytes = n * self.job.out_row_bytes
        if nbytes >= self.big_bytes or self.out_typenum < 0:
            result = self.big_empty(tuple([dims[k] for k in range(nd + 1)]), self.out_dtype)
        else:
            result = cnp.PyArray_EMPTY(nd + 1, dims, self.out_typenum, 0)
        self._job(&job, n, S, id64, _data(ids), _data_or_null(positions), False, _data_or_null(sids), NULL,
                  NULL, <char *>cnp.PyArray_DATA(result))
        if self.map_drops:  # (found in the pass itself: a check of its own costs a second walk of the map)
            job.unmapped = &unmapped
        _run(&job, n, num_threads)
        if unmapped:
            return None  # (the full checks name the id)
        return result


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


def convert_rows(object src, object dst, Py_ssize_t start, Py_ssize_t stop, int num_threads):
    """Convert rows ``[start, stop)`` of the table `src` into the table `dst`.

    `src`, `dst`: tables (``tables.Table``: ``.data`` (V, H) C-contiguous,
    stored as ``.kind``; ``.scale`` (V, 2) float32, each row's scale and
    offset, for int8, else None). `dst`'s data (and scale) are written.
    Rows are converted in parallel (`num_threads`, or <= 0 for all the
    threads a call may use now), without the GIL. Returns ``(row, outcome)``
    of the first row that could not be quantised (outcome 1: NaN or inf, 2: a
    range too wide for a float32 scale), or ``(-1, 0)``.
    """
    cdef be_conv c
    cdef Py_ssize_t n = stop - start, r, H = cnp.PyArray_DIMS(<cnp.ndarray>src.data)[1]
    cdef int64_t busy, failed = 0
    cdef int nt, rc = 0
    cdef Py_ssize_t chunk
    cdef double *scratch = NULL
    cdef double *mine = NULL
    if n <= 0:
        return (-1, 0)
    c.src = _data(src.data)
    c.src_row_bytes = _row_bytes(src.data)
    c.src_kind = src.kind
    c.src_scale = <const float *>_data_or_null(src.scale)
    c.dst = <char *>_data(dst.data)
    c.dst_row_bytes = _row_bytes(dst.data)
    c.dst_kind = dst.kind
    c.dst_scale = <float *>_data_or_null(dst.scale)
    c.H = H
    busy = BE_ADD(be_in_flight, 1)
    try:
        # The layer's thread rules (one thread for a small table).
        nt = _threads_for(n, n * H, num_threads, busy)
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
                be_set_schedule(1, <int>(chunk if chunk > 16 else 16))
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
        BE_ADD(be_in_flight, -1)
    if rc != 0:
        return (r, rc)
    return (-1, 0)


# ---------------------------------------------------------------------------------------
# For tests and diagnostics only: nothing in the package calls these. They read
# or set the automatic thread choice (tests/core/runtime/test_auto_threads.py).


def in_flight():
    """How many kernel calls are computing right now, in this process and every
    process forked from it after import. For tests."""
    return BE_LOAD(be_in_flight)


def auto_threads(int64_t elements, int64_t busy=0):
    """The threads the automatic choice gives a call of `elements` result values
    from this thread, with `busy` other calls in flight. For tests."""
    cdef int64_t rows = elements if elements > 0 else 1
    return _threads_for(<Py_ssize_t>rows, elements, 0, busy)


def auto_threads_settings(elements_per_thread=None):
    """Read or set the result values per thread of the automatic choice; returns
    the value in force before the call. For tests."""
    before = BE_LOAD(&be_elements_per_thread)
    if elements_per_thread is not None:
        BE_STORE(&be_elements_per_thread, <int64_t>max(1, elements_per_thread))
    return before
