# cython: language_level=3
"""The joint between the kernel's C (``csrc/*.h``) and its Cython (``_kernel.pyx``).

Every C name the extension uses is declared here once, from its header; the
numbers the shim shares (storage kinds, position rules, instruction sets,
the checks' codes) are ``cpdef enum`` members, so that Python reads them from the module under
the same names (``_kernel.KIND_F32``, ``_kernel.RULE_PADDING``,
``_kernel.BAD_TOKEN``...) and never restates a value. The classes a call
goes through (:class:`Call`, :class:`Plan`) are declared with their typed
fields.
"""

cimport cython
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t

cdef extern from "be_kinds.h" nogil:
    # Storage kinds of tables and results; dtypes.py names them.
    cpdef enum:
        KIND_F32 "BE_F32"
        KIND_F64 "BE_F64"
        KIND_F16 "BE_F16"
        KIND_BF16 "BE_BF16"
        KIND_I8 "BE_I8"
    # Position rules; positions.py names them.
    cpdef enum:
        RULE_ABSOLUTE "BE_RULE_ABSOLUTE"
        RULE_PADDING "BE_RULE_PADDING"
        RULE_NONE "BE_RULE_NONE"
    # Instruction sets of the row kernels; knobs.py names them (ISA_NAMES).
    cpdef enum:
        ISA_BASELINE "BE_ISA_BASELINE"
        ISA_AVX2 "BE_ISA_AVX2"
        ISA_AVX512 "BE_ISA_AVX512"
        ISA_NEON "BE_ISA_NEON"
        ISA_COUNT "BE_ISA_COUNT"

cdef extern from "be_check.h" nogil:
    # What a failed check of a call's ids found; bad_ids.py words each one.
    cpdef enum:
        IDS_OK "BE_OK"
        BAD_ABSOLUTE "BE_BAD_ABSOLUTE"
        BAD_TOKEN "BE_BAD_TOKEN"
        BAD_DROPPED "BE_BAD_DROPPED"
        BAD_POSITION "BE_BAD_POSITION"
        BAD_PADDING "BE_BAD_PADDING"
        BAD_SEGMENT "BE_BAD_SEGMENT"
        BAD_TASK "BE_BAD_TASK"
    Py_ssize_t be_first_out_of_range(const void *ids, int id64, Py_ssize_t n, int64_t rows)
    Py_ssize_t be_first_dropped(const void *ids, int id64, Py_ssize_t n, const int32_t *map)
    int64_t be_padding_positions(const void *ids, void *out, Py_ssize_t B, Py_ssize_t S, int id64, int64_t pad)

cdef extern from "be_runtime.h" nogil:
    int BE_OPENMP
    int BE_OPENMP_VERSION
    const char *BE_COMPILER
    int be_max_threads()
    int be_release_threads()
    void be_set_max_threads(int n)
    void be_set_schedule(int dynamic, int chunk)

cdef extern from "be_threads.h" nogil:
    cpdef enum:
        # Result values per thread of the automatic thread choice.
        ELEMENTS_PER_THREAD "BE_ELEMENTS_PER_THREAD"
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
    void be_rows_init(int cap)
    int be_int8_saturates()
    int be_isa
    const int be_isas
    void be_row(const be_job *j, Py_ssize_t r, double *scratch)
    void be_store_fence()

cdef extern from "be_share.h" nogil:
    void be_share_rows(const be_job *job, int64_t n, double *scratch, int64_t *next, int64_t *done,
                       int64_t chunk, int wait)

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


@cython.final
cdef class Call:
    """One call's inputs in the kernel's form, and what its check found."""

    cdef readonly object token_ids
    cdef readonly object position_ids
    cdef readonly object segment_ids
    cdef readonly object task_type_ids
    cdef readonly object keep
    cdef readonly object out
    cdef readonly bint flat
    cdef readonly int num_threads
    cdef readonly object inputs
    cdef readonly int error
    cdef readonly Py_ssize_t index
    cdef readonly int64_t value


@cython.final  # (its methods are called directly, not through a table)
cdef class Plan:
    """Tables, a position rule and a result dtype bound to the kernel once."""

    cdef be_job job
    cdef readonly object tables
    cdef readonly object rule
    cdef readonly object output
    cdef int rule_code
    cdef Py_ssize_t offset
    cdef int64_t padding_idx
    cdef Py_ssize_t tok_rows, pos_rows, seg_rows, task_rows
    cdef bint map_drops
    cdef int pos_term, seg_term, task_term
    cdef int out_typenum
    cdef object out_dtype
    cdef object big_empty
    cdef object report
    cdef Py_ssize_t big_bytes, stream_bytes

    cdef int _check(self, const char *tok, bint id64, Py_ssize_t B, Py_ssize_t S, const char *pos, Py_ssize_t pos_n,
                    const char *seg, const char *task, bint scan_map, char *padding, Py_ssize_t *index,
                    int64_t *value) noexcept nogil
    cdef bint _given(self, object token_ids, object segment_ids)
    cdef object _embed(self, cnp.ndarray ids, bint flat, object pos, object seg, object task, object keep, object out,
                       int num_threads, Call call)
    cdef void _job(self, be_job *job, Py_ssize_t n, Py_ssize_t S, bint id64, const char *tok_ids,
                   const char *pos_ids, bint pos_shared, const char *seg_ids, const char *task_ids,
                   const unsigned char *keep, char *out) noexcept nogil
