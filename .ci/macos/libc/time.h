#ifndef BERTEMBED_CI_TIME_H
#define BERTEMBED_CI_TIME_H
typedef long time_t;
struct timespec {
    time_t tv_sec;
    long tv_nsec;
};
typedef enum {
    _CLOCK_REALTIME = 0,
    _CLOCK_MONOTONIC = 6,
    _CLOCK_PROCESS_CPUTIME_ID = 12,
    _CLOCK_THREAD_CPUTIME_ID = 16
} clockid_t;
#define CLOCK_REALTIME           _CLOCK_REALTIME
#define CLOCK_MONOTONIC          _CLOCK_MONOTONIC
#define CLOCK_PROCESS_CPUTIME_ID _CLOCK_PROCESS_CPUTIME_ID
#define CLOCK_THREAD_CPUTIME_ID  _CLOCK_THREAD_CPUTIME_ID
int clock_gettime(clockid_t clock_id, struct timespec *tp);
#endif
