/* OpenMP and build facts for bertembed._core._kernel, with serial fallbacks. */
#ifndef BERTEMBED_RUNTIME_H
#define BERTEMBED_RUNTIME_H

#ifdef _OPENMP
#include <omp.h>
#define BE_OPENMP         1
#define BE_OPENMP_VERSION _OPENMP
static int be_max_threads(void) { return omp_get_max_threads(); }
static void be_set_max_threads(int n) { omp_set_num_threads(n); }
/* The schedule of the next parallel loop of this thread: static (one block of
   rows per thread) or dynamic in chunks of `chunk` rows. omp_set_schedule is
   OpenMP 3.0 (200805); under MSVC's OpenMP 2.0 the loops keep the schedule
   OMP_SCHEDULE names (static when it is unset). */
#if _OPENMP >= 200805
static void be_set_schedule(int dynamic, int chunk) {
    omp_set_schedule(dynamic ? omp_sched_dynamic : omp_sched_static, dynamic ? chunk : 0);
}
#else
static void be_set_schedule(int dynamic, int chunk) {
    (void)dynamic;
    (void)chunk;
}
#endif
/* libgomp has had omp_pause_resource_all since GCC 9 while still reporting
   _OPENMP 201511; LLVM's libomp reports 201811 or newer. MSVC's OpenMP 2.0
   has no way to release its pool. */
#if _OPENMP >= 201811 || (defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 9)
static int be_release_threads(void) { return omp_pause_resource_all(omp_pause_hard); }
#else
static int be_release_threads(void) { return -1; }
#endif
#else
#define BE_OPENMP         0
#define BE_OPENMP_VERSION 0
static int be_max_threads(void) { return 1; }
static void be_set_max_threads(int n) { (void)n; }
static void be_set_schedule(int dynamic, int chunk) {
    (void)dynamic;
    (void)chunk;
}
static int be_release_threads(void) { return -1; }
#endif

#if defined(BE_MSVC_SHAPE) && BE_MSVC_SHAPE
#define BE_COMPILER_SHAPE " (msvc-shaped)"
#else
#define BE_COMPILER_SHAPE ""
#endif
#if defined(__clang__)
#define BE_COMPILER "clang " __clang_version__ BE_COMPILER_SHAPE
#elif defined(__GNUC__)
#define BE_COMPILER "gcc " __VERSION__ BE_COMPILER_SHAPE
#elif defined(_MSC_VER)
#define BE_STR2(x)  #x
#define BE_STR(x)   BE_STR2(x)
#define BE_COMPILER "msvc " BE_STR(_MSC_VER)
#else
#define BE_COMPILER "unknown"
#endif

/* Ask for every cache line of a row that will be read soon (PREFETCHT0 on
   x86-64, under every compiler). */
#if (defined(_M_X64) && defined(_MSC_VER)) || (defined(__x86_64__) && defined(BE_MSVC_SHAPE) && BE_MSVC_SHAPE)
#include <xmmintrin.h>
#define BE_PREFETCH(c) _mm_prefetch((const char *)(c), _MM_HINT_T0)
#elif defined(__GNUC__) || defined(__clang__)
#define BE_PREFETCH(c) __builtin_prefetch((c), 0, 3)
#endif
/* Raise a flag that several threads may raise at once (OpenMP 2.0's atomic
   update: MSVC's /openmp has nothing newer). */
static inline void be_flag_raise(int *flag) {
#ifdef _OPENMP
#pragma omp atomic
#endif
    *flag |= 1;
}

static inline void be_prefetch_row(const void *p, size_t nbytes) {
#ifdef BE_PREFETCH
    const char *c = (const char *)p;
    size_t off;
    for (off = 0; off < nbytes; off += 64) BE_PREFETCH(c + off);
#else
    (void)p;
    (void)nbytes;
#endif
}

#endif
