/* Integration: the remount fence (docs/consistency.md, "A master restart";
 * client/liveness.c remount_fence) with a real master (location_cache_ms 2000)
 * and a real provider contributing one 1 MiB segment, so that any two objects
 * of 640 KiB overlap: a new object always lands in space an old one held.
 *
 * Reader A (shm, pinging once a minute: it does not learn of the loss by
 * itself) caches the location of key K. The master loses the provider's
 * segment: it restarts with an empty index, or it expires the provider. The
 * provider remounts the same memory under a new id, writer B puts K2 into it,
 * and A gets K again. A's cached location still names the old segment, which
 * A still maps: served from it, A would return K2's bytes. The fence makes the
 * provider wait the bound before remounting, so A's location has run out by
 * then; A asks the master and gets NOT_FOUND.
 *
 * Two checks, neither depending on how fast this machine is:
 * - A's Get of K returns NOT_FOUND or K's own bytes, never other bytes;
 * - order of events: the provider starts its fence only after the loss (t0,
 *   read before the master is killed, or before the stopped provider is let
 *   run again), so the master can list the remounted segment no earlier than
 *   t0 + bound. The first answer that lists it comes back at least that long
 *   after t0, however slow the machine; a fence removed or shortened lets it
 *   come sooner.
 * That A's location really is live across the loss is checked too (a Get
 * served from the cache while the master is down), or the first check could
 * not fail. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/process.h"
#include "support/cluster.h"
#include "support/testutil.h"

#define BOUND_MS 2000 /* the master's location_cache_ms, its largest value */
#define LEN (640 * 1024)
#define WAIT_MS 30000
#define POLL_MS 10

static egm_test_cluster_t cluster;
/* Library clients that never ping during a test: A keeps its cached
 * locations and mappings whatever happens to the master. */
static const char *const quiet[] = {"ping_interval_ms=60000", NULL};
static const char *const provider_flags[] = {"--ping-interval-ms", "100", NULL};

static int start_cluster(const char *const *master_flags)
{
    if (egm_test_start_master(&cluster, master_flags) != 0 ||
        egm_test_start_provider(&cluster, "1MiB", provider_flags) < 0)
        return -1;
    return 0;
}

static int setup_restart(void **state)
{
    (void)state;
    const char *flags[] = {"--location-cache-ms", "2000", NULL};
    return start_cluster(flags);
}

static int setup_expiry(void **state)
{
    (void)state;
    const char *flags[] = {"--location-cache-ms", "2000", "--client-ttl", "1", NULL};
    return start_cluster(flags);
}

static int teardown(void **state)
{
    (void)state;
    /* A test that failed while its provider was stopped: let it take SIGTERM. */
    for (int i = 0; i < cluster.n_providers; i++)
        if (cluster.providers[i].pid > 0)
            egm__process_signal(&cluster.providers[i], SIGCONT);
    egm_test_cluster_stop(&cluster);
    return 0;
}

static unsigned char *object_bytes(unsigned seed)
{
    unsigned char *data = malloc(LEN);
    assert_non_null(data);
    egm_test_fill(data, LEN, seed);
    return data;
}

static void put_object(egm_client_t *c, const char *key, unsigned seed)
{
    unsigned char *data = object_bytes(seed);
    assert_int_equal(egm_put(c, key, data, LEN, NULL), EGM_OK);
    free(data);
}

/* A Get of key (the object of seed) by c: its status. OK must come with the
 * object's own bytes; anything else fails the test at once. */
static egm_status_t get_object(egm_client_t *c, const char *key, unsigned seed, const char *when)
{
    void *data = NULL;
    size_t len = 0;
    egm_status_t st = egm_get(c, key, &data, &len);
    if (st == EGM_OK) {
        unsigned char *want = object_bytes(seed);
        int same = len == LEN && memcmp(data, want, LEN) == 0;
        free(want);
        egm_buffer_free(data);
        if (!same)
            fail_msg("%s: Get of %s answered OK with %zu bytes that are not its value: another "
                     "object's, read through a stale cached location",
                     when, key, len);
    }
    return st;
}

static uint64_t cache_hits(egm_client_t *c)
{
    egm_location_cache_stats_t st;
    egm__location_cache_stats(c->locations, &st);
    return st.hits;
}

/* A's Get of K is served from the location it asked for at asked_ms (no
 * master asked): the location is live across the loss. Checked only when this
 * machine got here well inside the bound (it always does unless stalled). */
static void check_served_from_cache(egm_client_t *a, uint64_t asked_ms, const char *when)
{
    uint64_t elapsed = egm__now_ms() - asked_ms;
    if (elapsed > BOUND_MS / 2) {
        fprintf(stderr, "remount fence: %s: %llu ms after the Get, too late to check the cache\n",
                when, (unsigned long long)elapsed);
        return;
    }
    uint64_t hits = cache_hits(a);
    assert_int_equal(get_object(a, "fence/K", 1, when), EGM_OK);
    assert_int_equal(cache_hits(a), hits + 1);
}

/* Polls the master (through viewer) until it lists a segment; returns when
 * the first answer that listed one came back (egm__now_ms). */
static uint64_t wait_remounted(egm_client_t *viewer)
{
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (egm__now_ms() < deadline) {
        size_t n = egm_test_segment_count(viewer);
        uint64_t answered = egm__now_ms();
        if (n != (size_t)-1 && n > 0)
            return answered;
        egm__sleep_ms(POLL_MS);
    }
    fail_msg("the provider did not remount its segment within %d ms", WAIT_MS);
    return 0;
}

/* c's connection to the master died with it: its first call on it fails
 * (UNREACHABLE) and reconnects. An Exist of a key nobody has reconnects
 * it without touching the location cache. */
static void reconnect(egm_client_t *c)
{
    egm_status_t st = EGM_ERR_UNREACHABLE;
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (st != EGM_ERR_NOT_FOUND && egm__now_ms() < deadline)
        if ((st = egm_exist(c, "fence/nobody")) != EGM_ERR_NOT_FOUND)
            egm__sleep_ms(POLL_MS);
    assert_int_equal(st, EGM_ERR_NOT_FOUND);
}

/* After the remount: B puts K2 into the reused space and A reads K, a few
 * times over the next 300 ms. Only NOT_FOUND (or K's own bytes) is right. */
static void check_no_stale_read(egm_client_t *a, egm_client_t *b)
{
    put_object(b, "fence/K2", 2);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(egm_get(b, "fence/K2", &data, &len), EGM_OK);
    egm_buffer_free(data);
    for (int i = 0; i < 4; i++) {
        egm_status_t st = get_object(a, "fence/K", 1, "after the remount");
        if (st != EGM_OK && st != EGM_ERR_NOT_FOUND)
            fail_msg("Get of fence/K after the remount: %s", egm_status_string(st));
        egm__sleep_ms(100);
    }
}

static void check_fence_order(uint64_t lost_ms, uint64_t listed_ms, const char *loss)
{
    uint64_t after = listed_ms - lost_ms;
    fprintf(stderr, "remount fence: segment listed again %llu ms after %s (bound %d ms)\n",
            (unsigned long long)after, loss, BOUND_MS);
    if (after < BOUND_MS)
        fail_msg("the provider remounted %llu ms after %s, before the cache bound (%d ms) had "
                 "passed: another client's cached location could still be used",
                 (unsigned long long)after, loss, BOUND_MS);
}

/* The master restarts (empty index) on the same port. */
static void test_fence_after_master_restart(void **state)
{
    (void)state;
    uint64_t live_before = egm__alloc_live_count();
    egm_client_t *a = egm_test_client(&cluster, "shm", quiet);
    assert_non_null(a);
    egm_client_t *w = egm_test_client(&cluster, "tcp", quiet);
    assert_non_null(w);
    put_object(w, "fence/K", 1);
    egm_client_destroy(w);

    uint64_t asked_ms = egm__now_ms();
    assert_int_equal(get_object(a, "fence/K", 1, "before the loss"), EGM_OK); /* cached now */
    uint64_t lost_ms = egm__now_ms();
    int code = 0;
    assert_int_equal(egm__process_signal(&cluster.master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.master, 10000, &code), EGM_OK);
    check_served_from_cache(a, asked_ms, "master down");

    unsigned port = cluster.master_port;
    const char *flags[] = {"--location-cache-ms", "2000", NULL};
    assert_int_equal(egm_test_start_master_on(&cluster, port, flags), 0);
    reconnect(a);
    egm_client_t *viewer = egm_test_client(&cluster, "tcp", quiet);
    assert_non_null(viewer);
    uint64_t listed_ms = wait_remounted(viewer);
    egm_client_t *b = egm_test_client(&cluster, "tcp", quiet);
    assert_non_null(b);
    check_no_stale_read(a, b);
    check_fence_order(lost_ms, listed_ms, "the master was killed");

    egm_client_destroy(b);
    egm_client_destroy(viewer);
    egm_client_destroy(a);
    assert_int_equal(egm__alloc_live_count(), live_before);
}

/* The same master expires the provider (stopped longer than client_ttl) and
 * unmounts its segment; once it runs again, the provider sees its own segment
 * retired and remounts it. A keeps asking for K (its cache emptied first, so
 * each Get asks the master) until the segment is gone, so its location is as
 * fresh as the loss allows. */
static void test_fence_after_expiry(void **state)
{
    (void)state;
    uint64_t live_before = egm__alloc_live_count();
    egm_client_t *a = egm_test_client(&cluster, "shm", quiet);
    egm_client_t *b = egm_test_client(&cluster, "tcp", quiet);
    assert_non_null(a);
    assert_non_null(b);
    put_object(b, "fence/K", 1);
    assert_int_equal(get_object(a, "fence/K", 1, "before the loss"), EGM_OK);

    egm_process_t *provider = &cluster.providers[0];
    assert_int_equal(egm__process_signal(provider, SIGSTOP), EGM_OK);
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    uint64_t asked_ms = 0;
    int cached = 0, expired = 0;
    while (!expired && egm__now_ms() < deadline) {
        if ((expired = egm_test_segment_count(b) == 0))
            break;
        egm__location_cache_clear(a->locations);
        asked_ms = egm__now_ms();
        egm_status_t st = get_object(a, "fence/K", 1, "provider stopped");
        cached = st == EGM_OK;
        if (st != EGM_OK && st != EGM_ERR_NOT_FOUND)
            fail_msg("Get of fence/K while the provider is stopped: %s", egm_status_string(st));
        egm__sleep_ms(POLL_MS);
    }
    uint64_t lost_ms = egm__now_ms();
    assert_int_equal(egm__process_signal(provider, SIGCONT), EGM_OK);
    assert_true(expired);
    if (cached)
        check_served_from_cache(a, asked_ms, "segment expired");

    uint64_t listed_ms = wait_remounted(b);
    check_no_stale_read(a, b);
    check_fence_order(lost_ms, listed_ms, "the stopped provider was let run again");

    egm_client_destroy(b);
    egm_client_destroy(a);
    assert_int_equal(egm__alloc_live_count(), live_before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fence_after_master_restart, setup_restart, teardown),
        cmocka_unit_test_setup_teardown(test_fence_after_expiry, setup_expiry, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
