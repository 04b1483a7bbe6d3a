/* Which x86-64 instruction sets this CPU and its operating system run.
 *
 * Read from CPUID and XGETBV directly rather than with
 * __builtin_cpu_supports: clang 14 and 16 reject some feature names GCC
 * accepts ("f16c"), MSVC has no such builtin, and the answer must be the same
 * under every compiler. GCC and clang read them with <cpuid.h> and the XGETBV
 * bytes, MSVC with __cpuidex and _xgetbv; be_cpu_choose() decides from what
 * was read, the same code everywhere.
 *
 * An instruction set counts only when the OS also saves its registers on a
 * context switch (XCR0): the YMM state for AVX2, the opmask and ZMM states
 * for AVX-512. macOS is the exception: it turns the AVX-512 states on in XCR0
 * only once a thread first uses them, and says in advance that it will with
 * the sysctl hw.optional.avx512f (and ...dq, ...vl); there that answer stands
 * in for the XCR0 bits.
 */
#ifndef BERTEMBED_CPU_H
#define BERTEMBED_CPU_H

/* What the CPU and the OS report, as be_cpu_choose() reads it. */
typedef struct {
    unsigned int max_leaf;   /* CPUID leaf 0, EAX */
    unsigned int leaf1_ecx;  /* CPUID leaf 1, ECX */
    unsigned int leaf7_ebx;  /* CPUID leaf 7 subleaf 0, EBX (0 when max_leaf < 7) */
    unsigned long long xcr0; /* XGETBV(0) (0 without OSXSAVE) */
    int os_avx512;           /* macOS: the hw.optional.avx512f/dq/vl sysctls all say 1; else 0 */
} be_cpu_facts;

/* 1 if the CPU and OS run AVX2 + FMA + F16C; 2 if also AVX-512 F, VL and DQ;
   else 0. */
static inline int be_cpu_choose(const be_cpu_facts *f) {
    const unsigned int c1 = f->leaf1_ecx, b7 = f->leaf7_ebx;
    int avx512;
    /* OSXSAVE (27), AVX (28), FMA (12), F16C (29) */
    if (f->max_leaf < 7) return 0;
    if ((c1 & (1u << 27)) == 0 || (c1 & (1u << 28)) == 0 || (c1 & (1u << 12)) == 0 || (c1 & (1u << 29)) == 0) return 0;
    if ((f->xcr0 & 0x6u) != 0x6u) return 0; /* XMM and YMM state */
    if (((b7 >> 5) & 1u) == 0) return 0;      /* AVX2 */
    /* AVX512F (16), AVX512DQ (17), AVX512VL (31); opmask, ZMM0-15 high
       halves and ZMM16-31 state (XCR0 bits 5-7), or the OS's promise */
    avx512 =
        (b7 & (1u << 16)) && (b7 & (1u << 17)) && (b7 & (1u << 31)) && ((f->xcr0 & 0xe0u) == 0xe0u || f->os_avx512);
    return avx512 ? 2 : 1;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define BE_CPU_X86 1
#include <cpuid.h>

static void be_cpuid(unsigned int leaf, unsigned int sub, unsigned int r[4]) {
    __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
}

/* XCR0, the register-state components the OS enables (XGETBV with ECX 0;
   encoded as bytes, which assemble without -mxsave on every compiler). */
static unsigned long long be_xcr0(void) {
    unsigned int lo, hi;
    __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}
#elif defined(_M_X64) && defined(_MSC_VER)
#define BE_CPU_X86 1
#include <intrin.h>
#include <immintrin.h>

static void be_cpuid(unsigned int leaf, unsigned int sub, unsigned int r[4]) {
    int v[4];
    __cpuidex(v, (int)leaf, (int)sub);
    r[0] = (unsigned int)v[0];
    r[1] = (unsigned int)v[1];
    r[2] = (unsigned int)v[2];
    r[3] = (unsigned int)v[3];
}

static unsigned long long be_xcr0(void) { return (unsigned long long)_xgetbv(0); }
#else
#define BE_CPU_X86 0
#endif

#if BE_CPU_X86
#if defined(__APPLE__)
#include <sys/sysctl.h>

/* 1 when the sysctl `name` exists and is a nonzero integer. */
static int be_sysctl_flag(const char *name) {
    int v = 0;
    size_t n = sizeof v;
    return sysctlbyname(name, &v, &n, NULL, 0) == 0 && v != 0;
}

static int be_os_avx512(void) {
    return be_sysctl_flag("hw.optional.avx512f") && be_sysctl_flag("hw.optional.avx512dq") &&
           be_sysctl_flag("hw.optional.avx512vl");
}
#else
static int be_os_avx512(void) { return 0; }
#endif

static int be_cpu_level(void) {
    be_cpu_facts f = {0, 0, 0, 0, 0};
    unsigned int r[4];
    be_cpuid(0, 0, r);
    f.max_leaf = r[0];
    if (f.max_leaf < 7) return 0;
    be_cpuid(1, 0, r);
    f.leaf1_ecx = r[2];
    be_cpuid(7, 0, r);
    f.leaf7_ebx = r[1];
    /* XGETBV faults unless the OS set OSXSAVE */
    f.xcr0 = (f.leaf1_ecx & (1u << 27)) ? be_xcr0() : 0;
    f.os_avx512 = be_os_avx512();
    return be_cpu_choose(&f);
}

/* 1 if the CPU has an int8 dot-product instruction (AVX512-VNNI with
   AVX-512, AVX-VNNI, AMX-INT8), else 0. Without one, ONNX Runtime's x86
   kernels multiply uint8 activations by int8 weights with VPMADDUBSW, whose
   16-bit sums of two products saturate (the server then stores such weights
   as uint8, serve/server/int8_host.py). */
static inline int be_cpu_int8_dot(void) {
    unsigned int r[4], ecx7, edx7;
    int level = be_cpu_level();
    be_cpuid(0, 0, r);
    if (r[0] < 7 || level == 0) return 0;
    be_cpuid(7, 0, r);
    ecx7 = r[2];
    edx7 = r[3];
    if (level == 2 && (ecx7 & (1u << 11))) return 1; /* AVX512-VNNI */
    if (edx7 & (1u << 25)) return 1;                 /* AMX-INT8 */
    be_cpuid(7, 1, r);
    return (r[0] & (1u << 4)) ? 1 : 0; /* AVX-VNNI */
}
#endif

#endif
