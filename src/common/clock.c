/* Time helpers. */
#include <errno.h>
#include <time.h>
#include "common/clock.h"

static uint64_t read_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t egm__now_ns(void)
{
    return read_ns(CLOCK_MONOTONIC);
}

uint64_t egm__now_ms(void)
{
    return read_ns(CLOCK_MONOTONIC) / 1000000ull;
}

uint64_t egm__wall_ms(void)
{
    return read_ns(CLOCK_REALTIME) / 1000000ull;
}

void egm__sleep_ms(uint64_t ms)
{
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

void egm__deadline_in(struct timespec *ts, uint64_t ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    uint64_t ns = (uint64_t)ts->tv_nsec + (ms % 1000u) * 1000000u;
    ts->tv_sec += (time_t)(ms / 1000u + ns / 1000000000u);
    ts->tv_nsec = (long)(ns % 1000000000u);
}
