/* The instruction-set choice of be_cpu.h, from made-up CPUID/XGETBV answers:
 * what each combination of CPU features, OS register state (XCR0) and
 * macOS's AVX-512 sysctls must give. Built and run by .ci/msvc-shaped.sh:
 *
 *     gcc -Wall -Wextra -Werror -I src/bertembed/_core/csrc .ci/msvc/cpu_choice.c && ./a.out
 */
#include <stdio.h>

#include "be_cpu.h"

#define OSXSAVE (1u << 27)
#define AVX     (1u << 28)
#define FMA     (1u << 12)
#define F16C    (1u << 29)
#define AVX2    (1u << 5)
#define AVX512  ((1u << 16) | (1u << 17) | (1u << 31)) /* F, DQ, VL */
#define LEAF1   (OSXSAVE | AVX | FMA | F16C)
#define YMM     0x7ull    /* x87, SSE and AVX state */
#define ZMM     0xe7ull   /* and opmask, ZMM_Hi256, Hi16_ZMM */

static int failures = 0;

static void check(const char *what, unsigned int max_leaf, unsigned int leaf1, unsigned int leaf7,
                  unsigned long long xcr0, int os_avx512, int want) {
    be_cpu_facts f;
    int got;
    f.max_leaf = max_leaf;
    f.leaf1_ecx = leaf1;
    f.leaf7_ebx = leaf7;
    f.xcr0 = xcr0;
    f.os_avx512 = os_avx512;
    got = be_cpu_choose(&f);
    printf("%-58s %d%s\n", what, got, got == want ? "" : "   <- WRONG");
    if (got != want) {
        printf("    expected %d\n", want);
        failures++;
    }
}

int main(void) {
    check("AVX-512 CPU, OS saves the ZMM state", 13, LEAF1, AVX2 | AVX512, ZMM, 0, 2);
    check("AVX-512 CPU, OS saves only YMM (AVX-512 off)", 13, LEAF1, AVX2 | AVX512, YMM, 0, 1);
    check("AVX-512 CPU, macOS: XCR0 lazy, sysctls say yes", 13, LEAF1, AVX2 | AVX512, YMM, 1, 2);
    check("AVX-512 sysctls without AVX-512 in CPUID", 13, LEAF1, AVX2, YMM, 1, 1);
    check("AVX-512 F without VL", 13, LEAF1, AVX2 | (1u << 16) | (1u << 17), ZMM, 0, 1);
    check("AVX2 + FMA + F16C", 13, LEAF1, AVX2, YMM, 0, 1);
    check("AVX2 without F16C", 13, LEAF1 & ~F16C, AVX2, YMM, 0, 0);
    check("AVX2 without FMA", 13, LEAF1 & ~FMA, AVX2, YMM, 0, 0);
    check("no OSXSAVE (XGETBV not allowed)", 13, LEAF1 & ~OSXSAVE, AVX2 | AVX512, 0, 0, 0);
    check("OS does not save the YMM state", 13, LEAF1, AVX2 | AVX512, 0x3, 0, 0);
    check("AVX without AVX2", 13, LEAF1, 0, YMM, 0, 0);
    check("CPUID without leaf 7", 6, LEAF1, AVX2 | AVX512, ZMM, 0, 0);
#if BE_CPU_X86
    printf("this machine: level %d\n", be_cpu_level());
#endif
    if (failures) printf("%d wrong\n", failures);
    return failures != 0;
}
