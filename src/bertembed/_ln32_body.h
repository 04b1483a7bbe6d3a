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
        /* 2 x 4 float64 lanes: widened once, no long chain of additions. */
        be_v4d s0 = {0, 0, 0, 0}, s1v = s0, q0 = s0, q1 = s0, vk = s0 + k, x0, x1;
        be_v4f f0, f1;
        for (; i + 8 <= H; i += 8) {
            memcpy(&f0, buf + i, sizeof f0);
            memcpy(&f1, buf + i + 4, sizeof f1);
            x0 = __builtin_convertvector(f0, be_v4d) - vk;
            x1 = __builtin_convertvector(f1, be_v4d) - vk;
            s0 += x0;
            s1v += x1;
            q0 += x0 * x0;
            q1 += x1 * x1;
        }
        s0 += s1v;
        q0 += q1;
        s1 = (s0[0] + s0[2]) + (s0[1] + s0[3]);
        s2 = (q0[0] + q0[2]) + (q0[1] + q0[3]);
    }
#endif
    for (; i < H; i++) {
        d = (double)buf[i] - k;
        s1 += d;
        s2 += d * d;
    }
    m = s1 / (double)H;
    d = s2 / (double)H;
    d = d > m * m ? d - m * m : 0.0;
    mean = (float)(k + m);
    rstd = (float)(1.0 / sqrt(d + eps));
    for (i = 0; i < H; i++) o[i] = (buf[i] - mean) * rstd * w[i] + b[i];
}
