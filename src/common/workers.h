/* Threads kept for reuse: a job handed to egm__workers_start runs at once on a
 * thread of its own, an idle one of the pool when there is one, else a new
 * one that joins the pool (up to its maximum; past it, a thread made for that
 * job alone). Never queued: a job may wait for another job (a pipelined call's
 * helpers wait for each other), so each needs a thread of its own.
 *
 * Why: creating a thread took 50-60 us of the caller's time in an engine's
 * process on the H200 host (a pipelined call starts four), and the new thread
 * started later still; handing a job to a sleeping thread is one wake-up. */
#ifndef EGM_COMMON_WORKERS_H
#define EGM_COMMON_WORKERS_H

#include <pthread.h>
#include <stddef.h>
#include <egmstore/status.h>

typedef struct egm_workers egm_workers_t;

/* One job, in memory the caller keeps until egm__workers_join returns. Its
 * fields are the pool's. */
typedef struct {
    void (*fn)(void *arg);
    void *arg;
    int done; /* fn returned (under the pool's lock) */
    int own;  /* on a thread made for it alone: joined */
    pthread_t thread;
} egm_worker_job_t;

/* A pool of at most max_threads threads, none started yet. EGM_ERR_NO_MEMORY. */
egm_status_t egm__workers_create(size_t max_threads, egm_workers_t **workers_p);
/* Ends and joins every thread. No job may be running or start. NULL is a no-op. */
void egm__workers_destroy(egm_workers_t *workers);

/* Runs fn(arg) on a thread (workers NULL: a thread made for it alone). 0, or
 * -1 when no thread could be had: nothing runs, the caller does the work. */
int egm__workers_start(egm_workers_t *workers, egm_worker_job_t *job, void (*fn)(void *arg),
                       void *arg);
/* Waits until a started job's fn has returned. */
void egm__workers_join(egm_workers_t *workers, egm_worker_job_t *job);

/* Threads the pool holds now (idle, busy, or being started), for tests. */
size_t egm__workers_threads(egm_workers_t *workers);

#endif
