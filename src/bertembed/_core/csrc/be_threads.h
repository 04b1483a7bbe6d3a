/* The automatic thread count: a rule, nothing learnt or timed.
 *
 * A call of `elements` result values may use one thread per
 * be_elements_per_thread of them (below twice that, one thread: waking a
 * sleeping OpenMP worker costs tens of microseconds), and at most its share
 * of the cap (OpenMP's maximum for the calling thread, the CPU affinity mask,
 * the CFS quota): the cap divided among the calls in flight, itself
 * included. The calls in flight are counted in memory shared with every
 * process forked after the kernel loaded (be_threads_init), so that W
 * pre-forked workers that keep the machine busy run one thread each while a
 * process alone takes all its threads. Where there is no such memory
 * (Windows, which has no fork) the count is the process's own.
 *
 * The counter is updated with relaxed atomics: a race can only change one
 * call's thread count, never break a call.
 */
#ifndef BERTEMBED_THREADS_H
#define BERTEMBED_THREADS_H

#include <stdint.h>

#if defined(_MSC_VER) && !defined(__clang__)
#include <intrin.h>
#define BE_LOAD(p)     _InterlockedCompareExchange64((volatile __int64 *)(p), 0, 0)
#define BE_STORE(p, v) _InterlockedExchange64((volatile __int64 *)(p), (__int64)(v))
#define BE_ADD(p, v)   _InterlockedExchangeAdd64((volatile __int64 *)(p), (__int64)(v))
#else
#define BE_LOAD(p)     __atomic_load_n((p), __ATOMIC_RELAXED)
#define BE_STORE(p, v) __atomic_store_n((p), (v), __ATOMIC_RELAXED)
#define BE_ADD(p, v)   __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#endif

#if !defined(_WIN32)
#include <sys/mman.h>
#if !defined(MAP_ANONYMOUS) && defined(MAP_ANON)
#define MAP_ANONYMOUS MAP_ANON
#endif
#endif

/* Result values per thread of the automatic choice. */
#define BE_ELEMENTS_PER_THREAD 196608

static int64_t be_local_in_flight = 0;
/* Calls in flight in this process and the processes forked from it. */
static int64_t *be_in_flight = &be_local_in_flight;
static int64_t be_last_auto = 0;
/* For tests: the values per thread. */
static int64_t be_elements_per_thread = BE_ELEMENTS_PER_THREAD;

/* Count the calls in flight in memory that forked children share (once, at import). */
static void be_threads_init(void) {
#if !defined(_WIN32) && defined(MAP_ANONYMOUS)
    void *shared;
    if (be_in_flight != &be_local_in_flight) return;
    shared = mmap(NULL, sizeof(int64_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) be_in_flight = (int64_t *)shared;
#endif
}

/* Threads for a call of `elements` result values allowed `share` threads. */
static int be_auto_threads(int64_t elements, int share) {
    int64_t by_size = elements / BE_LOAD(&be_elements_per_thread);
    return by_size < 1 ? 1 : (by_size < share ? (int)by_size : share);
}

#endif
