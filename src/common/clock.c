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
