/* Whole-table conversion, one row at a time: float32, float64, float16,
 * bfloat16 (and int8 with its scale and offset) tables stored as float16,
 * bfloat16, float32, float64 or int8.
 *
 * be_convert_row() converts one row; the kernel runs it over the rows in
 * parallel, so that a table is read once, straight from wherever it lives
 * (a memory-mapped checkpoint), and nothing but the result and one row of
 * scratch per thread is ever allocated.
 *
 * Every result is bit for bit what the NumPy expressions of the reference
 * give (tests/helpers/table_conversion.py holds them):
 *
 * - float targets: each element converted once, round to nearest even
 *   (float64 -> float16 directly; float64 -> bfloat16 through float32, as
 *   ``x.astype(float32)`` then ml_dtypes does);
 * - int8: per-row scale and offset, computed in float64. ``lo``/``hi`` are the
 *   row's extremes, ``scale = float32((hi - lo) / 255)``, ``q = clip(rint((x -
 *   lo) / scale) - 128, -128, 127)``, and the offset is the mean of ``x - q *
 *   scale``, summed in NumPy's pairwise order. A constant row has scale 0, q 0
 *   and offset ``lo``.
 *
 * The int8 arithmetic must not be contracted into fused multiply-adds (the
 * reference rounds the product, then the difference), hence BE_NO_CONTRACT.
 */
#ifndef BERTEMBED_CONVERT_H
#define BERTEMBED_CONVERT_H

#include <float.h>
#include <stdint.h>
#include <string.h>

#include "be_float16.h"
#include "be_kinds.h"
#include "be_rows.h"

#if defined(__GNUC__) && !defined(__clang__)
#define BE_NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define BE_NO_CONTRACT
#endif

/* Row outcomes. */
enum { BE_CONV_OK = 0, BE_CONV_NONFINITE = 1, BE_CONV_TOO_WIDE = 2 };

/* One table conversion; read-only while rows are converted. */
typedef struct {
    const char *src;
    Py_ssize_t src_row_bytes;
    int src_kind;
    const float *src_scale; /* int8 sources: (scale, offset) of each row */
    char *dst;
    Py_ssize_t dst_row_bytes;
    int dst_kind;
    float *dst_scale;       /* int8 results: (scale, offset) of each row */
    Py_ssize_t H;
} be_conv;

/* float64 -> binary16, round to nearest even, in one step (no double rounding
 * through float32). NaN stays a quiet NaN of the same sign. */
static inline uint16_t be_d2h(double d) {
    uint64_t x;
    uint16_t sign;
    memcpy(&x, &d, sizeof x);
    sign = (uint16_t)((x >> 48) & 0x8000u);
    x &= 0x7fffffffffffffffull;
    if (x > 0x7ff0000000000000ull) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((x >> 42) & 0x3ffu));
    if (x >= 0x40effe0000000000ull) /* >= 65520 (and inf): rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x3f10000000000000ull) {
        /* Below 2**-14, the smallest normal: a multiple of 2**-24, the
         * subnormal step. In y = |d| + 2**28 the last mantissa bit is worth
         * 2**-24, so the FPU rounds |d| to the step (to even), and y's low
         * bits count the steps: 1024 steps is 2**-14, whose half-precision
         * bits are also 1024. */
        double y;
        uint64_t k;
        memcpy(&y, &x, sizeof y);
        y += 268435456.0; /* 2**28 */
        memcpy(&k, &y, sizeof k);
        return (uint16_t)(sign | (uint16_t)(k - 0x41b0000000000000ull));
    }
    /* Normal: rebias the exponent (1023 -> 15), round away 42 mantissa bits to
     * even; a carry out of the mantissa raises the exponent, as it should. */
    x += ((1ull << 41) - 1u) + ((x >> 42) & 1u); /* half an ulp, less one unless odd */
    return (uint16_t)(sign | (uint16_t)((x >> 42) - ((uint64_t)(1023 - 15) << 10)));
}

/* Element i of a row as float64 (exact). */
BE_NO_CONTRACT
static inline double be_conv_load(const char *row, int kind, const float *so, Py_ssize_t i) {
    switch (kind) {
    case BE_F32:
        return (double)((const float *)row)[i];
    case BE_F64:
        return ((const double *)row)[i];
    case BE_F16:
        return (double)be_h2f(((const uint16_t *)row)[i]);
    case BE_BF16:
        return (double)be_bf2f(((const uint16_t *)row)[i]);
    default: { /* int8: q * scale + offset in float32, as the reference dequantises */
        float p = (float)((const int8_t *)row)[i] * so[0];
        return (double)(p + so[1]);
    }
    }
}

/* The row as float64 in `v` (float64 sources: the row itself). */
BE_NO_CONTRACT
static const double *be_conv_widen(const be_conv *c, Py_ssize_t r, double *v) {
    const char *row = c->src + r * c->src_row_bytes;
    const float *so = c->src_scale ? c->src_scale + 2 * r : NULL;
    Py_ssize_t i, H = c->H;
    if (c->src_kind == BE_F64) return (const double *)row;
    if (c->src_kind == BE_F32) {
        const float *p = (const float *)row;
        for (i = 0; i < H; i++) v[i] = (double)p[i];
    } else {
        for (i = 0; i < H; i++) v[i] = be_conv_load(row, c->src_kind, so, i);
    }
    return v;
}

/* NumPy's pairwise summation (the order np.add.reduce sums a contiguous row
 * in): blocks of up to 128 summed in 8 interleaved partial sums, longer runs
 * split in two at a multiple of 8. */
static double be_pairwise_sum(const double *a, Py_ssize_t n) {
    if (n < 8) {
        double s = 0.0;
        Py_ssize_t i;
        for (i = 0; i < n; i++) s += a[i];
        return s;
    }
    if (n <= 128) {
        double p[8];
        Py_ssize_t i, j, whole = n - n % 8;
        for (j = 0; j < 8; j++) p[j] = a[j];
        for (i = 8; i < whole; i += 8)
            for (j = 0; j < 8; j++) p[j] += a[i + j];
        {
            double s = ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
            for (i = whole; i < n; i++) s += a[i];
            return s;
        }
    }
    {
        Py_ssize_t half = n / 2;
        half -= half % 8;
        return be_pairwise_sum(a, half) + be_pairwise_sum(a + half, n - half);
    }
}

/* The extremes of a float64 row, and z: 0 unless an element is NaN or inf
 * (x - x is then NaN). min(x, lo) is `x < lo ? x : lo`, as minpd computes it.
 * With `f32` (a float32 row), the row is also widened into `v`. */
BE_NO_CONTRACT
static void be_extremes(const double *v, const float *f32, double *out_v, Py_ssize_t H, double *lo_out, double *hi_out,
                        double *z_out) {
    double lo, hi, z;
    Py_ssize_t i, whole = H - H % 4;
#if BE_HAVE_SSE2
    {
        __m128d first = f32 ? _mm_set1_pd((double)f32[0]) : _mm_set1_pd(v[0]);
        __m128d lo_a = first, lo_b = first, hi_a = first, hi_b = first;
        __m128d z_a = _mm_setzero_pd(), z_b = z_a;
        double l2[2], h2[2], z2[2];
        for (i = 0; i < whole; i += 4) {
            __m128d a, b;
            if (f32) {
                __m128 x = _mm_loadu_ps(f32 + i);
                a = _mm_cvtps_pd(x);
                b = _mm_cvtps_pd(_mm_movehl_ps(x, x));
                _mm_storeu_pd(out_v + i, a);
                _mm_storeu_pd(out_v + i + 2, b);
            } else {
                a = _mm_loadu_pd(v + i);
                b = _mm_loadu_pd(v + i + 2);
            }
            lo_a = _mm_min_pd(a, lo_a);
            lo_b = _mm_min_pd(b, lo_b);
            hi_a = _mm_max_pd(a, hi_a);
            hi_b = _mm_max_pd(b, hi_b);
            z_a = _mm_add_pd(z_a, _mm_sub_pd(a, a));
            z_b = _mm_add_pd(z_b, _mm_sub_pd(b, b));
        }
        _mm_storeu_pd(l2, _mm_min_pd(lo_a, lo_b));
        _mm_storeu_pd(h2, _mm_max_pd(hi_a, hi_b));
        _mm_storeu_pd(z2, _mm_add_pd(z_a, z_b));
        lo = l2[1] < l2[0] ? l2[1] : l2[0];
        hi = h2[1] > h2[0] ? h2[1] : h2[0];
        z = z2[0] + z2[1];
    }
#else
    lo = hi = f32 ? (double)f32[0] : v[0];
    z = 0.0;
    whole = 0;
#endif
    for (i = whole; i < H; i++) {
        double x = f32 ? (double)f32[i] : v[i];
        if (f32) out_v[i] = x;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        z += x - x;
    }
    *lo_out = lo;
    *hi_out = hi;
    *z_out = z;
}

#if BE_MULTIVERSION
/* be_extremes of a float32 row with AVX2, the row widened into out_v: one
 * accumulator of four lanes, element e in lane e % 4 in order, which is
 * the order of the SSE2 code's two accumulators of two lanes, reduced the
 * same way (so the same lo and hi, down to the sign of a zero). */
static BE_AVX2_ATTR void be_extremes_f32_avx2(const float *f32, double *out_v, Py_ssize_t H, double *lo_out,
                                              double *hi_out, double *z_out) {
    const __m256d first = _mm256_set1_pd((double)f32[0]);
    __m256d lo4 = first, hi4 = first, z4 = _mm256_setzero_pd();
    double l2[2], h2[2], z2[2], lo, hi, z;
    Py_ssize_t i = 0, whole = H - H % 4;
    for (; i + 8 <= whole; i += 8) {
        __m256 x = _mm256_loadu_ps(f32 + i);
        __m256d a = _mm256_cvtps_pd(_mm256_castps256_ps128(x)), b = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        _mm256_storeu_pd(out_v + i, a);
        _mm256_storeu_pd(out_v + i + 4, b);
        lo4 = _mm256_min_pd(b, _mm256_min_pd(a, lo4));
        hi4 = _mm256_max_pd(b, _mm256_max_pd(a, hi4));
        z4 = _mm256_add_pd(_mm256_add_pd(z4, _mm256_sub_pd(a, a)), _mm256_sub_pd(b, b));
    }
    for (; i < whole; i += 4) {
        __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(f32 + i));
        _mm256_storeu_pd(out_v + i, a);
        lo4 = _mm256_min_pd(a, lo4);
        hi4 = _mm256_max_pd(a, hi4);
        z4 = _mm256_add_pd(z4, _mm256_sub_pd(a, a));
    }
    _mm_storeu_pd(l2, _mm_min_pd(_mm256_castpd256_pd128(lo4), _mm256_extractf128_pd(lo4, 1)));
    _mm_storeu_pd(h2, _mm_max_pd(_mm256_castpd256_pd128(hi4), _mm256_extractf128_pd(hi4, 1)));
    _mm_storeu_pd(z2, _mm_add_pd(_mm256_castpd256_pd128(z4), _mm256_extractf128_pd(z4, 1)));
    lo = l2[1] < l2[0] ? l2[1] : l2[0];
    hi = h2[1] > h2[0] ? h2[1] : h2[0];
    z = z2[0] + z2[1];
    for (i = whole; i < H; i++) {
        double x = (double)f32[i];
        out_v[i] = x;
        lo = x < lo ? x : lo;
        hi = x > hi ? x : hi;
        z += x - x;
    }
    *lo_out = lo;
    *hi_out = hi;
    *z_out = z;
}

/* The quantising loop of be_quantize_row with AVX2 for i < the returned
 * count (a multiple of 8): the same operations, each rounded as the scalar
 * loop rounds it (a division, no fused multiply-add). */
static BE_AVX2_ATTR Py_ssize_t be_quantize_avx2(const double *v, Py_ssize_t H, double lo, double scale, int8_t *q,
                                                double *resid) {
    const __m256d vlo = _mm256_set1_pd(lo), vs = _mm256_set1_pd(scale), magic = _mm256_set1_pd(4503599627370496.0);
    const __m256d c128 = _mm256_set1_pd(128.0), c127 = _mm256_set1_pd(127.0);
    Py_ssize_t i = 0;
    for (; i + 8 <= H; i += 8) {
        __m256d a = _mm256_loadu_pd(v + i), b = _mm256_loadu_pd(v + i + 4);
        __m256d ka = _mm256_div_pd(_mm256_sub_pd(a, vlo), vs), kb = _mm256_div_pd(_mm256_sub_pd(b, vlo), vs);
        __m128i qa, qb, q16;
        ka = _mm256_sub_pd(_mm256_sub_pd(_mm256_add_pd(ka, magic), magic), c128);
        kb = _mm256_sub_pd(_mm256_sub_pd(_mm256_add_pd(kb, magic), magic), c128);
        ka = _mm256_min_pd(ka, c127); /* k < 127 ? k : 127, as the scalar loop's k > 127 ? 127 : k */
        kb = _mm256_min_pd(kb, c127);
        qa = _mm256_cvtpd_epi32(ka); /* exact: integers in [-128, 127] */
        qb = _mm256_cvtpd_epi32(kb);
        q16 = _mm_packs_epi32(qa, qb);
        _mm_storel_epi64((__m128i *)(q + i), _mm_packs_epi16(q16, q16));
        _mm256_storeu_pd(resid + i, _mm256_sub_pd(a, _mm256_mul_pd(ka, vs)));
        _mm256_storeu_pd(resid + i + 4, _mm256_sub_pd(b, _mm256_mul_pd(kb, vs)));
    }
    return i;
}
#endif

/* One row quantised: q (H int8) and so = (scale, offset). `v` is the row in
 * float64 and lo, hi, z its extremes (be_extremes); `resid` H doubles of
 * scratch (may be `v` itself). */
BE_NO_CONTRACT
static int be_quantize_row(const double *v, Py_ssize_t H, double lo, double hi, double z, int8_t *q, float *so,
                           double *resid) {
    double step, scale, mean;
    Py_ssize_t i;
    if (z != 0.0) return BE_CONV_NONFINITE;
    step = (hi - lo) / 255.0;
    scale = (double)(float)step;
    if (!(scale <= (double)FLT_MAX)) return BE_CONV_TOO_WIDE; /* no float32 scale spans it */
    if (!(scale > 0.0)) {
        memset(q, 0, (size_t)H);
        so[0] = (float)scale;
        so[1] = (float)lo;
        return BE_CONV_OK;
    }
    i = 0;
#if BE_MULTIVERSION
    if (be_level >= 1) i = be_quantize_avx2(v, H, lo, scale, q, resid); /* (resid may be v: read first) */
#endif
    for (; i < H; i++) {
        /* x is in [0, 2**52): the magic number rounds it to an integer
         * (nearest, ties to even); k >= -128 since x >= 0, and k > 127 only
         * when the float32 scale is a little below the step. */
        double x = (v[i] - lo) / scale;
        double k = ((x + 4503599627370496.0) - 4503599627370496.0) - 128.0;
        double prod;
        k = k > 127.0 ? 127.0 : k;
        q[i] = (int8_t)k;
        prod = k * scale;
        resid[i] = v[i] - prod;
    }
    mean = (0.0 + be_pairwise_sum(resid, H)) / (double)H;
    so[0] = (float)scale;
    so[1] = (float)mean;
    return BE_CONV_OK;
}

/* Convert row r of c; `scratch` holds H doubles. Returns a BE_CONV_* outcome. */
BE_NO_CONTRACT
static int be_convert_row(const be_conv *c, Py_ssize_t r, double *scratch) {
    const char *row = c->src + r * c->src_row_bytes;
    const float *so = c->src_scale ? c->src_scale + 2 * r : NULL;
    char *out = c->dst + r * c->dst_row_bytes;
    Py_ssize_t i, H = c->H;
    int sk = c->src_kind;
    switch (c->dst_kind) {
    case BE_I8: {
        double lo, hi, z;
        const double *v;
        if (sk == BE_F32) { /* widened while its extremes are found */
#if BE_MULTIVERSION
            if (be_level >= 1)
                be_extremes_f32_avx2((const float *)row, scratch, H, &lo, &hi, &z);
            else
#endif
                be_extremes(NULL, (const float *)row, scratch, H, &lo, &hi, &z);
            v = scratch;
        } else {
            v = be_conv_widen(c, r, scratch);
            be_extremes(v, NULL, NULL, H, &lo, &hi, &z);
        }
        return be_quantize_row(v, H, lo, hi, z, (int8_t *)out, c->dst_scale + 2 * r, scratch);
    }
    case BE_F64: {
        double *d = (double *)out;
        for (i = 0; i < H; i++) d[i] = be_conv_load(row, sk, so, i);
        return BE_CONV_OK;
    }
    case BE_F32: {
        float *d = (float *)out;
        if (sk == BE_F64) {
            const double *p = (const double *)row;
            for (i = 0; i < H; i++) d[i] = (float)p[i];
        } else if (sk == BE_F16) {
            const uint16_t *p = (const uint16_t *)row;
            for (i = 0; i < H; i++) d[i] = be_h2f(p[i]);
        } else if (sk == BE_BF16) {
            const uint16_t *p = (const uint16_t *)row;
            for (i = 0; i < H; i++) d[i] = be_bf2f(p[i]);
        } else {
            for (i = 0; i < H; i++) d[i] = (float)be_conv_load(row, sk, so, i);
        }
        return BE_CONV_OK;
    }
    case BE_F16: {
        uint16_t *d = (uint16_t *)out;
        if (sk == BE_F64) {
            const double *p = (const double *)row;
            for (i = 0; i < H; i++) d[i] = be_d2h(p[i]);
        } else if (sk == BE_F32) {
            const float *p = (const float *)row;
            for (i = 0; i < H; i++) d[i] = be_f2h(p[i]);
        } else {
            for (i = 0; i < H; i++) d[i] = be_f2h((float)be_conv_load(row, sk, so, i));
        }
        return BE_CONV_OK;
    }
    default: { /* BE_BF16 */
        uint16_t *d = (uint16_t *)out;
        if (sk == BE_F32) {
            const float *p = (const float *)row;
            for (i = 0; i < H; i++) d[i] = be_f2bf(p[i]);
        } else if (sk == BE_F64) {
            const double *p = (const double *)row;
            for (i = 0; i < H; i++) d[i] = be_f2bf((float)p[i]);
        } else {
            for (i = 0; i < H; i++) d[i] = be_f2bf((float)be_conv_load(row, sk, so, i));
        }
        return BE_CONV_OK;
    }
    }
}

#endif
