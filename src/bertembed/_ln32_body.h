/* Body of the float32 fused embedding + LayerNorm row, included once per
 * instruction set by _rows.h with BE_LN32_NAME and BE_LN32_ATTR defined.
 * Data stays float32 (as in the frameworks); mean and variance accumulate
 * in float64. Values are shifted by the row's first element, which keeps
 * the one-pass variance accurate when the mean is large. */
static BE_LN32_ATTR void BE_LN32_NAME(
    const float *t, const float *p, const float *g, float *o, Py_ssize_t H,
    int has_seg, const float *w, const float *b, double eps, float *buf)
{
    double k, m, d, s1 = 0.0, s2 = 0.0;
    float mean, rstd;
    Py_ssize_t i = 0;
    if (has_seg) {
        for (i = 0; i < H; i++) buf[i] = t[i] + p[i] + g[i];
    } else {
        for (i = 0; i < H; i++) buf[i] = t[i] + p[i];
    }
    k = buf[0];
    i = 0;
#if BE_VECTOR_EXT
    {
        /* Four independent chains of float64 lanes, each widened once (a
           single chain would make the row latency-bound). BE_VD is 4 lanes,
           or 8 where the target has 512-bit registers. */
        BE_VD z = {0}, vk = z + k, a0 = z, a1 = z, a2 = z, a3 = z;
        BE_VD q0 = z, q1 = z, q2 = z, q3 = z, x0, x1, x2, x3;
        BE_VF f0, f1, f2, f3;
        const Py_ssize_t L = (Py_ssize_t)(sizeof(BE_VF) / sizeof(float));
        int j;
        for (; i + 4 * L <= H; i += 4 * L) {
            memcpy(&f0, buf + i, sizeof f0);
            memcpy(&f1, buf + i + L, sizeof f1);
            memcpy(&f2, buf + i + 2 * L, sizeof f2);
            memcpy(&f3, buf + i + 3 * L, sizeof f3);
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
#endif
    for (; i < H; i++) {
        d = (double)buf[i] - k;
        s1 += d;
        s2 += d * d;
    }
    m = s1 / (double)H;
    d = s2 / (double)H;
    d -= m * m; /* NaN and inf propagate; only a rounding-negative becomes 0 */
    d = d < 0.0 ? 0.0 : d;
    mean = (float)(k + m);
    rstd = (float)(1.0 / sqrt(d + eps));
    for (i = 0; i < H; i++) o[i] = (buf[i] - mean) * rstd * w[i] + b[i];
}
