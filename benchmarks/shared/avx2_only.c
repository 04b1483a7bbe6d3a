/* An AVX2 host on an AVX-512 one, for benchmarks (benchmarks/avx2_host.sh).
 *
 * Preloaded (LD_PRELOAD), it makes every CPUID instruction of the process
 * fault (arch_prctl ARCH_SET_CPUID: Linux on a CPU with CPUID faulting, the
 * "cpuid_fault" flag of /proc/cpuinfo) and answers it from the SIGSEGV
 * handler with the CPU's own values minus AVX-512, AVX-VNNI, AVX512_BF16 and
 * AMX (and their state components in leaf 0xd). Libraries that pick their
 * kernels by CPUID (bertembed's row kernel, NumPy, OpenBLAS, ONNX Runtime's
 * MLAS, oneDNN in torch) then run their AVX2 code, at the real machine's
 * speed. A library that read CPUID before the constructor ran (glibc's own
 * string functions) keeps what it saw. */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

static int set_cpuid(int on) { return (int)syscall(SYS_arch_prctl, ARCH_SET_CPUID, on); }

static void cpuid(uint32_t leaf, uint32_t sub, uint32_t r[4]) {
    __asm__ volatile("cpuid" : "=a"(r[0]), "=b"(r[1]), "=c"(r[2]), "=d"(r[3]) : "a"(leaf), "c"(sub));
}

static void on_segv(int sig, siginfo_t *info, void *ctx_) {
    ucontext_t *ctx = (ucontext_t *)ctx_;
    greg_t *g = ctx->uc_mcontext.gregs;
    const unsigned char *ip = (const unsigned char *)g[REG_RIP];
    uint32_t r[4], leaf, sub;
    (void)info;
    if (ip[0] != 0x0f || ip[1] != 0xa2) { /* not CPUID: die as before */
        signal(sig, SIG_DFL);
        return;
    }
    leaf = (uint32_t)g[REG_RAX];
    sub = (uint32_t)g[REG_RCX];
    set_cpuid(1);
    cpuid(leaf, sub, r);
    set_cpuid(0);
    if (leaf == 7 && sub == 0) {
        r[1] &= ~((1u << 16) | (1u << 17) | (1u << 21) | (1u << 26) | (1u << 27) | (1u << 28) | (1u << 30) | (1u << 31));
        r[2] &= ~((1u << 1) | (1u << 6) | (1u << 11) | (1u << 12) | (1u << 14));
        r[3] &= ~((1u << 2) | (1u << 3) | (1u << 8) | (1u << 22) | (1u << 23) | (1u << 24) | (1u << 25));
    } else if (leaf == 7 && sub == 1) {
        r[0] &= ~((1u << 4) | (1u << 5)); /* AVX-VNNI, AVX512_BF16 */
    } else if (leaf == 0xd && sub == 0) {
        r[0] &= ~((1u << 5) | (1u << 6) | (1u << 7) | (1u << 17) | (1u << 18)); /* opmask/ZMM, AMX tile state */
    }
    g[REG_RAX] = r[0];
    g[REG_RBX] = r[1];
    g[REG_RCX] = r[2];
    g[REG_RDX] = r[3];
    g[REG_RIP] += 2;
}

__attribute__((constructor)) static void init(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(SIGSEGV, &sa, NULL);
    if (set_cpuid(0) != 0) fprintf(stderr, "avx2_only: CPUID faulting not available\n");
}
