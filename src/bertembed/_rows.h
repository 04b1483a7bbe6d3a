/* Row kernels written in C for bertembed._kernel.
 *
 * be_ln32: float32 fused embedding sum + LayerNorm of one row. On x86-64
 * with GCC or clang the same body is compiled for AVX-512, AVX2+FMA and
 * the baseline, and be_rows_init() picks the best the CPU has. Elsewhere
 * (MSVC, arm64) only the baseline exists.
 *
 * be_stream_copy: copy a finished row to the result with non-temporal
 * stores on x86-64 (large results: no read-for-ownership of lines that are
 * about to be overwritten whole, no eviction of the tables from cache).
 */
#ifndef BERTEMBED_ROWS_H
#define BERTEMBED_ROWS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
#define BE_HAVE_SSE2 1
#else
#define BE_HAVE_SSE2 0
#endif

#if (defined(__x86_64__)) && (defined(__GNUC__) || defined(__clang__))
#define BE_MULTIVERSION 1
#else
#define BE_MULTIVERSION 0
#endif

#if defined(__GNUC__) || defined(__clang__)
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

typedef void (*be_ln32_fn)(const float *, const float *, const float *, float *, Py_ssize_t,
                           int, const float *, const float *, double, float *);

#define BE_VD be_v4d
#define BE_VF be_v4f
#define BE_LN32_NAME be_ln32_base
#define BE_LN32_ATTR
#include "_ln32_body.h"
#undef BE_LN32_NAME
#undef BE_LN32_ATTR

#if BE_MULTIVERSION
#define BE_LN32_NAME be_ln32_avx2
#define BE_LN32_ATTR __attribute__((target("avx2,fma")))
#include "_ln32_body.h"
#undef BE_LN32_NAME
#undef BE_LN32_ATTR
#undef BE_VD
#undef BE_VF
#define BE_VD be_v8d
#define BE_VF be_v8f
#define BE_LN32_NAME be_ln32_avx512
#define BE_LN32_ATTR __attribute__((target("avx512f,avx512vl,avx512dq,avx2,fma")))
#include "_ln32_body.h"
#undef BE_LN32_NAME
#undef BE_LN32_ATTR
#endif

/* Mean and variance of a float64 row in one pass over it (the row is in
   L1), eight independent accumulators, values shifted by the first one. */
static void be_row_stats(const double *x, Py_ssize_t n, double *mean, double *var) {
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0}, q[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    double k = x[0], m, d;
    Py_ssize_t i = 0, j;
    for (; i + 8 <= n; i += 8)
        for (j = 0; j < 8; j++) { d = x[i + j] - k; s[j] += d; q[j] += d * d; }
    for (; i < n; i++) { d = x[i] - k; s[0] += d; q[0] += d * d; }
    m = (((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]))) / (double)n;
    d = (((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]))) / (double)n;
    *mean = k + m;
    d -= m * m; /* NaN and inf propagate; only a rounding-negative becomes 0 */
    *var = d < 0.0 ? 0.0 : d;
}

static be_ln32_fn be_ln32 = be_ln32_base;
static const char *be_isa = "baseline";

/* Pick the widest row kernel this CPU runs. BERTEMBED_ISA=baseline|avx2
 * caps it (for testing and for comparing). */
static void be_rows_init(const char *cap) {
#if BE_MULTIVERSION
    int allow512 = !(cap && (strcmp(cap, "baseline") == 0 || strcmp(cap, "avx2") == 0));
    int allow2 = !(cap && strcmp(cap, "baseline") == 0);
    __builtin_cpu_init();
    if (allow512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512dq")) {
        be_ln32 = be_ln32_avx512;
        be_isa = "avx512";
    } else if (allow2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        be_ln32 = be_ln32_avx2;
        be_isa = "avx2";
    } else {
        be_ln32 = be_ln32_base;
        be_isa = "baseline";
    }
#else
    (void)cap;
#endif
}

static void be_stream_copy(void *dst_, const void *src_, size_t n) {
#if BE_HAVE_SSE2
    char *dst = (char *)dst_;
    const char *src = (const char *)src_;
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > n) head = n;
    memcpy(dst, src, head);
    dst += head; src += head; n -= head;
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

#endif
