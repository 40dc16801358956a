/* Progress of a long wait (e.g. allocating a large pool): on a terminal, a bar
 * redrawn in place on stderr with GB done, GB/s and seconds; otherwise an info
 * log line every few seconds. Updates must come one at a time. */
#ifndef EGM_COMMON_PROGRESS_H
#define EGM_COMMON_PROGRESS_H

#include <stdint.h>
#include <egmstore/status.h>

typedef struct {
    const char *what; /* e.g. "EGM pool setup" */
    uint64_t total;   /* bytes */
    uint64_t start_ns;
    uint64_t last_ns; /* last line drawn or logged */
    int tty;          /* stderr is a terminal */
    int drawn;        /* a bar is on screen */
} egm_progress_t;

void egm__progress_start(egm_progress_t *p, const char *what, uint64_t total);
void egm__progress_update(egm_progress_t *p, uint64_t done);
/* Ends the bar (newline) and logs the outcome, `status` of the work (EGM_OK:
 * the average rate; else how far it got). */
void egm__progress_finish(egm_progress_t *p, uint64_t done, egm_status_t status);

#endif
