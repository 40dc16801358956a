/* Reactor: an fd callback fires when a pipe becomes readable; removal inside
 * the callback is safe and stops delivery; periodic timers fire repeatedly and a
 * timer callback may remove another timer; tasks posted from other threads run
 * on the loop in order; stop works from another thread and from a signal
 * handler; a second add of one fd is refused; with a spin set, events are
 * dispatched whether they come while the loop polls or sleeps. Every wait is
 * bounded by a watchdog timer. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/clock.h"
#include "common/reactor.h"

#define WATCHDOG_MS 20000

static int watchdog_fired;

static void watchdog(egm_reactor_t *r, void *arg)
{
    (void)arg;
    watchdog_fired = 1;
    egm__reactor_stop(r);
}

/* Runs the loop with a watchdog and fails the test if the watchdog ended it. */
static void run_bounded(egm_reactor_t *r)
{
    uint64_t wd;
    watchdog_fired = 0;
    assert_int_equal(egm__reactor_add_timer(r, WATCHDOG_MS, watchdog, NULL, &wd), EGM_OK);
    assert_int_equal(egm__reactor_run(r), EGM_OK);
    assert_int_equal(egm__reactor_remove_timer(r, wd), EGM_OK);
    assert_int_equal(watchdog_fired, 0);
}

typedef struct {
    int fd;
    int calls;
    uint32_t events;
    char got[16];
} pipe_ctx_t;

static void on_pipe(egm_reactor_t *r, int fd, uint32_t events, void *arg)
{
    pipe_ctx_t *ctx = arg;
    ctx->calls++;
    ctx->events |= events;
    assert_int_equal(fd, ctx->fd);
    ssize_t n = read(fd, ctx->got, sizeof(ctx->got) - 1);
    assert_true(n > 0);
    ctx->got[n] = '\0';
    /* Removing itself from inside the callback must be safe. */
    assert_int_equal(egm__reactor_remove(r, fd), EGM_OK);
    egm__reactor_stop(r);
}

static void stop_timer(egm_reactor_t *r, void *arg)
{
    (void)arg;
    egm__reactor_stop(r);
}

static void test_fd_callback_via_pipe(void **state)
{
    (void)state;
    egm_reactor_t *r;
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    pipe_ctx_t ctx = {.fd = p[0]};
    assert_int_equal(egm__reactor_add(r, p[0], EGM_EV_READ, on_pipe, &ctx), EGM_OK);
    assert_int_equal(egm__reactor_add(r, p[0], EGM_EV_READ, on_pipe, &ctx), EGM_ERR_EXISTS);
    assert_int_equal(write(p[1], "hello", 5), 5);
    run_bounded(r);
    assert_int_equal(ctx.calls, 1);
    assert_true(ctx.events & EGM_EV_READ);
    assert_string_equal(ctx.got, "hello");
    assert_int_equal(egm__reactor_remove(r, p[0]), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__reactor_modify(r, p[0], EGM_EV_READ), EGM_ERR_NOT_FOUND);

    /* Once removed, more data is not delivered: the loop polls the readable pipe
     * until a timer stops it, and the callback stays silent. */
    assert_int_equal(write(p[1], "again", 5), 5);
    uint64_t id;
    assert_int_equal(egm__reactor_add_timer(r, 20, stop_timer, NULL, &id), EGM_OK);
    run_bounded(r);
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_OK);
    assert_int_equal(ctx.calls, 1);
    egm__reactor_destroy(r);
    close(p[0]);
    close(p[1]);
}

typedef struct {
    int calls;
} write_ctx_t;

static void on_writable(egm_reactor_t *r, int fd, uint32_t events, void *arg)
{
    write_ctx_t *ctx = arg;
    assert_true(events & EGM_EV_WRITE);
    ctx->calls++;
    /* An empty pipe stays writable (level-triggered), so without this modify the
     * callback would run again on every loop round until the stop timer. */
    assert_int_equal(egm__reactor_modify(r, fd, EGM_EV_READ), EGM_OK);
}

static void test_modify_interest(void **state)
{
    (void)state;
    egm_reactor_t *r;
    int p[2];
    uint64_t id;
    assert_int_equal(pipe(p), 0);
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    write_ctx_t ctx = {0};
    assert_int_equal(egm__reactor_add(r, p[1], EGM_EV_WRITE, on_writable, &ctx), EGM_OK);
    assert_int_equal(egm__reactor_add_timer(r, 30, stop_timer, NULL, &id), EGM_OK);
    run_bounded(r);
    assert_int_equal(ctx.calls, 1);
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_OK);
    egm__reactor_destroy(r); /* destroy with an fd still registered frees its record */
    close(p[0]);
    close(p[1]);
}

typedef struct {
    int fires;
    int target;
    uint64_t other_id;
    int other_fires;
} timer_ctx_t;

static void on_other(egm_reactor_t *r, void *arg)
{
    (void)r;
    timer_ctx_t *ctx = arg;
    ctx->other_fires++;
}

static void on_timer(egm_reactor_t *r, void *arg)
{
    timer_ctx_t *ctx = arg;
    ctx->fires++;
    if (ctx->other_id != 0) {
        /* Removing a different timer from inside a callback must be safe. */
        assert_int_equal(egm__reactor_remove_timer(r, ctx->other_id), EGM_OK);
        ctx->other_id = 0;
    }
    if (ctx->fires == ctx->target)
        egm__reactor_stop(r);
}

static void test_periodic_timer(void **state)
{
    (void)state;
    egm_reactor_t *r;
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    timer_ctx_t ctx = {.target = 5};
    uint64_t id, other;
    /* Read before the timers are added: the fifth firing is then at least 5 ms
     * later by construction, however slow the machine. */
    uint64_t t0 = egm__now_ms();
    /* Added first so it sits behind the main timer in the list; same period. */
    assert_int_equal(egm__reactor_add_timer(r, 1, on_other, &ctx, &other), EGM_OK);
    assert_int_equal(egm__reactor_add_timer(r, 1, on_timer, &ctx, &id), EGM_OK);
    assert_true(id != other);
    ctx.other_id = other;
    run_bounded(r);
    assert_int_equal(ctx.fires, 5);
    assert_true(ctx.other_fires <= 1);
    assert_true(egm__now_ms() - t0 >= 5); /* five 1 ms periods cannot be faster */
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_OK);
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__reactor_remove_timer(r, other), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__reactor_add_timer(r, 0, on_timer, &ctx, &id), EGM_ERR_INVALID_ARG);
    egm__reactor_destroy(r);
}

static void on_self_removing_timer(egm_reactor_t *r, void *arg)
{
    uint64_t *id = arg;
    assert_int_equal(egm__reactor_remove_timer(r, *id), EGM_OK);
    egm__reactor_stop(r);
}

static void test_timer_removes_itself(void **state)
{
    (void)state;
    egm_reactor_t *r;
    uint64_t id;
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    assert_int_equal(egm__reactor_add_timer(r, 1, on_self_removing_timer, &id, &id), EGM_OK);
    run_bounded(r);
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_ERR_NOT_FOUND);
    egm__reactor_destroy(r);
}

#define POSTERS 4
#define POSTS 500

typedef struct {
    egm_reactor_t *r;
    pthread_t loop_thread;
    int per_thread_next[POSTERS]; /* next expected sequence number per poster */
    int done;
    int order_ok;
    int wrong_thread;
} post_ctx_t;

typedef struct {
    post_ctx_t *ctx;
    int thread;
    int seq;
} post_arg_t;

static post_arg_t post_args[POSTERS][POSTS];

static void on_task(void *arg)
{
    post_arg_t *a = arg;
    post_ctx_t *ctx = a->ctx;
    if (!pthread_equal(pthread_self(), ctx->loop_thread))
        ctx->wrong_thread = 1;
    if (ctx->per_thread_next[a->thread] != a->seq)
        ctx->order_ok = 0;
    ctx->per_thread_next[a->thread] = a->seq + 1;
    if (++ctx->done == POSTERS * POSTS)
        egm__reactor_stop(ctx->r);
}

static void *poster(void *arg)
{
    post_arg_t *args = arg;
    for (int i = 0; i < POSTS; i++)
        if (egm__reactor_post(args[i].ctx->r, on_task, &args[i]) != EGM_OK)
            return (void *)1;
    return NULL;
}

static void test_post_from_other_threads(void **state)
{
    (void)state;
    post_ctx_t ctx = {.order_ok = 1};
    assert_int_equal(egm__reactor_create(&ctx.r), EGM_OK);
    ctx.loop_thread = pthread_self();
    pthread_t t[POSTERS];
    for (int i = 0; i < POSTERS; i++) {
        for (int j = 0; j < POSTS; j++)
            post_args[i][j] = (post_arg_t){.ctx = &ctx, .thread = i, .seq = j};
        assert_int_equal(pthread_create(&t[i], NULL, poster, post_args[i]), 0);
    }
    run_bounded(ctx.r);
    for (int i = 0; i < POSTERS; i++) {
        void *ret;
        assert_int_equal(pthread_join(t[i], &ret), 0);
        assert_null(ret);
    }
    assert_int_equal(ctx.done, POSTERS * POSTS);
    assert_int_equal(ctx.order_ok, 1);
    assert_int_equal(ctx.wrong_thread, 0);
    egm__reactor_destroy(ctx.r);
}

static void *stopper(void *arg)
{
    egm__sleep_ms(20);
    egm__reactor_stop(arg);
    return NULL;
}

static void test_stop_from_other_thread(void **state)
{
    (void)state;
    egm_reactor_t *r;
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, stopper, r), 0);
    run_bounded(r); /* nothing registered: only the stop can end it */
    assert_int_equal(pthread_join(t, NULL), 0);
    /* The reactor can run again after a stop. */
    assert_int_equal(pthread_create(&t, NULL, stopper, r), 0);
    run_bounded(r);
    assert_int_equal(pthread_join(t, NULL), 0);
    egm__reactor_destroy(r);
}

typedef struct {
    int fd;    /* the pipe's write end */
    int calls; /* read by the writer thread: atomic accesses */
    int rounds;
} spin_ctx_t;

static void on_spin_pipe(egm_reactor_t *r, int fd, uint32_t events, void *arg)
{
    spin_ctx_t *ctx = arg;
    char c;
    assert_true(events & EGM_EV_READ);
    assert_int_equal(read(fd, &c, 1), 1);
    if (__atomic_add_fetch(&ctx->calls, 1, __ATOMIC_RELEASE) == ctx->rounds)
        egm__reactor_stop(r);
}

/* One byte at a time, each after the loop read the one before: every round
 * finds the loop spinning (the last wakeup had an event) or asleep after it. */
static void *spin_writer(void *arg)
{
    spin_ctx_t *ctx = arg;
    for (int i = 0; i < ctx->rounds; i++) {
        if (write(ctx->fd, "x", 1) != 1)
            abort(); /* not a cmocka assert: this is not the test's thread */
        while (__atomic_load_n(&ctx->calls, __ATOMIC_ACQUIRE) <= i)
            if (i % 2 == 1)
                egm__sleep_ms(1); /* every other round: longer than the spin, so it sleeps */
    }
    return NULL;
}

/* With a spin set: every event is dispatched whether it comes while the loop
 * polls or while it sleeps, timers still fire, and a stop ends a spin. */
static void test_spin_dispatches_and_stops(void **state)
{
    (void)state;
    egm_reactor_t *r;
    int p[2];
    pthread_t t;
    assert_int_equal(pipe(p), 0);
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    egm__reactor_set_spin(r, 500);
    spin_ctx_t ctx = {.fd = p[1], .rounds = 200};
    assert_int_equal(egm__reactor_add(r, p[0], EGM_EV_READ, on_spin_pipe, &ctx), EGM_OK);
    assert_int_equal(pthread_create(&t, NULL, spin_writer, &ctx), 0);
    run_bounded(r);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(__atomic_load_n(&ctx.calls, __ATOMIC_ACQUIRE), 200);

    /* A timer fires while the loop spins after an event. */
    timer_ctx_t tctx = {.target = 3};
    uint64_t id, other;
    assert_int_equal(egm__reactor_add_timer(r, 1000000, on_other, &tctx, &other), EGM_OK);
    tctx.other_id = other;
    assert_int_equal(egm__reactor_add_timer(r, 1, on_timer, &tctx, &id), EGM_OK);
    assert_int_equal(write(p[1], "y", 1), 1);
    ctx.rounds = 0; /* never equal again: the timer stops the loop */
    run_bounded(r);
    assert_int_equal(tctx.fires, 3);
    assert_int_equal(egm__reactor_remove_timer(r, id), EGM_OK);

    /* A stop from another thread ends the loop, spinning or not. */
    assert_int_equal(pthread_create(&t, NULL, stopper, r), 0);
    run_bounded(r);
    assert_int_equal(pthread_join(t, NULL), 0);
    egm__reactor_destroy(r);
    close(p[0]);
    close(p[1]);
}

static egm_reactor_t *signal_reactor;

static void on_signal(int sig)
{
    (void)sig;
    int saved = errno;
    egm__reactor_stop(signal_reactor);
    errno = saved;
}

static void *signaller(void *arg)
{
    egm__sleep_ms(20);
    pthread_kill(*(pthread_t *)arg, SIGUSR1);
    return NULL;
}

static void test_stop_from_signal_handler(void **state)
{
    (void)state;
    assert_int_equal(egm__reactor_create(&signal_reactor), EGM_OK);
    struct sigaction sa, old;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGUSR1, &sa, &old), 0);
    pthread_t self = pthread_self(), t;
    assert_int_equal(pthread_create(&t, NULL, signaller, &self), 0);
    run_bounded(signal_reactor);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(sigaction(SIGUSR1, &old, NULL), 0);
    egm__reactor_destroy(signal_reactor);
    signal_reactor = NULL;
}

static void never_run(void *arg)
{
    *(int *)arg = 1;
}

static void test_destroy_drops_pending_tasks(void **state)
{
    (void)state;
    egm_reactor_t *r;
    int ran = 0;
    assert_int_equal(egm__reactor_create(&r), EGM_OK);
    assert_int_equal(egm__reactor_post(r, never_run, &ran), EGM_OK);
    egm__reactor_destroy(r); /* frees the queued task without running it */
    assert_int_equal(ran, 0);
    egm__reactor_destroy(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fd_callback_via_pipe, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_modify_interest, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_periodic_timer, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_timer_removes_itself, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_post_from_other_threads, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_stop_from_other_thread, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_spin_dispatches_and_stops, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_stop_from_signal_handler, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_destroy_drops_pending_tasks, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
