/* Unit: the thread pool (src/common/workers.[ch]): every job runs once, on a
 * thread other than the caller's; jobs that wait for each other all run at
 * once (none is queued behind another); idle threads are reused rather than
 * made again; past the pool's maximum a job gets a thread of its own; a NULL
 * pool makes a thread per job; destroy ends idle threads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include "common/alloc.h"
#include "common/workers.h"

#define N_JOBS 6

typedef struct {
    atomic_int runs;
    pthread_t thread;
    atomic_int *arrived; /* shared: jobs that reached the barrier */
    int wait_for;        /* this job returns once this many have arrived */
} probe_t;

static void probe_job(void *arg)
{
    probe_t *pr = arg;
    pr->thread = pthread_self();
    atomic_fetch_add(&pr->runs, 1);
    if (pr->arrived != NULL) {
        atomic_fetch_add(pr->arrived, 1);
        while (atomic_load(pr->arrived) < pr->wait_for)
            sched_yield();
    }
}

/* N_JOBS jobs that each wait until all have started: they finish only when
 * each had a thread at once. */
static void run_barrier(egm_workers_t *w)
{
    static probe_t pr[N_JOBS];
    egm_worker_job_t jobs[N_JOBS];
    atomic_int arrived = 0;
    for (int i = 0; i < N_JOBS; i++) {
        atomic_store(&pr[i].runs, 0);
        pr[i].arrived = &arrived;
        pr[i].wait_for = N_JOBS;
        assert_int_equal(egm__workers_start(w, &jobs[i], probe_job, &pr[i]), 0);
    }
    for (int i = 0; i < N_JOBS; i++) {
        egm__workers_join(w, &jobs[i]);
        assert_int_equal(atomic_load(&pr[i].runs), 1);
        assert_false(pthread_equal(pr[i].thread, pthread_self()));
    }
    assert_int_equal(atomic_load(&arrived), N_JOBS);
}

static void test_jobs_run_at_once_and_threads_are_reused(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    egm_workers_t *w;
    assert_int_equal(egm__workers_create(16, &w), EGM_OK);
    assert_int_equal(egm__workers_threads(w), 0);
    run_barrier(w);
    assert_int_equal(egm__workers_threads(w), N_JOBS);
    /* Again, and one at a time: the same threads serve. */
    run_barrier(w);
    for (int i = 0; i < 20; i++) {
        probe_t pr = {0};
        egm_worker_job_t job;
        assert_int_equal(egm__workers_start(w, &job, probe_job, &pr), 0);
        egm__workers_join(w, &job);
        assert_int_equal(atomic_load(&pr.runs), 1);
    }
    assert_int_equal(egm__workers_threads(w), N_JOBS);
    egm__workers_destroy(w);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_past_the_maximum_and_without_a_pool(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    egm_workers_t *w;
    assert_int_equal(egm__workers_create(2, &w), EGM_OK);
    run_barrier(w); /* 2 pooled threads, 4 of their own */
    assert_int_equal(egm__workers_threads(w), 2);
    egm__workers_destroy(w);
    run_barrier(NULL);
    egm__workers_destroy(NULL);
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jobs_run_at_once_and_threads_are_reused),
        cmocka_unit_test(test_past_the_maximum_and_without_a_pool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
