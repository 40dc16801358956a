/* Time helpers. */
#ifndef EGM_COMMON_CLOCK_H
#define EGM_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

uint64_t egm__now_ns(void);  /* CLOCK_MONOTONIC */
uint64_t egm__now_ms(void);  /* CLOCK_MONOTONIC */
uint64_t egm__wall_ms(void); /* CLOCK_REALTIME */
void egm__sleep_ms(uint64_t ms);
/* *ts = CLOCK_MONOTONIC now + ms: the deadline of a pthread_cond_timedwait
 * on a condition variable made with that clock. */
void egm__deadline_in(struct timespec *ts, uint64_t ms);

#endif
