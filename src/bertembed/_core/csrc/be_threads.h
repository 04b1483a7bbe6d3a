/* The automatic thread count, learnt from the calls themselves.
 *
 * Whether a second thread pays off depends less on the size of a call than on
 * the machine around it: alone, a worker thread that spins between calls
 * joins in microseconds and two threads win from a few tens of thousands of
 * elements; next to runtimes whose idle workers spin (ONNX Runtime and torch
 * in the same process), waking ours can cost a millisecond. So for each size
 * class (log2 of the result's elements) the kernel keeps the recent cost per
 * element of one thread and of all the allowed threads, runs the cheaper, and
 * now and then tries the other: after 16 calls (or more, so that a try costs
 * about 2% on average: after 50 calls when the other is twice as slow; a try
 * of all threads is two calls, see be_choose_threads), then twice as many
 * each time, up to every 1024th call (or the 2% interval, where that is
 * longer) while the choice holds; the count starts again when the choice
 * changes. On a crowded machine a call with all threads can take 50 times a
 * one-thread call, so a try every 1024th call would cost several per cent.
 * When the machine empties (one-thread calls that got under 3/4 of a core at
 * the last try now get nearly all of one), the estimate of all threads is
 * learnt afresh at once.
 *
 * What a call costs is judged for the whole machine, not by its wall time
 * alone. A one-thread call costs its CPU time: the time it takes when it has a
 * core, however long it waited for one; and its CPU time over its wall time
 * is the share of a core it got (recent one-thread calls of the size class,
 * averaged). A call with all the threads costs its wall time divided by that
 * share. Alone on the machine the share is about 1 and the clock decides; but
 * when one thread gets only part of a core, the machine has more runnable
 * threads than cores (more workers, an encoder, a batch job), and whatever
 * speed-up more threads show on the clock is taken from the others: the
 * charge rises and the call goes back to one thread. So pre-forked workers
 * that fill the machine settle on one thread each, while a process alone
 * keeps all its threads. Where no thread CPU clock is fine enough (Windows),
 * the share is taken as 1: the wall time alone decides.
 *
 * Calls in flight share the threads: a call that starts while k others run
 * gets at most max_threads / (k + 1).
 *
 * The state is a handful of 64-bit integers updated with relaxed atomics: a
 * race can only blur an estimate, never break a call.
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

#define BE_FIRST_INTERVAL 16
#define BE_LAST_INTERVAL  1024
#define BE_MAX_INTERVAL   (1 << 20)
#define BE_SIZE_CLASSES   64

typedef struct {
    int64_t cost[2];      /* recent ns per 65536 elements: [0] one thread, [1] all allowed */
    int64_t samples[2];
    int64_t calls;
    int64_t next_try;     /* the call that tries the other choice */
    int64_t interval;     /* calls until the next try */
    int64_t best;         /* 0 or 1: the choice the estimates favour */
    int64_t last;         /* the choice of the previous call */
    int64_t again;        /* 1: the next call repeats a try of all threads */
    int64_t share;        /* recent share of a core of one-thread calls, per 1024 (0: none yet) */
    int64_t share_at_try; /* `share` when all threads were last tried (0: none yet) */
} be_size_class;

static be_size_class be_classes[BE_SIZE_CLASSES];
static int64_t be_in_flight = 0;
/* Below this many elements a call always uses one thread; 0 disables learning
   (the automatic choice is then all allowed threads from this size on). */
static int64_t be_min_parallel = 16384;
static int64_t be_learning = 1;
static int64_t be_last_auto = 0;

static int be_size_class_of(int64_t elements) {
    int c = 0;
    while (elements > 1 && c < BE_SIZE_CLASSES - 1) {
        elements >>= 1;
        c++;
    }
    return c;
}

/* Calls between two tries for a try to cost at most about 2% on average (a
   try of all threads is two calls: the waking one and the measured one). */
static int64_t be_two_percent_interval(const be_size_class *c) {
    int64_t best = BE_LOAD(&c->best);
    int64_t fast = BE_LOAD(&c->cost[best]), slow = BE_LOAD(&c->cost[1 - best]);
    int64_t n;
    if (fast <= 0) return BE_FIRST_INTERVAL;
    if (slow > fast * BE_MAX_INTERVAL) return BE_MAX_INTERVAL;
    n = (slow - fast) * (best == 0 ? 100 : 50) / fast;
    return n > BE_MAX_INTERVAL ? BE_MAX_INTERVAL : n;
}

/* Calls until the first try after the choice changed: at least
   BE_FIRST_INTERVAL, at most BE_LAST_INTERVAL, and the 2% interval between. */
static int64_t be_first_interval(const be_size_class *c) {
    int64_t n = be_two_percent_interval(c);
    return n < BE_FIRST_INTERVAL ? BE_FIRST_INTERVAL : (n > BE_LAST_INTERVAL ? BE_LAST_INTERVAL : n);
}

/* The interval after `interval`: twice as long, up to BE_LAST_INTERVAL or
   the 2% interval, whichever is longer. */
static int64_t be_next_interval(const be_size_class *c, int64_t interval) {
    int64_t cap = be_two_percent_interval(c);
    if (cap < BE_LAST_INTERVAL) cap = BE_LAST_INTERVAL;
    return interval * 2 > cap ? cap : interval * 2;
}

/* One-thread calls got under 3/4 of a core when all threads were last tried
   and now get nearly a whole one: the machine has emptied. */
static int be_machine_emptied(const be_size_class *c) {
    int64_t then = BE_LOAD(&c->share_at_try);
    return then > 0 && then < 768 && BE_LOAD(&c->share) >= 922;
}

/* Threads for a call of `elements` result values, allowed `share` threads.
 * *arm: which estimate the call's time updates (-1: none). A call with all
 * threads right after one with one thread is not measured, and is followed by
 * a second one that is: the first may have to wake a worker that went to
 * sleep, which is not what all threads cost when they are used. */
static int be_choose_threads(int64_t elements, int share, int *arm) {
    be_size_class *c;
    int64_t calls, choice, interval;
    *arm = -1;
    if (share <= 1 || elements < BE_LOAD(&be_min_parallel)) return 1;
    if (!BE_LOAD(&be_learning)) return share;
    c = &be_classes[be_size_class_of(elements)];
    calls = BE_ADD(&c->calls, 1);
    /* The estimate of all threads was made on a crowded machine: learn it
       afresh (two measured calls). */
    if (BE_LOAD(&c->best) == 0 && BE_LOAD(&c->samples[1]) >= 2 && be_machine_emptied(c)) BE_STORE(&c->samples[1], 0);
    if (BE_LOAD(&c->again)) {
        BE_STORE(&c->again, 0);
        choice = 1;
    } else if (BE_LOAD(&c->samples[0]) < 2) {
        choice = 0;
    } else if (BE_LOAD(&c->samples[1]) < 2) {
        choice = 1;
    } else {
        choice = BE_LOAD(&c->best);
        if (BE_LOAD(&c->next_try) == 0) {
            BE_STORE(&c->interval, be_first_interval(c));
            BE_STORE(&c->next_try, calls + BE_LOAD(&c->interval));
        } else if (calls >= BE_LOAD(&c->next_try)) {
            interval = BE_LOAD(&c->interval);
            BE_STORE(&c->next_try, calls + interval);
            BE_STORE(&c->interval, be_next_interval(c, interval));
            choice = 1 - choice;
        }
    }
    if (choice == 1 && BE_LOAD(&c->best) == 0) BE_STORE(&c->share_at_try, BE_LOAD(&c->share));
    if (choice == 1 && BE_LOAD(&c->last) != 1) {
        BE_STORE(&c->again, 1);  /* measure the next one instead */
    } else {
        *arm = (int)choice;
    }
    BE_STORE(&c->last, choice);
    return choice ? share : 1;
}

/* What a call that `threads` threads ran in `wall` seconds costs: one thread
   its CPU time `cpu` (negative: not measured, then its wall time); more
   threads the wall time over `share`, the share of a core one-thread calls
   got (see the top). */
static double be_call_cost(int threads, double wall, double cpu, double share) {
    if (threads <= 1) return cpu < 0.0 || cpu > wall ? wall : cpu;
    if (share > 1.0) share = 1.0;
    if (share < 0.05) share = 0.05;
    return wall / share;
}

/* Fold a call's cost into its size class's estimate for `arm`: `threads`
   threads ran it in `wall` seconds; `cpu`: a one-thread call's CPU time
   (negative: not measured). */
static void be_record_threads(int64_t elements, int arm, int threads, double wall, double cpu) {
    be_size_class *c = &be_classes[be_size_class_of(elements)];
    int64_t share = BE_LOAD(&c->share), got;
    int64_t x;
    if (threads <= 1 && cpu >= 0.0 && wall > 0.0) {
        got = (int64_t)(1024.0 * (cpu < wall ? cpu : wall) / wall);
        share = share == 0 ? got : share + (got - share) / 4;
        BE_STORE(&c->share, share);
    }
    x = (int64_t)(be_call_cost(threads, wall, cpu, share == 0 ? 1.0 : (double)share / 1024.0) * 1e9 * 65536.0 /
                  (double)elements);
    int64_t n = BE_ADD(&c->samples[arm], 1);
    int64_t old = BE_LOAD(&c->cost[arm]);
    int64_t best, other, cur;
    /* No outlier is dropped: next to runtimes whose idle workers spin, the
       rare call that waits milliseconds for a worker is what several threads
       cost, and the mean is what a service pays. */
    /* A try (the choice not favoured) is rare news: it counts for half. */
    BE_STORE(&c->cost[arm], n == 0 ? x : old + (x - old) / (arm == BE_LOAD(&c->best) ? 4 : 2));
    if (BE_LOAD(&c->samples[0]) < 2 || BE_LOAD(&c->samples[1]) < 2) return;
    cur = BE_LOAD(&c->best);
    other = 1 - cur;
    /* The other choice takes over when it is cheaper by more than 3%. */
    best = BE_LOAD(&c->cost[other]) * 103 < BE_LOAD(&c->cost[cur]) * 100 ? other : cur;
    if (best != cur) {
        BE_STORE(&c->best, best);
        BE_STORE(&c->interval, be_first_interval(c));
        BE_STORE(&c->next_try, BE_LOAD(&c->calls) + BE_LOAD(&c->interval));
    }
}

static void be_reset_threads(void) {
    int i;
    for (i = 0; i < BE_SIZE_CLASSES; i++) {
        be_size_class *c = &be_classes[i];
        BE_STORE(&c->cost[0], 0);
        BE_STORE(&c->cost[1], 0);
        BE_STORE(&c->samples[0], 0);
        BE_STORE(&c->samples[1], 0);
        BE_STORE(&c->calls, 0);
        BE_STORE(&c->next_try, 0);
        BE_STORE(&c->interval, 0);
        BE_STORE(&c->best, 0);
        BE_STORE(&c->last, 0);
        BE_STORE(&c->again, 0);
        BE_STORE(&c->share, 0);
        BE_STORE(&c->share_at_try, 0);
    }
}

#endif
