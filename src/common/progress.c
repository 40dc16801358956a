/* Progress bar on a terminal, periodic log lines elsewhere. */
#include "common/progress.h"

#include <stdio.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/log.h"

#define BAR_WIDTH 30
#define TTY_PERIOD_NS 100000000ull /* redraw at most 10 times a second */
#define LOG_PERIOD_NS 5000000000ull

static double gb(uint64_t bytes)
{
    return (double)bytes / 1e9;
}

void egm__progress_start(egm_progress_t *p, const char *what, uint64_t total)
{
    p->what = what;
    p->total = total;
    p->start_ns = p->last_ns = egm__now_ns();
    p->tty = isatty(STDERR_FILENO);
    p->drawn = 0;
}

void egm__progress_update(egm_progress_t *p, uint64_t done)
{
    uint64_t now = egm__now_ns();
    int last = done >= p->total;
    if (!last && now - p->last_ns < (p->tty ? TTY_PERIOD_NS : LOG_PERIOD_NS))
        return;
    p->last_ns = now;
    double secs = (double)(now - p->start_ns) / 1e9;
    double rate = secs > 0 ? gb(done) / secs : 0.0;
    if (!p->tty) {
        if (!last)
            egm_info("%s: %.1f of %.1f GB (%.1f GB/s, %.0f s)", p->what, gb(done), gb(p->total),
                     rate, secs);
        return;
    }
    char bar[BAR_WIDTH + 1];
    int fill = p->total ? (int)((double)done / (double)p->total * BAR_WIDTH) : BAR_WIDTH;
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < fill ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r%s [%s] %.1f/%.1f GB %.1f GB/s %.0f s ", p->what, bar, gb(done),
            gb(p->total), rate, secs);
    fflush(stderr);
    p->drawn = 1;
}

void egm__progress_finish(egm_progress_t *p, uint64_t done, egm_status_t status)
{
    if (p->drawn) {
        fputc('\n', stderr);
        fflush(stderr);
    }
    double secs = (double)(egm__now_ns() - p->start_ns) / 1e9;
    if (status == EGM_OK)
        egm_info("%s: %.1f GB in %.2f s (%.2f GB/s)", p->what, gb(done), secs,
                 secs > 0 ? gb(done) / secs : 0.0);
    else
        egm_info("%s: stopped after %.1f of %.1f GB (%.2f s)", p->what, gb(done), gb(p->total),
                 secs);
}
