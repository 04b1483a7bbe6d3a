/* Which x86-64 instruction sets this CPU and its operating system run.
 *
 * Read from CPUID and XGETBV directly rather than with
 * __builtin_cpu_supports: clang 14 and 16 reject some feature names GCC
 * accepts ("f16c"), and the answer must be the same under every compiler.
 * An instruction set counts only when the OS also saves its registers on a
 * context switch (XCR0): the YMM state for AVX2, the opmask and ZMM states
 * for AVX-512. x86-64 with GCC or clang only (the builds that compile more
 * than the baseline kernel).
 */
#ifndef BERTEMBED_CPU_H
#define BERTEMBED_CPU_H

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>

/* XCR0, the register-state components the OS enables (XGETBV with ECX 0;
   encoded as bytes, which assemble without -mxsave on every compiler). */
static unsigned long long be_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* 1 if the CPU and OS run AVX2 + FMA + F16C; 2 if also AVX-512 F, VL and
   DQ; else 0. */
static int be_cpu_level(void) {
    unsigned int a, b, c, d, c1;
    unsigned long long xcr0;
    int avx2, avx512;
    if (!__get_cpuid(1, &a, &b, &c1, &d)) return 0;
    /* OSXSAVE (27), AVX (28), FMA (12), F16C (29) */
    if ((c1 & (1u << 27)) == 0 || (c1 & (1u << 28)) == 0 || (c1 & (1u << 12)) == 0 ||
        (c1 & (1u << 29)) == 0)
        return 0;
    xcr0 = be_xcr0();
    if ((xcr0 & 0x6u) != 0x6u) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    avx2 = (b >> 5) & 1u;
    /* AVX512F (16), AVX512DQ (17), AVX512VL (31); opmask, ZMM0-15 high
       halves and ZMM16-31 state (XCR0 bits 5-7) */
    avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 31)) && (xcr0 & 0xe0u) == 0xe0u;
    if (!avx2) return 0;
    return avx512 ? 2 : 1;
}
#endif

#endif
