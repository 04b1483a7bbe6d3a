/* A call's rows shared among the threads of its parallel region.
 *
 * Every thread takes `chunk` rows at a time from a shared counter, so a thread
 * that wakes late finds the rows already taken and a thread already running
 * takes over its share. The calling thread (`wait` set) then spins until every
 * row is done before it reaches the region's closing barrier: were it first
 * there, the passive wait policy would put it to sleep and the last worker
 * would have to wake it, which on a virtual machine costs as much again as
 * waking the worker did (tens to a hundred microseconds). The spin waits only
 * for rows a running thread has taken (at most one chunk per thread), and is
 * bounded by BE_JOIN_SPINS pauses should that thread be descheduled.
 */
#ifndef BERTEMBED_SHARE_H
#define BERTEMBED_SHARE_H

#include <stdint.h>

#include "be_rows.h"
#include "be_threads.h"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <immintrin.h>
#define BE_PAUSE() _mm_pause()
#elif (defined(__aarch64__) || defined(__arm__)) && (defined(__GNUC__) || defined(__clang__))
#define BE_PAUSE() __asm__ __volatile__("yield")
#else
#define BE_PAUSE() ((void)0)
#endif

/* The most pauses the calling thread spins for the other threads' last rows. */
#define BE_JOIN_SPINS 4096

/* Compute rows taken `chunk` at a time from *next until all n are taken,
   counting the finished ones in *done; with `wait`, then spin until *done is n
   (or BE_JOIN_SPINS pauses have passed). */
static void be_share_rows(const be_job *job, int64_t n, double *scratch, int64_t *next, int64_t *done, int64_t chunk,
                          int wait) {
    int64_t start, stop, r, spins;
    while ((start = BE_ADD(next, chunk)) < n) {
        stop = start + chunk < n ? start + chunk : n;
        for (r = start; r < stop; r++) be_row(job, (Py_ssize_t)r, scratch);
        BE_ADD(done, stop - start);
    }
    if (wait)
        for (spins = 0; BE_LOAD(done) < n && spins < BE_JOIN_SPINS; spins++) BE_PAUSE();
}

#endif
