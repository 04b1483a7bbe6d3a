/* NEON (Advanced SIMD) pieces of the aarch64 row kernel, included by be_rows.h
 * when compiling for aarch64 with GCC or clang. Every aarch64 CPU has NEON,
 * so the choice is made at build time; BERTEMBED_ISA=baseline still selects
 * the portable body at run time.
 *
 * - float16 <-> float32 with the FCVTL / FCVTN instructions (vcvt_*): exact
 *   widening, and narrowing that rounds to nearest, ties to even, under the
 *   FPCR that Linux gives every process (round to nearest, no flush to zero,
 *   IEEE half precision), so the results equal be_h2f / be_f2h bit for bit
 *   on every non-NaN value. NaN stays NaN (quiet; the top payload bits are
 *   kept, as be_f2h does; a signalling float16 NaN widens to a quiet one);
 * - the fused row sum and LayerNorm statistics (be_neon_sumstats): the rows
 *   of every term widened to float32 eight values at a time, summed left to
 *   right (as sumrows32), stored, and the float64 sums of (x - k) and
 *   (x - k)**2 accumulated in the same pass (as ln32 does in its own pass).
 */
#ifndef BERTEMBED_NEON_H
#define BERTEMBED_NEON_H

#include <arm_neon.h>

#define BE_NEON_INLINE static inline __attribute__((always_inline))
/* Two iterations per loop test (fewer instructions per value). */
#if defined(__clang__)
#define BE_NEON_UNROLL2 _Pragma("clang loop unroll_count(2)")
#else
#define BE_NEON_UNROLL2 _Pragma("GCC unroll 2")
#endif

/* f[0:n] -> h[0:n] for the largest multiple of 8 below n; returns it. */
static inline Py_ssize_t be_neon_f2h(const float *f, uint16_t *h, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        float16x8_t v = vcvt_high_f16_f32(vcvt_f16_f32(vld1q_f32(f + i)), vld1q_f32(f + i + 4));
        vst1q_u16(h + i, vreinterpretq_u16_f16(v));
    }
    return i;
}

/* The end of LayerNorm: o = (x - mean) * rstd * w (+ b) for the largest
 * multiple of 8 below n (returned), with the same operations as the
 * portable loop (subtract, multiply, multiply-add). Pointer steps, so that
 * the compiler pairs the loads and stores (LDP/STP). */
static inline Py_ssize_t be_neon_ln_apply(const float *x, Py_ssize_t n, float mean, float rstd, const float *w,
                                          const float *b, float *o) {
    const float32x4_t vm = vdupq_n_f32(mean), vr = vdupq_n_f32(rstd);
    const Py_ssize_t m = n & ~(Py_ssize_t)7;
    const float *const end = x + m;
    if (b != NULL) {
        BE_NEON_UNROLL2
        for (; x < end; x += 8, w += 8, b += 8, o += 8) {
            float32x4_t x0 = vld1q_f32(x), x1 = vld1q_f32(x + 4);
            x0 = vfmaq_f32(vld1q_f32(b), vmulq_f32(vsubq_f32(x0, vm), vr), vld1q_f32(w));
            x1 = vfmaq_f32(vld1q_f32(b + 4), vmulq_f32(vsubq_f32(x1, vm), vr), vld1q_f32(w + 4));
            vst1q_f32(o, x0);
            vst1q_f32(o + 4, x1);
        }
    } else {
        BE_NEON_UNROLL2
        for (; x < end; x += 8, w += 8, o += 8) {
            float32x4_t x0 = vld1q_f32(x), x1 = vld1q_f32(x + 4);
            vst1q_f32(o, vmulq_f32(vmulq_f32(vsubq_f32(x0, vm), vr), vld1q_f32(w)));
            vst1q_f32(o + 4, vmulq_f32(vmulq_f32(vsubq_f32(x1, vm), vr), vld1q_f32(w + 4)));
        }
    }
    return m;
}

/* Eight values of a row of `kind` from index i, widened to float32. */
BE_NEON_INLINE void be_neon_load8(int kind, const char *row, const float *qs, Py_ssize_t i, float32x4_t *lo,
                                  float32x4_t *hi) {
    if (kind == BE_F32) {
        const float *f = (const float *)row + i;
        *lo = vld1q_f32(f);
        *hi = vld1q_f32(f + 4);
    } else if (kind == BE_F16) {
        float16x8_t v = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)row + i));
        *lo = vcvt_f32_f16(vget_low_f16(v));
        *hi = vcvt_high_f32_f16(v);
    } else if (kind == BE_BF16) {
        uint16x8_t v = vld1q_u16((const uint16_t *)row + i);
        *lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(v), 16));
        *hi = vreinterpretq_f32_u32(vshll_high_n_u16(v, 16));
    } else { /* BE_I8: q * scale + offset */
        int16x8_t q = vmovl_s8(vld1_s8((const int8_t *)row + i));
        float32x4_t off = vdupq_n_f32(qs[1]);
        *lo = vfmaq_n_f32(off, vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), qs[0]);
        *hi = vfmaq_n_f32(off, vcvtq_f32_s32(vmovl_high_s16(q)), qs[0]);
    }
}

/* One value of a row of `kind` (the tail of a row). */
BE_NEON_INLINE float be_neon_load1(int kind, const char *row, const float *qs, Py_ssize_t i) {
    if (kind == BE_F32) return ((const float *)row)[i];
    if (kind == BE_F16) return be_h2f(((const uint16_t *)row)[i]);
    if (kind == BE_BF16) return be_bitsf((uint32_t)((const uint16_t *)row)[i] << 16);
    return (float)((const int8_t *)row)[i] * qs[0] + qs[1];
}

/* rows[0] + rows[1] + ... into buf, and the shifted float64 sums of the
 * result: k = buf[0], s1 = sum(buf - k), s2 = sum((buf - k)**2). `kind`
 * (>= 0) and `n` (> 0) are compile-time constants in the specialised
 * callers below; kind < 0 or n == 0 reads them from `kinds` / `nrows`. */
BE_NEON_INLINE void be_neon_sumstats_k(const char *const *rows, const int *kinds, const float *qs, int nrows, int kind0,
                                       int kind, int n, float *buf, Py_ssize_t H, double *k_out, double *s1_out,
                                       double *s2_out) {
    const int nr = n > 0 ? n : nrows;
    float x;
    double k, d, s1, s2;
    Py_ssize_t i = 0;
    int r;
#define BE_K(r) (kind >= 0 ? ((r) == 0 && kind0 >= 0 ? kind0 : kind) : kinds[r])
    x = be_neon_load1(BE_K(0), rows[0], qs, 0);
    for (r = 1; r < nr; r++) x += be_neon_load1(BE_K(r), rows[r], NULL, 0);
    k = x;
    {
        const float64x2_t vk = vdupq_n_f64(k);
        float64x2_t a0 = vdupq_n_f64(0.0), a1 = a0, a2 = a0, a3 = a0;
        float64x2_t q0 = a0, q1 = a0, q2 = a0, q3 = a0;
        BE_NEON_UNROLL2
        for (; i + 8 <= H; i += 8) {
            float32x4_t u, v, u1, v1;
            float64x2_t x0, x1, x2, x3;
            be_neon_load8(BE_K(0), rows[0], qs, i, &u, &v);
            for (r = 1; r < nr; r++) {
                be_neon_load8(BE_K(r), rows[r], NULL, i, &u1, &v1);
                u = vaddq_f32(u, u1);
                v = vaddq_f32(v, v1);
            }
            vst1q_f32(buf + i, u);
            vst1q_f32(buf + i + 4, v);
            x0 = vsubq_f64(vcvt_f64_f32(vget_low_f32(u)), vk);
            x1 = vsubq_f64(vcvt_high_f64_f32(u), vk);
            x2 = vsubq_f64(vcvt_f64_f32(vget_low_f32(v)), vk);
            x3 = vsubq_f64(vcvt_high_f64_f32(v), vk);
            a0 = vaddq_f64(a0, x0);
            a1 = vaddq_f64(a1, x1);
            a2 = vaddq_f64(a2, x2);
            a3 = vaddq_f64(a3, x3);
            q0 = vfmaq_f64(q0, x0, x0);
            q1 = vfmaq_f64(q1, x1, x1);
            q2 = vfmaq_f64(q2, x2, x2);
            q3 = vfmaq_f64(q3, x3, x3);
        }
        s1 = vaddvq_f64(vaddq_f64(vaddq_f64(a0, a1), vaddq_f64(a2, a3)));
        s2 = vaddvq_f64(vaddq_f64(vaddq_f64(q0, q1), vaddq_f64(q2, q3)));
    }
    for (; i < H; i++) {
        x = be_neon_load1(BE_K(0), rows[0], qs, i);
        for (r = 1; r < nr; r++) x += be_neon_load1(BE_K(r), rows[r], NULL, i);
        buf[i] = x;
        d = (double)x - k;
        s1 += d;
        s2 += d * d;
    }
#undef BE_K
    *k_out = k;
    *s1_out = s1;
    *s2_out = s2;
}

/* be_neon_sumstats_k, specialised for the common cases: every table float32,
 * float16 or bfloat16, or an int8 token table with float32 others, with two
 * or three terms (token + position [+ segment]). */
static void be_neon_sumstats(const char *const *rows, const int *kinds, const float *qs, int n, float *buf,
                             Py_ssize_t H, double *k, double *s1, double *s2) {
    int same = 1, r;
    for (r = 2; r < n; r++) same &= kinds[r] == kinds[1];
    if (same && (n == 2 || n == 3)) {
        const int k0 = kinds[0], kr = kinds[1];
#define BE_NEON_CASE(a, b)                                                                                             \
    if (k0 == (a) && kr == (b)) {                                                                                      \
        if (n == 3)                                                                                                    \
            be_neon_sumstats_k(rows, kinds, qs, n, a, b, 3, buf, H, k, s1, s2);                                        \
        else                                                                                                           \
            be_neon_sumstats_k(rows, kinds, qs, n, a, b, 2, buf, H, k, s1, s2);                                        \
        return;                                                                                                        \
    }
        BE_NEON_CASE(BE_F32, BE_F32)
        BE_NEON_CASE(BE_F16, BE_F16)
        BE_NEON_CASE(BE_BF16, BE_BF16)
        BE_NEON_CASE(BE_I8, BE_F32)
#undef BE_NEON_CASE
    }
    be_neon_sumstats_k(rows, kinds, qs, n, -1, -1, 0, buf, H, k, s1, s2);
}

#undef BE_NEON_INLINE
#undef BE_NEON_UNROLL2

#endif
