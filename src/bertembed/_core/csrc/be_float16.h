/* Element conversions between float32 and the 16-bit float formats, portable C.
 *
 * float16 is IEEE binary16; bfloat16 is the upper half of a float32. Both
 * narrowing conversions round to nearest, ties to even (as NumPy's
 * astype(float16) and ml_dtypes' astype(bfloat16) do); NaN stays NaN (quiet),
 * infinities stay infinite, float16 overflow gives infinity. The row kernels
 * use the CPU's F16C / AVX-512 instructions for float16 where they exist and
 * these functions for the rest of a row and on other CPUs.
 */
#ifndef BERTEMBED_FLOAT16_H
#define BERTEMBED_FLOAT16_H

#include <stdint.h>
#include <string.h>

static inline uint32_t be_fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float be_bitsf(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* binary16 -> float32, exact. The exponent and mantissa are moved into a
 * float32 and rescaled by 2**112 (the difference of the biases), which also
 * gets subnormals right; all-ones exponents become inf/NaN. */
static inline float be_h2f(uint16_t h) {
    uint32_t mag = (uint32_t)(h & 0x7fffu) << 13;
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    float f;
    if ((h & 0x7c00u) == 0x7c00u)
        f = be_bitsf(mag | 0x7f800000u);
    else
        f = be_bitsf(mag) * 5.192296858534828e+33f; /* 2**112 */
    return be_bitsf(be_fbits(f) | sign);
}

/* float32 -> binary16, round to nearest even. */
static inline uint16_t be_f2h(float f) {
    uint32_t x = be_fbits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
    if (x >= 0x477ff000u) /* >= 65520 (and inf): rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (x < 0x38800000u) {
        /* Below the smallest normal (2**-14): a subnormal or zero. Adding
         * 0.5 puts the value's bits where 0.5's last mantissa bit is worth
         * 2**-24, the subnormal step, so the FPU's own rounding is the
         * half-precision rounding. */
        return (uint16_t)(sign | (be_fbits(be_bitsf(x) + 0.5f) - 0x3f000000u));
    }
    /* Normal: rebias the exponent, round the 13 dropped bits to even. */
    x += 0xc8000fffu + ((x >> 13) & 1u); /* (15 - 127) << 23, plus rounding */
    return (uint16_t)(sign | (x >> 13));
}

/* bfloat16 -> float32, exact. */
static inline float be_bf2f(uint16_t b) { return be_bitsf((uint32_t)b << 16); }

/* float32 -> bfloat16, round to nearest even; NaN stays a quiet NaN. */
static inline uint16_t be_f2bf(float f) {
    uint32_t x = be_fbits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

#endif
