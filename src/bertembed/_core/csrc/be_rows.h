/* Row kernels of bertembed._core._kernel, in C.
 *
 * One output row (one position of one sequence) is computed by be_row():
 * the token row and the rows of the other terms (position, segment, task)
 * are read in their stored dtype (float32, float64, float16, bfloat16, or
 * int8 with a float32 scale and offset per row for the token table), widened in
 * registers, summed, optionally layer-normalised, and written in the result
 * dtype. Arithmetic is float32 when every table and the result are at most
 * 32-bit (as in the frameworks), float64 otherwise; LayerNorm statistics
 * always accumulate in float64.
 *
 * On x86-64 the row body is compiled for the baseline and for AVX2 + FMA +
 * F16C, and with GCC or clang also for AVX-512; be_rows_init() picks the
 * best the CPU runs (be_cpu.h). GCC and clang compile each body with its
 * target attribute; MSVC needs none for the intrinsics, so its AVX2 body is
 * the same C with the same intrinsics (its plain loops stay SSE2). Every
 * multiply-add of the AVX2 and AVX-512 bodies is an explicit fused one
 * (intrinsics, BE_MADD), so no result depends on whether a compiler
 * contracts a * b + c: MSVC does not, GCC does. On aarch64 with GCC or clang
 * the body is compiled twice (NEON, see be_neon.h, and portable) and NEON is
 * used unless BERTEMBED_ISA=baseline.
 *
 * BE_MSVC_SHAPE=1 (CI only, with GCC or clang on x86-64) compiles what MSVC
 * compiles: no vector extensions, no AVX-512 body, _mm_prefetch.
 */
#ifndef BERTEMBED_ROWS_H
#define BERTEMBED_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "be_float16.h"
#include "be_kinds.h"
#include "be_runtime.h"

#ifndef BE_MSVC_SHAPE
#define BE_MSVC_SHAPE 0
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define BE_HAVE_SSE2 1
#else
#define BE_HAVE_SSE2 0
#endif

/* Bodies chosen at run time: BE_MULTIVERSION (baseline and AVX2, with the
   AVX2 body's attribute BE_AVX2_ATTR) and BE_HAVE_AVX512 (also AVX-512). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#include "be_cpu.h"
#define BE_MULTIVERSION 1
#define BE_AVX2_ATTR    __attribute__((target("avx2,fma,f16c")))
#define BE_HAVE_AVX512  (!BE_MSVC_SHAPE)
#elif defined(_M_X64) && defined(_MSC_VER)
#include <immintrin.h>
#include "be_cpu.h"
#define BE_MULTIVERSION 1
#define BE_AVX2_ATTR
#define BE_HAVE_AVX512 0
#else
#define BE_MULTIVERSION 0
#define BE_HAVE_AVX512  0
#endif

#if defined(__aarch64__) && defined(__ARM_NEON) && (defined(__GNUC__) || defined(__clang__))
#define BE_NEON 1
#else
#define BE_NEON 0
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !BE_MSVC_SHAPE
/* GCC/clang vector extensions: lowered to SSE2/AVX2/AVX-512/NEON as the
   function's target allows. */
#define BE_VECTOR_EXT 1
typedef double be_v4d __attribute__((vector_size(32)));
typedef float be_v4f __attribute__((vector_size(16)));
typedef double be_v8d __attribute__((vector_size(64)));
typedef float be_v8f __attribute__((vector_size(32)));
#else
#define BE_VECTOR_EXT 0
#endif

/* One looked-up term besides the token row: position, segment or task. */
typedef struct {
    const char *data;       /* table, C-contiguous rows */
    Py_ssize_t row_bytes;   /* H * itemsize */
    int kind;
    const char *ids;        /* row ids (int32 or int64 like all ids); NULL: see `arange` */
    Py_ssize_t ids_bstride; /* ids between two sequences: 0 (one row shared) or S */
    int arange;             /* without ids: row offset + s (positions), else row 0 */
    Py_ssize_t offset;
} be_term;

/* Everything one call computes; read-only while rows are computed (but for
   the flag `unmapped` points to). */
typedef struct {
    Py_ssize_t S, H;
    Py_ssize_t slot;        /* doubles per scratch slot (H rounded up) */
    int id64;               /* ids are int64 (else int32) */
    const char *tok_ids;    /* (B, S) */
    const int32_t *tok_map; /* trimmed table: the row of each original id; NULL: the id is the row */
    int *unmapped;          /* raised for an id the map sends to -1 (its row is written as zeros); such an id
                               is an error the caller reports: NULL if it checked the ids beforehand */
    const char *tok;
    Py_ssize_t tok_row_bytes;
    int tok_kind;
    const float *tok_scale; /* int8 tables: (scale, offset) of each row: value = q * scale + offset */
    be_term terms[3];
    int nterms;
    int ln;                 /* LayerNorm */
    const float *w32, *b32; /* b NULL: LayerNorm without bias */
    const double *w64, *b64;
    double eps;
    const unsigned char *keep; /* (B, S): rows with 0 are written as zeros; NULL: none */
    char *out;
    Py_ssize_t out_row_bytes;
    int out_kind;
    int wide;               /* compute in float64 */
    int stream;             /* write finished rows with non-temporal stores */
} be_job;

/* Scratch slots per thread (each `slot` doubles): four widened input rows,
   the sum, the finished row. */
#define BE_SCRATCH_SLOTS 6

/* How many rows ahead the token row is prefetched. */
#ifndef BE_PREFETCH_AHEAD
#define BE_PREFETCH_AHEAD 1
#endif
/* How many rows ahead a trimmed table's map entry is prefetched. */
#ifndef BE_MAP_PREFETCH_AHEAD
#define BE_MAP_PREFETCH_AHEAD 8
#endif

static inline Py_ssize_t be_id(const char *ids, int id64, Py_ssize_t i) {
    return id64 ? (Py_ssize_t)((const int64_t *)ids)[i] : (Py_ssize_t)((const int32_t *)ids)[i];
}

/* The token table row of output row r: its id, or for a trimmed table the
   id's entry in the map (read in the same pass as the row). */
static inline Py_ssize_t be_tok_row(const be_job *j, Py_ssize_t r) {
    Py_ssize_t t = be_id(j->tok_ids, j->id64, r);
    return j->tok_map != NULL ? (Py_ssize_t)j->tok_map[t] : t;
}

/* Mean and variance of a float64 row in one pass over it (the row is in
   L1), eight independent accumulators, values shifted by the first one. */
static void be_row_stats(const double *x, Py_ssize_t n, double *mean, double *var) {
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double k = x[0], m, d;
    Py_ssize_t i = 0, j;
    for (; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) {
            d = x[i + j] - k;
            s[j] += d;
            q[j] += d * d;
        }
    for (; i < n; i++) {
        d = x[i] - k;
        s[0] += d;
        q[0] += d * d;
    }
    m = (((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))) / (double)n;
    d = (((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]))) / (double)n;
    *mean = k + m;
    d -= m * m; /* NaN and inf propagate; only a rounding-negative becomes 0 */
    *var = d < 0.0 ? 0.0 : d;
}

static void be_stream_copy(void *dst_, const void *src_, size_t n) {
#if BE_HAVE_SSE2
    char *dst = (char *)dst_;
    const char *src = (const char *)src_;
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > n) head = n;
    memcpy(dst, src, head);
    dst += head;
    src += head;
    n -= head;
    for (; n >= 64; n -= 64, dst += 64, src += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)src);
        __m128i b = _mm_loadu_si128((const __m128i *)(src + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + 48));
        _mm_stream_si128((__m128i *)dst, a);
        _mm_stream_si128((__m128i *)(dst + 16), b);
        _mm_stream_si128((__m128i *)(dst + 32), c);
        _mm_stream_si128((__m128i *)(dst + 48), d);
    }
    for (; n >= 16; n -= 16, dst += 16, src += 16)
        _mm_stream_si128((__m128i *)dst, _mm_loadu_si128((const __m128i *)src));
    memcpy(dst, src, n);
#else
    memcpy(dst_, src_, n);
#endif
}

/* Make this thread's non-temporal stores visible before it leaves. */
static void be_store_fence(void) {
#if BE_HAVE_SSE2
    _mm_sfence();
#endif
}

typedef void (*be_row_fn)(const be_job *, Py_ssize_t, double *);

/* Functions the row bodies want inlined whatever the compiler's estimate
   (the kinds and row counts they are called with are then constants). */
#if defined(_MSC_VER) && !defined(__clang__)
#define BE_ALWAYS_INLINE __forceinline
#else
#define BE_ALWAYS_INLINE inline __attribute__((always_inline))
#endif

#define BE_CAT2(a, b) a##_##b
#define BE_CAT(a, b)  BE_CAT2(a, b)
#define BE_FN(name)   BE_CAT(name, BE_SUFFIX)

#ifndef BE_ARM
#define BE_ARM 0 /* 1 while the body is compiled with NEON (be_neon.h) */
#endif

#define BE_LEVEL  0
#define BE_SUFFIX base
#define BE_ATTR
#define BE_VD be_v4d
#define BE_VF be_v4f
#include "be_row_body.h"
#undef BE_LEVEL
#undef BE_SUFFIX
#undef BE_ATTR

#if BE_MULTIVERSION
#define BE_LEVEL  1
#define BE_SUFFIX avx2
#define BE_ATTR   BE_AVX2_ATTR
#include "be_row_body.h"
#undef BE_LEVEL
#undef BE_SUFFIX
#undef BE_ATTR
#endif

#if BE_HAVE_AVX512
#undef BE_VD
#undef BE_VF
#define BE_VD     be_v8d
#define BE_VF     be_v8f
#define BE_LEVEL  2
#define BE_SUFFIX avx512
/* The same target string for both compilers; the preference for 512-bit
   vectors in the compiler's own vectorisation is said the way each takes it:
   GCC as a second target option (which clang rejects), clang as
   min_vector_width (which keeps 512-bit vectors legal even when the build's
   tuning prefers 256 bits; its default tuning already vectorises at 512). */
#if defined(__clang__)
#define BE_WIDE512 __attribute__((min_vector_width(512)))
#else
#define BE_WIDE512 __attribute__((target("prefer-vector-width=512")))
#endif
#define BE_ATTR __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma,f16c"))) BE_WIDE512
#include "be_row_body.h"
#endif

#if BE_NEON
#include "be_neon.h"
#undef BE_ARM
#define BE_ARM    1
#define BE_LEVEL  0
#define BE_SUFFIX neon
#define BE_ATTR
#include "be_row_body.h"
#undef BE_LEVEL
#undef BE_SUFFIX
#undef BE_ATTR
#undef BE_ARM
#define BE_ARM 0
#endif

static be_row_fn be_row = be_row_base;
/* The row kernel chosen (a BE_ISA_* of be_kinds.h). */
static int be_isa = BE_ISA_BASELINE;
#if BE_MULTIVERSION
/* The row kernel's level (0 baseline, 1 AVX2, 2 AVX-512): the table
   conversion (be_convert.h) picks its loops by it. */
static int be_level = 0;
#endif

/* The row kernels this build holds: bit (1 << BE_ISA_*) for each. */
#if BE_HAVE_AVX512
static const int be_isas = (1 << BE_ISA_BASELINE) | (1 << BE_ISA_AVX2) | (1 << BE_ISA_AVX512);
#elif BE_MULTIVERSION
static const int be_isas = (1 << BE_ISA_BASELINE) | (1 << BE_ISA_AVX2);
#elif BE_NEON
static const int be_isas = (1 << BE_ISA_BASELINE) | (1 << BE_ISA_NEON);
#else
static const int be_isas = 1 << BE_ISA_BASELINE;
#endif

/* 1 where ONNX Runtime's uint8 x int8 products saturate: x86-64 without an
   int8 dot-product instruction (be_cpu_int8_dot); 0 elsewhere. */
static int be_int8_saturates(void) {
#if BE_MULTIVERSION
    return !be_cpu_int8_dot();
#else
    return 0;
#endif
}

/* Pick the widest row kernel this CPU runs. BERTEMBED_ISA caps it (for
 * testing and for comparing): `cap` is its BE_ISA_* (-1: none; a cap of
 * another architecture caps nothing). */
static void be_rows_init(int cap) {
#if BE_MULTIVERSION
    int allow512 = cap != BE_ISA_BASELINE && cap != BE_ISA_AVX2;
    int allow2 = cap != BE_ISA_BASELINE;
    int level = be_cpu_level();
    be_row = be_row_base;
    be_isa = BE_ISA_BASELINE;
    be_level = 0;
    if (allow2 && level >= 1) {
        be_row = be_row_avx2;
        be_isa = BE_ISA_AVX2;
        be_level = 1;
    }
#if BE_HAVE_AVX512
    if (allow512 && level >= 2) {
        be_row = be_row_avx512;
        be_isa = BE_ISA_AVX512;
        be_level = 2;
    }
#else
    (void)allow512;
#endif
#elif BE_NEON
    if (cap == BE_ISA_BASELINE) {
        be_row = be_row_base;
        be_isa = BE_ISA_BASELINE;
    } else {
        be_row = be_row_neon;
        be_isa = BE_ISA_NEON;
    }
#else
    (void)cap;
#endif
}

#endif
