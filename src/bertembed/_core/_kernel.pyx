# cython: language_level=3, boundscheck=False, wraparound=False
# cython: initializedcheck=False, cdivision=True, nonecheck=False
# cython: freethreading_compatible=True, autotestdict=False
"""Compute kernel of bertembed.

The shim (``embed.py``) normalises a call's inputs into one :class:`Call`
(dtypes, shapes, contiguity, defaults, the ``out`` buffer); the kernel checks
its ids once, before it writes anything, and computes. A failed check is
reported as a code (``BAD_*``), the first bad flat index and a value, which
the shim words (``bad_ids.py``). Nothing in a loop touches a Python object,
and every loop runs without the GIL. The C names are declared once, in
``_kernel.pxd``: the row arithmetic (``be_rows.h``, compiled once per
instruction set), the id checks (``be_check.h``), whole-table conversion
(``be_convert.h``), and the numbers shared with the shim (``be_kinds.h``),
which Python reads here as ``KIND_*``, ``RULE_*`` and ``BAD_*``.

Entry points: :class:`Plan` (tables, a position rule and a result dtype
bound once; :meth:`Plan.embed` computes a :class:`Call`, :meth:`Plan.given`
makes one of inputs already in the kernel's form), :func:`convert_rows`,
:func:`padding_positions`, and the runtime's switches. The functions at the
end of this file exist for tests and diagnostics only.
"""

import numpy as np

from . import knobs

cimport cython
cimport numpy as cnp
from cython.parallel cimport parallel, prange, threadid
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport free, malloc

cnp.import_array()


cdef void _init_rows():
    """Pick the row kernel for this CPU; BERTEMBED_ISA (read by knobs.py) caps it."""
    cap = knobs.ISA.read()
    be_rows_init(knobs.ISA_NAMES.index(cap) if cap else -1)


_init_rows()
be_threads_init()


def openmp_enabled():
    """Whether the extension was compiled with OpenMP."""
    return BE_OPENMP != 0


def int8_products_saturate():
    """Whether ONNX Runtime's uint8 x int8 matrix products saturate on this CPU:
    x86-64 without AVX512-VNNI, AVX-VNNI or AMX-INT8 (``be_cpu.h``)."""
    return be_int8_saturates() != 0


def build_info():
    """Compiler, OpenMP version (``_OPENMP``, 0 without), the row-kernel ISA
    chosen and the ones built (narrowest first)."""
    return {"compiler": BE_COMPILER.decode("utf-8", "replace"),
            "openmp_version": BE_OPENMP_VERSION,
            "isa": knobs.ISA_NAMES[be_isa],
            "isas": tuple(name for i, name in enumerate(knobs.ISA_NAMES) if be_isas >> i & 1)}


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


cdef inline bint _c_ids(cnp.ndarray a, int nd):
    """An `nd`-dimensional C-contiguous int32 or int64 array."""
    cdef int t = cnp.PyArray_TYPE(a)
    return cnp.PyArray_NDIM(a) == nd and cnp.PyArray_IS_C_CONTIGUOUS(a) and (t == cnp.NPY_INT32 or t == cnp.NPY_INT64)


def first_out_of_range(cnp.ndarray ids not None, Py_ssize_t rows):
    """Flat index of the first of `ids` (1-D C-contiguous int32 or int64)
    outside ``[0, rows)``, or -1: the kernel's own range check, for tests."""
    cdef int t = cnp.PyArray_TYPE(ids)
    if not _c_ids(ids, 1):
        raise TypeError("ids must be 1-D C-contiguous int32 or int64")
    cdef Py_ssize_t n = cnp.PyArray_DIMS(ids)[0]
    cdef const void *p = cnp.PyArray_DATA(ids)
    cdef bint id64 = t == cnp.NPY_INT64
    with nogil:
        n = be_first_out_of_range(p, id64, n, rows)
    return n


def padding_positions(cnp.ndarray ids not None, int64_t padding_idx, cnp.ndarray out not None):
    """RoBERTa's position ids of `ids` ((B, S) C-contiguous int32 or int64) into
    `out` (the same shape and dtype): ``padding_idx`` for pads, else
    ``padding_idx + 1 + (non-pad tokens before this one in its row)``.

    Returns the largest position written (``padding_idx`` if there is none).
    """
    cdef int t = cnp.PyArray_TYPE(ids)
    if (not _c_ids(ids, 2) or not _c_ids(out, 2) or cnp.PyArray_TYPE(out) != t
            or cnp.PyArray_DIMS(out)[0] != cnp.PyArray_DIMS(ids)[0]
            or cnp.PyArray_DIMS(out)[1] != cnp.PyArray_DIMS(ids)[1]):
        raise TypeError("ids and out must be (B, S) C-contiguous int32 or int64 arrays of one shape and dtype")
    cdef Py_ssize_t B = cnp.PyArray_DIMS(ids)[0], S = cnp.PyArray_DIMS(ids)[1]
    cdef const void *src = cnp.PyArray_DATA(ids)
    cdef void *dst = cnp.PyArray_DATA(out)
    cdef int64_t top = padding_idx
    if B * S:
        with nogil:
            top = be_padding_positions(src, dst, B, S, t == cnp.NPY_INT64, padding_idx)
    return top


# In a forked child whose OpenMP pool could not be released: one thread only.
cdef bint _serial_only = False
cdef enum:
    # A parallel call's rows are handed out in this many chunks per thread.
    _CHUNKS_PER_THREAD = 8
    # Calls of at least this many ids release the GIL while the kernel checks them.
    _CHECK_NOGIL_MIN = 1 << 16


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
    cdef int64_t chunk
    cdef int64_t next_row = 0
    cdef int64_t done_rows = 0
    cdef Py_ssize_t r
    cdef double *scratch = NULL
    cdef double *mine = NULL
    try:
        nt = _threads_for(n, n * job.H, num_threads, busy)
        # Rows handed out in chunks (be_share.h): a few per thread, so that
        # threads write far apart (a large fresh result is faulted in huge
        # pages, which two threads writing next to each other would contend for).
        chunk = n // (_CHUNKS_PER_THREAD * nt)
        if chunk < 1:
            chunk = 1
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
                    be_share_rows(job, n, mine, &next_row, &done_rows, chunk, threadid() == 0)
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


@cython.auto_pickle(False)  # (a call is made and computed in one process)
cdef class Call:
    """One call's inputs in the kernel's form, and what its check found.

    The shim makes it (``embed.py``; :meth:`Plan.given` for inputs already in
    this form); :meth:`Plan.embed` checks its ids and computes it.

    Parameters
    ----------
    token_ids : numpy.ndarray
        (B, S) (or (S,) with `flat`), C-contiguous, native, int32 or int64.
    position_ids, segment_ids, task_type_ids : numpy.ndarray or None
        Of the token ids' dtype, C-contiguous: position ids (1 or B, S),
        the others (B, S). None: the plan's rule, row 0.
    keep : numpy.ndarray or None
        (B, S) uint8: rows with 0 are zeros.
    out : numpy.ndarray or None
        The result buffer, C-contiguous, of the plan's dtype and the result's
        shape (checked by the shim); None: the kernel makes the result.
    flat : bool
        The caller gave 1-D ids: the result is (S, H).
    num_threads : int
        Threads for the call; <= 0: the automatic choice.
    inputs : object
        The caller's inputs, for the shim's messages (the kernel never reads it).
    """

    def __init__(self, cnp.ndarray token_ids not None, object position_ids, object segment_ids,
                 object task_type_ids, object keep, object out, bint flat, int num_threads, object inputs=None):
        self.token_ids = token_ids
        self.position_ids = position_ids
        self.segment_ids = segment_ids
        self.task_type_ids = task_type_ids
        self.keep = keep
        self.out = out
        self.flat = flat
        self.num_threads = num_threads
        self.inputs = inputs
        self.error = IDS_OK
        self.index = -1
        self.value = 0


@cython.auto_pickle(False)  # (a layer pickles its tables, and binds them again)
cdef class Plan:
    """Tables, a position rule and a result dtype bound to the kernel once.

    The layer builds one when it is made; ``bert_embeddings`` one per call.
    Every call is a :class:`Call` computed by :meth:`embed`, which checks its
    ids first; :meth:`given` makes the Call of inputs already in the kernel's
    form (int32/int64 C-contiguous ids, and segment ids of the same dtype and
    shape), and :meth:`run` computes them in the same step (the layer's
    common call).

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
        The result dtype and kind, whether rows are computed in float64, how
        results are allocated (``.empty`` from ``.pool_min_bytes`` bytes on)
        and written (non-temporal stores from ``.stream_min_bytes`` on, with
        LayerNorm), and how a failed check is worded (``.report(plan, call)``:
        the exception to raise).
    """

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
        self.pos_rows = self.seg_rows = self.task_rows = 0
        if tables.pos is not None:
            _bind_term(&self.job.terms[k], tables.pos, self.rule_code == RULE_ABSOLUTE, self.offset)
            self.pos_term, self.pos_rows = k, tables.pos.data.shape[0]
            k += 1
        if tables.seg is not None:
            _bind_term(&self.job.terms[k], tables.seg, False, 0)
            self.seg_term, self.seg_rows = k, tables.seg.data.shape[0]
            k += 1
        if tables.task is not None:
            _bind_term(&self.job.terms[k], tables.task, False, 0)
            self.task_term, self.task_rows = k, tables.task.data.shape[0]
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
        self.report = output.report
        self.big_bytes = output.pool_min_bytes
        self.stream_bytes = output.stream_min_bytes

    cdef void _job(self, be_job *job, Py_ssize_t n, Py_ssize_t S, bint id64, const char *tok_ids,
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

    cdef int _check(self, const char *tok, bint id64, Py_ssize_t B, Py_ssize_t S, const char *pos, Py_ssize_t pos_n,
                    const char *seg, const char *task, bint scan_map, char *padding, Py_ssize_t *index,
                    int64_t *value) noexcept nogil:
        """Check a call's ids against the plan's tables, in the order errors are
        reported: the absolute rule's length, token ids, trimmed-away ids (when
        `scan_map`), positions (`pos`: `pos_n` ids; or the padding rule's,
        written to `padding`), segment ids, task type ids (NULL: row 0).
        Returns ``IDS_OK`` or the ``BAD_*`` code, with the first bad flat index
        (-1: a default row) and the value found."""
        cdef Py_ssize_t n = B * S
        cdef int64_t top
        index[0], value[0] = -1, 0
        if pos == NULL and self.pos_term >= 0 and self.rule_code == RULE_ABSOLUTE and S + self.offset > self.pos_rows:
            value[0] = S
            return BAD_ABSOLUTE
        if n == 0:
            return IDS_OK
        index[0] = be_first_out_of_range(tok, id64, n, self.tok_rows)
        if index[0] >= 0:
            return BAD_TOKEN
        if scan_map and self.map_drops:
            index[0] = be_first_dropped(tok, id64, n, self.job.tok_map)
            if index[0] >= 0:
                return BAD_DROPPED
        if self.pos_term >= 0:
            if pos != NULL:
                index[0] = be_first_out_of_range(pos, id64, pos_n, self.pos_rows)
                if index[0] >= 0:
                    return BAD_POSITION
            elif self.rule_code == RULE_PADDING:
                top = be_padding_positions(tok, padding, B, S, id64, self.padding_idx)
                if top >= self.pos_rows:
                    value[0] = top
                    return BAD_PADDING
        if self.seg_term >= 0:
            if seg != NULL:
                index[0] = be_first_out_of_range(seg, id64, n, self.seg_rows)
                if index[0] >= 0:
                    return BAD_SEGMENT
            elif self.seg_rows == 0:
                return BAD_SEGMENT
        if self.task_term >= 0:
            if task != NULL:
                index[0] = be_first_out_of_range(task, id64, n, self.task_rows)
                if index[0] >= 0:
                    return BAD_TASK
            elif self.task_rows == 0:
                return BAD_TASK
        index[0] = -1
        return IDS_OK

    cdef bint _given(self, object token_ids, object segment_ids):
        """Whether `token_ids` and `segment_ids` are in the kernel's form as given
        (see :meth:`given`)."""
        cdef cnp.ndarray ids, sids
        cdef int nd
        if not _plain_ids(token_ids):
            return False
        ids = <cnp.ndarray>token_ids
        nd = cnp.PyArray_NDIM(ids)
        if nd != 1 and nd != 2:
            return False
        if segment_ids is not None:
            if self.seg_term < 0 or not _plain_ids(segment_ids):
                return False
            sids = <cnp.ndarray>segment_ids
            if (cnp.PyArray_TYPE(sids) != cnp.PyArray_TYPE(ids) or cnp.PyArray_NDIM(sids) != nd
                    or cnp.PyArray_DIMS(sids)[0] != cnp.PyArray_DIMS(ids)[0]
                    or cnp.PyArray_DIMS(sids)[nd - 1] != cnp.PyArray_DIMS(ids)[nd - 1]):
                return False
        # (the padding rule's positions may not fit int32: the shim widens the ids)
        return not (self.rule_code == RULE_PADDING and cnp.PyArray_TYPE(ids) == cnp.NPY_INT32
                    and self.padding_idx + cnp.PyArray_DIMS(ids)[nd - 1] > 2147483647)

    def given(self, token_ids, segment_ids, int num_threads, inputs=None):
        """The :class:`Call` of `token_ids` and `segment_ids` as given, when they are
        in the kernel's form already (a native aligned C-contiguous int32 or
        int64 ndarray of 1 or 2 dimensions; segment ids None, or of the same
        dtype and shape, with a segment table); else None: the shim
        normalises them. Decided by their types and shapes: no id is read.
        `inputs`: as :class:`Call`'s."""
        if not self._given(token_ids, segment_ids):
            return None
        return Call(token_ids, None, segment_ids, None, None, None, cnp.PyArray_NDIM(<cnp.ndarray>token_ids) == 1,
                    num_threads, inputs)

    def run(self, token_ids, segment_ids, int num_threads):
        """The embeddings of the layer's common call: :meth:`embed` of
        :meth:`given`, in one step (no Call is made unless a check fails).
        None when the inputs are not in the kernel's form (the shim then
        normalises them); a bad id raises, as in :meth:`embed`."""
        if not self._given(token_ids, segment_ids):
            return None
        return self._embed(<cnp.ndarray>token_ids, cnp.PyArray_NDIM(<cnp.ndarray>token_ids) == 1, None, segment_ids,
                           None, None, None, num_threads, None)

    def embed(self, Call call not None):
        """The embeddings of `call`: ``call.out`` filled, or a new result.

        Its ids are checked first: when one is bad nothing is written;
        ``call.error``, ``call.index`` and ``call.value`` say what was found
        (``be_check.h``), and the exception the plan's ``output.report``
        makes of it is raised.
        """
        return self._embed(<cnp.ndarray>call.token_ids, call.flat, call.position_ids, call.segment_ids,
                           call.task_type_ids, call.keep, call.out, call.num_threads, call)

    cdef object _embed(self, cnp.ndarray ids, bint flat, object pos, object seg, object task, object keep, object out,
                       int num_threads, Call call):
        """Check and compute one call (`call`: the Call of these inputs, or None: made only to report a failure)."""
        cdef cnp.ndarray result
        cdef be_job job
        cdef bint id64 = cnp.PyArray_ITEMSIZE(ids) == 8
        cdef Py_ssize_t B = 1 if flat else cnp.PyArray_DIMS(ids)[0]
        cdef Py_ssize_t S = cnp.PyArray_DIMS(ids)[cnp.PyArray_NDIM(ids) - 1]
        cdef Py_ssize_t n = B * S, pos_n = 0, index = -1, dropped
        cdef int64_t value = 0
        cdef int error, k, unmapped = 0
        cdef bint fresh = out is None
        cdef const char *tok = _data(ids)
        cdef const char *pos_ids = _data_or_null(pos)
        cdef const char *seg_ids = _data_or_null(seg)
        cdef const char *task_ids = _data_or_null(task)
        cdef char *padding = NULL
        cdef cnp.npy_intp dims[3]
        if pos is not None:
            pos_n = cnp.PyArray_SIZE(<cnp.ndarray>pos)
        if pos_ids == NULL and self.rule_code == RULE_PADDING and self.pos_term >= 0 and n:
            padding = <char *>malloc(n * cnp.PyArray_ITEMSIZE(ids))
            if padding == NULL:
                raise MemoryError("bertembed: no memory for the position ids")
        try:
            # A new result is written before the map's check: the pass over the
            # rows finds trimmed-away ids itself (a check of its own costs a
            # second walk of the map); a buffer of the caller's is checked first.
            # (The GIL is released for big calls only: for a small one, releasing
            # it costs more than the scans.)
            if n >= _CHECK_NOGIL_MIN:
                with nogil:
                    error = self._check(tok, id64, B, S, pos_ids, pos_n, seg_ids, task_ids, not fresh, padding,
                                        &index, &value)
            else:
                error = self._check(tok, id64, B, S, pos_ids, pos_n, seg_ids, task_ids, not fresh, padding, &index,
                                    &value)
            if error > BAD_DROPPED and fresh and self.map_drops:  # (the map before a later check)
                dropped = be_first_dropped(tok, id64, n, self.job.tok_map)
                if dropped >= 0:
                    error, index, value = BAD_DROPPED, dropped, 0
            if error == IDS_OK:
                if fresh:
                    if flat:
                        dims[0], dims[1] = S, self.job.H
                    else:
                        dims[0], dims[1], dims[2] = B, S, self.job.H
                    if n == 0:
                        result = np.empty(tuple([dims[k] for k in range(2 if flat else 3)]), self.out_dtype)
                    elif n * self.job.out_row_bytes >= self.big_bytes or self.out_typenum < 0:
                        result = self.big_empty(tuple([dims[k] for k in range(2 if flat else 3)]), self.out_dtype)
                    else:
                        result = cnp.PyArray_EMPTY(2 if flat else 3, dims, self.out_typenum, 0)
                else:
                    result = <cnp.ndarray>out
                if n == 0:
                    return result
                if padding != NULL:  # (an if: a conditional expression would drop const, see _data_or_null)
                    pos_ids = padding
                self._job(&job, n, S, id64, tok, pos_ids,
                          pos is not None and cnp.PyArray_DIMS(<cnp.ndarray>pos)[0] == 1, seg_ids, task_ids,
                          <const unsigned char *>_data_or_null(keep), <char *>cnp.PyArray_DATA(result))
                if fresh and self.map_drops:
                    job.unmapped = &unmapped
                _run(&job, n, num_threads)
                if not unmapped:
                    return result
                with nogil:
                    index = be_first_dropped(tok, id64, n, self.job.tok_map)
                error = BAD_DROPPED
        finally:
            free(padding)
        if call is None:
            call = Call(ids, pos, seg, task, keep, out, flat, num_threads)
        call.error, call.index, call.value = error, index, value
        raise self.report(self, call)


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
