/* Body of the row kernel, included once per instruction set by be_rows.h with
 * BE_LEVEL (0 baseline, 1 AVX2+FMA+F16C, 2 AVX-512), BE_ARM (1: aarch64
 * NEON, with BE_LEVEL 0), BE_SUFFIX, BE_ATTR, BE_VD and BE_VF defined. Every
 * function here is static and carries the set's target attribute (none under
 * MSVC), so the compiler vectorises it for that set and inlines it into the
 * row function. The AVX2 body spells its hot loops in intrinsics, which MSVC
 * compiles as they are. */

/* a * b + c. With FMA (levels 1 and 2) rounded once, whatever the compiler
   (GCC contracts a plain a * b + c into an FMA, MSVC never does); at the
   x86-64 baseline there is no FMA and nothing is fused. */
#undef BE_MADDF
#undef BE_MADD
#if BE_LEVEL >= 1 && (defined(__GNUC__) || defined(__clang__)) && !BE_MSVC_SHAPE
#define BE_MADDF(a, b, c) __builtin_fmaf((a), (b), (c))
#define BE_MADD(a, b, c)  __builtin_fma((a), (b), (c))
#elif BE_LEVEL >= 1
static BE_ATTR inline float BE_FN(maddf)(float a, float b, float c) {
    return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
static BE_ATTR inline double BE_FN(madd)(double a, double b, double c) {
    return _mm_cvtsd_f64(_mm_fmadd_sd(_mm_set_sd(a), _mm_set_sd(b), _mm_set_sd(c)));
}
#define BE_MADDF(a, b, c) BE_FN(maddf)((a), (b), (c))
#define BE_MADD(a, b, c)  BE_FN(madd)((a), (b), (c))
#else
#define BE_MADDF(a, b, c) ((a) * (b) + (c))
#define BE_MADD(a, b, c)  ((a) * (b) + (c))
#endif

/* One value of a row of `kind` as float32 (`qs`: an int8 row's scale and
   offset). */
static BE_ATTR inline float BE_FN(load1)(int kind, const char *row, const float *qs, Py_ssize_t i) {
    if (kind == BE_F32) return ((const float *)row)[i];
    if (kind == BE_F16) return be_h2f(((const uint16_t *)row)[i]);
    if (kind == BE_BF16) return be_bitsf((uint32_t)((const uint16_t *)row)[i] << 16);
    return BE_MADDF((float)((const int8_t *)row)[i], qs[0], qs[1]);
}

/* Value i of rows[0] + rows[1] + ... (left to right, as NumPy sums the
   terms); `qs`: the first row's int8 scale and offset. */
static BE_ATTR inline float BE_FN(sum1)(const char *const *rows, const int *kinds, const float *qs, int n,
                                        Py_ssize_t i) {
    float x = BE_FN(load1)(kinds[0], rows[0], qs, i);
    if (n > 1) x += BE_FN(load1)(kinds[1], rows[1], NULL, i);
    if (n > 2) x += BE_FN(load1)(kinds[2], rows[2], NULL, i);
    if (n > 3) x += BE_FN(load1)(kinds[3], rows[3], NULL, i);
    return x;
}

#if BE_LEVEL == 1
/* Eight values of a row of `kind` from index i, widened to float32 in
   registers (bfloat16: a 16-bit shift; int8: q * scale + offset, fused). */
static BE_ATTR BE_ALWAYS_INLINE __m256 BE_FN(load8)(int kind, const char *row, const float *qs, Py_ssize_t i) {
    if (kind == BE_F32) return _mm256_loadu_ps((const float *)row + i);
    if (kind == BE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    if (kind == BE_BF16)
        return _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i))), 16));
    /* BE_I8 */
    return _mm256_fmadd_ps(
        _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)((const int8_t *)row + i)))),
        _mm256_set1_ps(qs[0]), _mm256_set1_ps(qs[1]));
}

/* Eight values of rows[0] + rows[1] + ... (left to right, as sum1). */
static BE_ATTR BE_ALWAYS_INLINE __m256 BE_FN(sum8)(const char *const *rows, const int *kinds, const float *qs, int n,
                                                   Py_ssize_t i) {
    __m256 v = BE_FN(load8)(kinds[0], rows[0], qs, i);
    if (n > 1) v = _mm256_add_ps(v, BE_FN(load8)(kinds[1], rows[1], NULL, i));
    if (n > 2) v = _mm256_add_ps(v, BE_FN(load8)(kinds[2], rows[2], NULL, i));
    if (n > 3) v = _mm256_add_ps(v, BE_FN(load8)(kinds[3], rows[3], NULL, i));
    return v;
}
#endif

#if BE_LEVEL >= 2
/* Sixteen values of a row of `kind`, widened to float32 in registers. */
static BE_ATTR BE_ALWAYS_INLINE __m512 BE_FN(load16)(int kind, const char *row, const float *qs, Py_ssize_t i) {
    if (kind == BE_F32) return _mm512_loadu_ps((const float *)row + i);
    if (kind == BE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)));
    if (kind == BE_BF16)
        return _mm512_castsi512_ps(_mm512_slli_epi32(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i))), 16));
    /* BE_I8 */
    return _mm512_fmadd_ps(
        _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)((const int8_t *)row + i)))),
        _mm512_set1_ps(qs[0]), _mm512_set1_ps(qs[1]));
}

/* Sixteen values of rows[0] + rows[1] + ... (left to right, as sum1). */
static BE_ATTR BE_ALWAYS_INLINE __m512 BE_FN(sum16)(const char *const *rows, const int *kinds, const float *qs, int n,
                                                    Py_ssize_t i) {
    __m512 v = BE_FN(load16)(kinds[0], rows[0], qs, i);
    if (n > 1) v = _mm512_add_ps(v, BE_FN(load16)(kinds[1], rows[1], NULL, i));
    if (n > 2) v = _mm512_add_ps(v, BE_FN(load16)(kinds[2], rows[2], NULL, i));
    if (n > 3) v = _mm512_add_ps(v, BE_FN(load16)(kinds[3], rows[3], NULL, i));
    return v;
}
#endif

/* o = rows[0] + rows[1] + ... (left to right), each row read in its stored
   dtype and widened in registers as it is summed: no row is copied first. */
static BE_ATTR void BE_FN(sumrows32)(const char *const *rows, const int *kinds, const float *qs, int n, float *o,
                                     Py_ssize_t H) {
    Py_ssize_t i = 0;
#if BE_LEVEL >= 2
    for (; i + 16 <= H; i += 16) _mm512_storeu_ps(o + i, BE_FN(sum16)(rows, kinds, qs, n, i));
#elif BE_LEVEL == 1
    for (; i + 8 <= H; i += 8) _mm256_storeu_ps(o + i, BE_FN(sum8)(rows, kinds, qs, n, i));
#elif BE_ARM
    for (; i + 8 <= H; i += 8) {
        float32x4_t u, v, u1, v1;
        int r;
        be_neon_load8(kinds[0], rows[0], qs, i, &u, &v);
        for (r = 1; r < n; r++) {
            be_neon_load8(kinds[r], rows[r], NULL, i, &u1, &v1);
            u = vaddq_f32(u, u1);
            v = vaddq_f32(v, v1);
        }
        vst1q_f32(o + i, u);
        vst1q_f32(o + i + 4, v);
    }
#else
    /* Sixteen values at a time, summed in a block the compiler keeps in
       registers; each kind's loop is one the compiler vectorises. */
    for (; i + 16 <= H; i += 16) {
        float x[16];
        int r, e;
        for (r = 0; r < n; r++) {
            const char *row = rows[r];
            float y[16];
            switch (kinds[r]) {
            case BE_F32:
                memcpy(y, (const float *)row + i, sizeof y);
                break;
            case BE_BF16: {
                const uint16_t *h = (const uint16_t *)row + i;
                uint32_t u[16];
                for (e = 0; e < 16; e++) u[e] = (uint32_t)h[e] << 16;
                memcpy(y, u, sizeof y);
                break;
            }
            case BE_F16: {
                const uint16_t *h = (const uint16_t *)row + i;
                for (e = 0; e < 16; e++) y[e] = be_h2f(h[e]);
                break;
            }
            default: { /* BE_I8 (only the token row) */
                const int8_t *q = (const int8_t *)row + i;
                const float scale = qs[0], offset = qs[1];
                for (e = 0; e < 16; e++) y[e] = BE_MADDF((float)q[e], scale, offset);
                break;
            }
            }
            if (r == 0)
                memcpy(x, y, sizeof x);
            else
                for (e = 0; e < 16; e++) x[e] += y[e];
        }
        memcpy(o + i, x, sizeof x);
    }
#endif
    for (; i < H; i++) o[i] = BE_FN(sum1)(rows, kinds, qs, n, i);
}

/* A row of `kind` as float64: the row itself when it is float64, else
   widened into buf. */
static BE_ATTR inline const double *BE_FN(load64)(int kind, const char *row, const float *qs, Py_ssize_t H,
                                                  double *buf) {
    Py_ssize_t i;
    if (kind == BE_F64) return (const double *)row;
    if (kind == BE_F32) {
        const float *f = (const float *)row;
        for (i = 0; i < H; i++) buf[i] = (double)f[i];
    } else if (kind == BE_F16) {
        const uint16_t *h = (const uint16_t *)row;
        for (i = 0; i < H; i++) buf[i] = (double)be_h2f(h[i]);
    } else if (kind == BE_BF16) {
        const uint16_t *h = (const uint16_t *)row;
        for (i = 0; i < H; i++) buf[i] = (double)be_bitsf((uint32_t)h[i] << 16);
    } else {
        const int8_t *q = (const int8_t *)row;
        const double scale = qs[0], offset = qs[1];
        for (i = 0; i < H; i++) buf[i] = BE_MADD((double)q[i], scale, offset);
    }
    return buf;
}

static BE_ATTR inline void BE_FN(sum64)(const double *const *s, int n, double *o, Py_ssize_t H) {
    Py_ssize_t i;
    const double *a = s[0], *b = s[1], *c = s[2], *d = s[3];
    switch (n) {
    case 1:
        memcpy(o, a, (size_t)H * sizeof(double));
        break;
    case 2:
        for (i = 0; i < H; i++) o[i] = a[i] + b[i];
        break;
    case 3:
        for (i = 0; i < H; i++) o[i] = a[i] + b[i] + c[i];
        break;
    default:
        for (i = 0; i < H; i++) o[i] = a[i] + b[i] + c[i] + d[i];
        break;
    }
}

/* The end of a float32 LayerNorm row: mean and variance from the float64
   sums of (x - k) and (x - k)**2, then o = (x - mean) * rstd * w (+ b). */
static BE_ATTR inline void BE_FN(ln_finish32)(const float *x, Py_ssize_t H, double k, double s1, double s2,
                                              const float *w, const float *b, double eps, float *o) {
    double m = s1 / (double)H, d = s2 / (double)H;
    float mean, rstd;
    Py_ssize_t i = 0;
    d -= m * m; /* NaN and inf propagate; only a rounding-negative becomes 0 */
    d = d < 0.0 ? 0.0 : d;
    mean = (float)(k + m);
    rstd = (float)(1.0 / sqrt(d + eps));
#if BE_ARM
    i = be_neon_ln_apply(x, H, mean, rstd, w, b, o);
#endif
#if BE_LEVEL == 1
    {
        const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd);
        if (b != NULL)
            for (; i + 8 <= H; i += 8) {
                __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
                _mm256_storeu_ps(o + i, _mm256_fmadd_ps(v, _mm256_loadu_ps(w + i), _mm256_loadu_ps(b + i)));
            }
        else
            for (; i + 8 <= H; i += 8) {
                __m256 v = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm), vr);
                _mm256_storeu_ps(o + i, _mm256_mul_ps(v, _mm256_loadu_ps(w + i)));
            }
    }
#endif
    if (b != NULL)
        for (; i < H; i++) o[i] = BE_MADDF((x[i] - mean) * rstd, w[i], b[i]);
    else
        for (; i < H; i++) o[i] = (x[i] - mean) * rstd * w[i];
}

/* o = LayerNorm(x) * w (+ b), float32 data, statistics in float64. Values
   are shifted by the row's first element, which keeps the one-pass variance
   accurate when the mean is large. */
static BE_ATTR inline void BE_FN(ln32)(const float *x, Py_ssize_t H, const float *w, const float *b, double eps,
                                       float *o) {
    double k = x[0], d, s1 = 0.0, s2 = 0.0;
    Py_ssize_t i = 0;
    /* (AVX-512 and NEON rows never come here: they take sumln32.) */
#if BE_LEVEL == 1
    {
        const __m256d vk = _mm256_set1_pd(k);
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, q0 = a0, q1 = a0, q2 = a0, q3 = a0;
        double lanes[4];
        int j;
        for (; i + 16 <= H; i += 16) {
            __m256d x0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i)), vk);
            __m256d x1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), vk);
            __m256d x2 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 8)), vk);
            __m256d x3 = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 12)), vk);
            a0 = _mm256_add_pd(a0, x0);
            a1 = _mm256_add_pd(a1, x1);
            a2 = _mm256_add_pd(a2, x2);
            a3 = _mm256_add_pd(a3, x3);
            q0 = _mm256_fmadd_pd(x0, x0, q0);
            q1 = _mm256_fmadd_pd(x1, x1, q1);
            q2 = _mm256_fmadd_pd(x2, x2, q2);
            q3 = _mm256_fmadd_pd(x3, x3, q3);
        }
        _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
        for (j = 0; j < 4; j++) s1 += lanes[j];
        _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(q0, q1), _mm256_add_pd(q2, q3)));
        for (j = 0; j < 4; j++) s2 += lanes[j];
    }
#elif BE_VECTOR_EXT
    {
        /* Four independent chains of float64 lanes, each widened once. */
        BE_VD z = {0}, vk = z + k, a0 = z, a1 = z, a2 = z, a3 = z;
        BE_VD q0 = z, q1 = z, q2 = z, q3 = z, x0, x1, x2, x3;
        BE_VF f0, f1, f2, f3;
        const Py_ssize_t L = (Py_ssize_t)(sizeof(BE_VF) / sizeof(float));
        int j;
        for (; i + 4 * L <= H; i += 4 * L) {
            memcpy(&f0, x + i, sizeof f0);
            memcpy(&f1, x + i + L, sizeof f1);
            memcpy(&f2, x + i + 2 * L, sizeof f2);
            memcpy(&f3, x + i + 3 * L, sizeof f3);
            x0 = __builtin_convertvector(f0, BE_VD) - vk;
            x1 = __builtin_convertvector(f1, BE_VD) - vk;
            x2 = __builtin_convertvector(f2, BE_VD) - vk;
            x3 = __builtin_convertvector(f3, BE_VD) - vk;
            a0 += x0;
            a1 += x1;
            a2 += x2;
            a3 += x3;
            q0 += x0 * x0;
            q1 += x1 * x1;
            q2 += x2 * x2;
            q3 += x3 * x3;
        }
        a0 = (a0 + a1) + (a2 + a3);
        q0 = (q0 + q1) + (q2 + q3);
        for (j = 0; j < L; j++) {
            s1 += a0[j];
            s2 += q0[j];
        }
    }
#else
    {
        /* Without vector types (MSVC's baseline): the same sums as the vector
           code above, lane by lane, so that the bits are the same. */
        double a[4][4] = {{0}}, q[4][4] = {{0}};
        int c, j;
#if BE_LEVEL != 0
#error "only the baseline body is compiled without vector extensions"
#endif
        for (; i + 16 <= H; i += 16)
            for (c = 0; c < 4; c++)
                for (j = 0; j < 4; j++) {
                    d = (double)x[i + 4 * c + j] - k;
                    a[c][j] += d;
                    q[c][j] += d * d;
                }
        for (j = 0; j < 4; j++) {
            s1 += (a[0][j] + a[1][j]) + (a[2][j] + a[3][j]);
            s2 += (q[0][j] + q[1][j]) + (q[2][j] + q[3][j]);
        }
    }
#endif
    for (; i < H; i++) {
        d = (double)x[i] - k;
        s1 += d;
        s2 = BE_MADD(d, d, s2);
    }
    BE_FN(ln_finish32)(x, H, k, s1, s2, w, b, eps, o);
}

#if BE_LEVEL >= 1
/* sumrows32 and ln32 in one pass: the rows are widened in registers and
   summed into buf while the statistics accumulate (the arithmetic of
   sumrows32 then ln32, in the same order, so the same bits; two passes over
   the row fewer). `qs`: the first row's int8 scale and offset. Always
   inlined into the callers below, which fix the kinds and the number of
   rows for the common tables, so that the loop holds no test of a kind. */
static BE_ATTR BE_ALWAYS_INLINE void BE_FN(sumln32_k)(const char *const *rows, const int *kinds, const float *qs, int n,
                                                      float *buf, Py_ssize_t H, const float *w, const float *b,
                                                      double eps, float *o) {
    double k, d, s1 = 0.0, s2 = 0.0;
    Py_ssize_t i = 0;
    k = BE_FN(sum1)(rows, kinds, qs, n, 0);
#if BE_LEVEL >= 2
    {
        const __m512d vk = _mm512_set1_pd(k);
        __m512d a0 = _mm512_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, q0 = a0, q1 = a0, q2 = a0, q3 = a0;
        for (; i + 32 <= H; i += 32) {
            __m512 u = BE_FN(sum16)(rows, kinds, qs, n, i), v = BE_FN(sum16)(rows, kinds, qs, n, i + 16);
            __m512d x0d, x1d, x2d, x3d;
            _mm512_storeu_ps(buf + i, u);
            _mm512_storeu_ps(buf + i + 16, v);
            x0d = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(u)), vk);
            x1d = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(u, 1)), vk);
            x2d = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), vk);
            x3d = _mm512_sub_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), vk);
            a0 = _mm512_add_pd(a0, x0d);
            a1 = _mm512_add_pd(a1, x1d);
            a2 = _mm512_add_pd(a2, x2d);
            a3 = _mm512_add_pd(a3, x3d);
            q0 = _mm512_fmadd_pd(x0d, x0d, q0);
            q1 = _mm512_fmadd_pd(x1d, x1d, q1);
            q2 = _mm512_fmadd_pd(x2d, x2d, q2);
            q3 = _mm512_fmadd_pd(x3d, x3d, q3);
        }
        s1 = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
        s2 = _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(q0, q1), _mm512_add_pd(q2, q3)));
    }
#else
    {
        /* ln32's four chains of float64 lanes, sixteen values per step. */
        const __m256d vk = _mm256_set1_pd(k);
        __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0, q0 = a0, q1 = a0, q2 = a0, q3 = a0;
        double lanes[4];
        int j;
        for (; i + 16 <= H; i += 16) {
            __m256 u = BE_FN(sum8)(rows, kinds, qs, n, i), v = BE_FN(sum8)(rows, kinds, qs, n, i + 8);
            __m256d x0, x1, x2, x3;
            _mm256_storeu_ps(buf + i, u);
            _mm256_storeu_ps(buf + i + 8, v);
            x0 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(u)), vk);
            x1 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(u, 1)), vk);
            x2 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), vk);
            x3 = _mm256_sub_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), vk);
            a0 = _mm256_add_pd(a0, x0);
            a1 = _mm256_add_pd(a1, x1);
            a2 = _mm256_add_pd(a2, x2);
            a3 = _mm256_add_pd(a3, x3);
            q0 = _mm256_fmadd_pd(x0, x0, q0);
            q1 = _mm256_fmadd_pd(x1, x1, q1);
            q2 = _mm256_fmadd_pd(x2, x2, q2);
            q3 = _mm256_fmadd_pd(x3, x3, q3);
        }
        _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(a0, a1), _mm256_add_pd(a2, a3)));
        for (j = 0; j < 4; j++) s1 += lanes[j];
        _mm256_storeu_pd(lanes, _mm256_add_pd(_mm256_add_pd(q0, q1), _mm256_add_pd(q2, q3)));
        for (j = 0; j < 4; j++) s2 += lanes[j];
    }
#endif
    for (; i < H; i++) {
        float x = BE_FN(sum1)(rows, kinds, qs, n, i);
        buf[i] = x;
        d = (double)x - k;
        s1 += d;
        s2 = BE_MADD(d, d, s2);
    }
    BE_FN(ln_finish32)(buf, H, k, s1, s2, w, b, eps, o);
}

/* sumln32_k with the token row's kind `k0`, every other row's `kr` and n rows fixed. */
#define BE_SUMLN_CASE(name, k0, kr, nr)                                                                                \
    static BE_ATTR void BE_FN(name)(const char *const *rows, const float *qs, float *buf, Py_ssize_t H,                \
                                    const float *w, const float *b, double eps, float *o) {                            \
        const int kk[4] = {k0, kr, kr, kr};                                                                            \
        BE_FN(sumln32_k)(rows, kk, qs, nr, buf, H, w, b, eps, o);                                                      \
    }
BE_SUMLN_CASE(sumln_f32_2, BE_F32, BE_F32, 2)
BE_SUMLN_CASE(sumln_f32_3, BE_F32, BE_F32, 3)
BE_SUMLN_CASE(sumln_bf16_2, BE_BF16, BE_BF16, 2)
BE_SUMLN_CASE(sumln_bf16_3, BE_BF16, BE_BF16, 3)
BE_SUMLN_CASE(sumln_i8_2, BE_I8, BE_F32, 2)
BE_SUMLN_CASE(sumln_i8_3, BE_I8, BE_F32, 3)
/* A narrow token table beside tables of another dtype: a bfloat16 token
   table with float32 position and segment tables, an int8 one (quantised
   from a bfloat16 checkpoint) with bfloat16 ones. */
BE_SUMLN_CASE(sumln_bf16_f32_2, BE_BF16, BE_F32, 2)
BE_SUMLN_CASE(sumln_bf16_f32_3, BE_BF16, BE_F32, 3)
BE_SUMLN_CASE(sumln_i8_bf16_2, BE_I8, BE_BF16, 2)
BE_SUMLN_CASE(sumln_i8_bf16_3, BE_I8, BE_BF16, 3)
#undef BE_SUMLN_CASE

/* The rows of `kinds` summed into buf and layer-normalised into o. */
static BE_ATTR void BE_FN(sumln32)(const char *const *rows, const int *kinds, const float *qs, int n, float *buf,
                                   Py_ssize_t H, const float *w, const float *b, double eps, float *o) {
    const int kr = n > 1 ? kinds[1] : BE_F32;
    if ((n == 2 || n == 3) && (n == 2 || kinds[2] == kr)) {
        if (kinds[0] == BE_F32 && kr == BE_F32) {
            (n == 2 ? BE_FN(sumln_f32_2) : BE_FN(sumln_f32_3))(rows, qs, buf, H, w, b, eps, o);
            return;
        }
        if (kinds[0] == BE_BF16 && kr == BE_BF16) {
            (n == 2 ? BE_FN(sumln_bf16_2) : BE_FN(sumln_bf16_3))(rows, qs, buf, H, w, b, eps, o);
            return;
        }
        if (kinds[0] == BE_I8 && kr == BE_F32) {
            (n == 2 ? BE_FN(sumln_i8_2) : BE_FN(sumln_i8_3))(rows, qs, buf, H, w, b, eps, o);
            return;
        }
        if (kinds[0] == BE_BF16 && kr == BE_F32) {
            (n == 2 ? BE_FN(sumln_bf16_f32_2) : BE_FN(sumln_bf16_f32_3))(rows, qs, buf, H, w, b, eps, o);
            return;
        }
        if (kinds[0] == BE_I8 && kr == BE_BF16) {
            (n == 2 ? BE_FN(sumln_i8_bf16_2) : BE_FN(sumln_i8_bf16_3))(rows, qs, buf, H, w, b, eps, o);
            return;
        }
    }
    BE_FN(sumln32_k)(rows, kinds, qs, n, buf, H, w, b, eps, o);
}
#endif
#if BE_ARM
/* The NEON counterpart of the AVX-512 sumln32 (same arguments, same
   arithmetic): the rows summed into buf with the statistics, then o. */
static BE_ATTR void BE_FN(sumln32)(const char *const *rows, const int *kinds, const float *qs, int n, float *buf,
                                   Py_ssize_t H, const float *w, const float *b, double eps, float *o) {
    double k, s1, s2;
    be_neon_sumstats(rows, kinds, qs, n, buf, H, &k, &s1, &s2);
    BE_FN(ln_finish32)(buf, H, k, s1, s2, w, b, eps, o);
}
#endif

static BE_ATTR inline void BE_FN(ln64)(const double *x, Py_ssize_t H, const double *w, const double *b, double eps,
                                       double *o) {
    double mean, var, rstd;
    Py_ssize_t i;
    be_row_stats(x, H, &mean, &var);
    rstd = 1.0 / sqrt(var + eps);
    i = 0;
#if BE_LEVEL == 1
    {
        const __m256d vm = _mm256_set1_pd(mean), vr = _mm256_set1_pd(rstd);
        if (b != NULL)
            for (; i + 4 <= H; i += 4) {
                __m256d v = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(x + i), vm), vr);
                _mm256_storeu_pd(o + i, _mm256_fmadd_pd(v, _mm256_loadu_pd(w + i), _mm256_loadu_pd(b + i)));
            }
        else
            for (; i + 4 <= H; i += 4) {
                __m256d v = _mm256_mul_pd(_mm256_sub_pd(_mm256_loadu_pd(x + i), vm), vr);
                _mm256_storeu_pd(o + i, _mm256_mul_pd(v, _mm256_loadu_pd(w + i)));
            }
    }
#endif
    if (b != NULL)
        for (; i < H; i++) o[i] = BE_MADD((x[i] - mean) * rstd, w[i], b[i]);
    else
        for (; i < H; i++) o[i] = (x[i] - mean) * rstd * w[i];
}

/* Write a float32 row as `kind` (float32, float16 or bfloat16). */
static BE_ATTR inline void BE_FN(store32)(int kind, const float *x, char *dst, Py_ssize_t H) {
    Py_ssize_t i = 0;
    if (kind == BE_F32) {
        memcpy(dst, x, (size_t)H * sizeof(float));
    } else if (kind == BE_F16) {
        uint16_t *h = (uint16_t *)dst;
#if BE_LEVEL >= 2
        for (; i + 16 <= H; i += 16)
            _mm256_storeu_si256((__m256i *)(h + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
#if BE_LEVEL >= 1
        for (; i + 8 <= H; i += 8)
            _mm_storeu_si128((__m128i *)(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
#endif
#if BE_ARM
        i = be_neon_f2h(x, h, H);
#endif
        for (; i < H; i++) h[i] = be_f2h(x[i]);
    } else {
        uint16_t *h = (uint16_t *)dst;
        for (; i < H; i++) h[i] = be_f2bf(x[i]);
    }
}

/* Write a float64 row as `kind`; narrower kinds go through float32. */
static BE_ATTR inline void BE_FN(store64)(int kind, const double *x, char *dst, Py_ssize_t H, float *tmp) {
    Py_ssize_t i;
    if (kind == BE_F64) {
        memcpy(dst, x, (size_t)H * sizeof(double));
    } else if (kind == BE_F32) {
        float *f = (float *)dst;
        for (i = 0; i < H; i++) f[i] = (float)x[i];
    } else {
        for (i = 0; i < H; i++) tmp[i] = (float)x[i];
        BE_FN(store32)(kind, tmp, dst, H);
    }
}

static BE_ATTR void BE_FN(be_row)(const be_job *j, Py_ssize_t r, double *scratch) {
    const Py_ssize_t S = j->S, H = j->H, slot = j->slot;
    const Py_ssize_t bi = r / S, s = r - bi * S;
    const size_t out_bytes = (size_t)j->out_row_bytes;
    char *dst = j->out + r * j->out_row_bytes;
    /* Streamed rows are finished in the last scratch slot, then copied. */
    char *fin = j->stream ? (char *)(scratch + (BE_SCRATCH_SLOTS - 1) * slot) : dst;
    Py_ssize_t t, id;
    const float *qs;
    int n = 0, k;

    if (j->keep != NULL && !j->keep[r]) {
        memset(dst, 0, out_bytes);
        return;
    }
    t = be_tok_row(j, r);
    if (t < 0) { /* an id a trimmed table does not keep: never read, reported by the caller */
        if (j->unmapped != NULL) be_flag_raise(j->unmapped);
        memset(dst, 0, out_bytes);
        return;
    }
    qs = j->tok_scale != NULL ? j->tok_scale + 2 * t : NULL;
    /* Start fetching the whole next token row (a random row of a big table:
       the hardware prefetcher cannot guess it) while this one is computed. */
    if (s + BE_PREFETCH_AHEAD < S && (id = be_tok_row(j, r + BE_PREFETCH_AHEAD)) >= 0)
        be_prefetch_row(j->tok + id * j->tok_row_bytes, (size_t)j->tok_row_bytes);
    /* A trimmed table's map is a second random read per row (and, mapped
       from a file, a second page walk): fetch its entry further ahead, so
       that the row prefetch above finds it. */
    if (j->tok_map != NULL && s + BE_MAP_PREFETCH_AHEAD < S)
        be_prefetch_row(j->tok_map + be_id(j->tok_ids, j->id64, r + BE_MAP_PREFETCH_AHEAD), 1);
    if (!j->wide) {
        const char *rows[4];
        int kinds[4];
        rows[n] = j->tok + t * j->tok_row_bytes;
        kinds[n++] = j->tok_kind;
        for (k = 0; k < j->nterms; k++) {
            const be_term *m = &j->terms[k];
            id = m->ids != NULL ? be_id(m->ids, j->id64, bi * m->ids_bstride + s) : (m->arange ? m->offset + s : 0);
            rows[n] = m->data + id * m->row_bytes;
            kinds[n++] = m->kind;
        }
        /* Every row is read in its stored dtype and widened in registers
           while it is summed: no row is copied first. */
        if (j->ln) {
            float *sum = (float *)scratch + 8 * slot;
            float *res = j->out_kind == BE_F32 ? (float *)fin : sum;
#if BE_LEVEL >= 1 || BE_ARM
            BE_FN(sumln32)(rows, kinds, qs, n, sum, H, j->w32, j->b32, j->eps, res);
#else
            const float *x = sum;
            if (n == 1 && kinds[0] == BE_F32)
                x = (const float *)rows[0];
            else
                BE_FN(sumrows32)(rows, kinds, qs, n, sum, H);
            BE_FN(ln32)(x, H, j->w32, j->b32, j->eps, res);
#endif
            if (j->out_kind != BE_F32) BE_FN(store32)(j->out_kind, sum, fin, H);
        } else if (j->out_kind == BE_F32) {
            BE_FN(sumrows32)(rows, kinds, qs, n, (float *)fin, H);
        } else {
            float *sum = (float *)scratch + 8 * slot;
            BE_FN(sumrows32)(rows, kinds, qs, n, sum, H);
            BE_FN(store32)(j->out_kind, sum, fin, H);
        }
    } else {
        double *d = scratch;
        const double *src[4] = {NULL, NULL, NULL, NULL};
        double *sum = d + 4 * slot;
        const double *acc;
        src[n++] = BE_FN(load64)(j->tok_kind, j->tok + t * j->tok_row_bytes, qs, H, d);
        for (k = 0; k < j->nterms; k++) {
            const be_term *m = &j->terms[k];
            id = m->ids != NULL ? be_id(m->ids, j->id64, bi * m->ids_bstride + s) : (m->arange ? m->offset + s : 0);
            src[n++] = BE_FN(load64)(m->kind, m->data + id * m->row_bytes, NULL, H, d + (1 + k) * slot);
        }
        if (j->ln) {
            double *o = j->out_kind == BE_F64 ? (double *)fin : d; /* d: free once summed */
            if (n > 1) BE_FN(sum64)(src, n, sum, H);
            acc = n > 1 ? sum : src[0];
            BE_FN(ln64)(acc, H, j->w64, j->b64, j->eps, o);
            if (j->out_kind != BE_F64) BE_FN(store64)(j->out_kind, o, fin, H, (float *)sum);
        } else if (j->out_kind == BE_F64) {
            BE_FN(sum64)(src, n, (double *)fin, H);
        } else {
            if (n > 1) BE_FN(sum64)(src, n, sum, H);
            acc = n > 1 ? sum : src[0];
            BE_FN(store64)(j->out_kind, acc, fin, H, (float *)(d + slot));
        }
    }
    if (j->stream) be_stream_copy(dst, fin, out_bytes);
#if BE_LEVEL == 1 && defined(_MSC_VER) && !defined(__clang__)
    _mm256_zeroupper(); /* MSVC's SSE2 code runs next: no AVX-SSE transition stall */
#endif
}
