/* Integration: lease-cached locations (docs/consistency.md) with a real master
 * (location_cache_ms 300) and provider. A second Get of a key within the bound
 * makes no GetReplicaList (the master's request counter) and returns the same
 * bytes; past the bound it asks again. A force remove by one client returns
 * only when no other client can still serve the key from its cache: a Get that
 * starts after it answers NOT_FOUND, never the old bytes. A plain remove still
 * refuses a leased key, and the cached Get keeps working. The remover's own
 * cache forgets at once. A client with location_cache_entries 0 always asks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <pthread.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/process.h"
#include "support/cluster.h"
#include "support/model.h"
#include "support/testutil.h"

#define BOUND_MS 300
#define LEN 4096

static egm_test_cluster_t cluster;
static unsigned master_http;

static int setup(void **state)
{
    (void)state;
    const char *flags[] = {"--location-cache-ms", "300", NULL};
    if (egm_test_start_master_http(&cluster, flags, &master_http) != 0 ||
        egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static long long lists(void)
{
    long long n = egm_model_master_rpc_count(master_http, "GetReplicaList");
    assert_true(n >= 0);
    return n;
}

static void put_key(egm_client_t *c, const char *key, unsigned seed)
{
    assert_int_equal(egm_test_put_seeded(c, key, LEN, seed), EGM_OK);
}

/* A get of key: its status; OK only with seed's LEN bytes. */
static egm_status_t get_key(egm_client_t *c, const char *key, unsigned seed)
{
    return egm_test_get_seeded(c, key, LEN, seed);
}

static void test_second_get_skips_the_master(void **state)
{
    (void)state;
    egm_client_t *a = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(a);
    assert_non_null(b);
    put_key(a, "hot", 1);

    long long before = lists();
    assert_int_equal(get_key(b, "hot", 1), EGM_OK);
    assert_int_equal(get_key(b, "hot", 1), EGM_OK);
    assert_int_equal(get_key(b, "hot", 1), EGM_OK);
    assert_int_equal(lists() - before, 1); /* the first asked; the others were cached */

    /* Past the bound the location is not used: the master is asked again. */
    egm__sleep_ms(BOUND_MS + 50);
    before = lists();
    assert_int_equal(get_key(b, "hot", 1), EGM_OK);
    assert_int_equal(lists() - before, 1);

    /* Off: every get asks. */
    const char *off[] = {"location_cache_entries=0", NULL};
    egm_client_t *c = egm_test_client(&cluster, "shm", off);
    assert_non_null(c);
    before = lists();
    assert_int_equal(get_key(c, "hot", 1), EGM_OK);
    assert_int_equal(get_key(c, "hot", 1), EGM_OK);
    assert_int_equal(lists() - before, 2);

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(a, 1, &removed), EGM_OK);
    egm_client_destroy(c);
    egm_client_destroy(b);
    egm_client_destroy(a);
}

/* Client b has the key's location cached; a force-removes the key (and puts
 * another object, which may take the freed space once the lease ends). Every
 * get b starts after the remove returned answers NOT_FOUND: with the remove
 * returning before b's cached location ran out, b would read the old bytes
 * (its lease still holds the space) and answer OK. */
static void test_force_remove_outlasts_other_caches(void **state)
{
    (void)state;
    egm_client_t *a = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(a);
    assert_non_null(b);
    for (int round = 0; round < 3; round++) {
        char key[32];
        snprintf(key, sizeof(key), "forced/%d", round);
        put_key(a, key, 10 + (unsigned)round);
        assert_int_equal(get_key(b, key, 10 + (unsigned)round), EGM_OK); /* cached now */
        assert_int_equal(egm_remove(a, key, 1), EGM_OK);
        assert_int_equal(get_key(b, key, 10 + (unsigned)round), EGM_ERR_NOT_FOUND);
        assert_int_equal(get_key(a, key, 10 + (unsigned)round), EGM_ERR_NOT_FOUND);
    }
    /* The batch form and remove_all likewise. */
    const char *keys[] = {"forced/b0", "forced/b1"};
    put_key(a, keys[0], 20);
    put_key(a, keys[1], 21);
    assert_int_equal(get_key(b, keys[0], 20), EGM_OK);
    assert_int_equal(get_key(b, keys[1], 21), EGM_OK);
    egm_status_t results[2];
    assert_int_equal(egm_batch_remove(a, 2, keys, 1, results), EGM_OK);
    assert_int_equal(results[0], EGM_OK);
    assert_int_equal(results[1], EGM_OK);
    assert_int_equal(get_key(b, keys[0], 20), EGM_ERR_NOT_FOUND);
    assert_int_equal(get_key(b, keys[1], 21), EGM_ERR_NOT_FOUND);
    put_key(a, "forced/all", 22);
    assert_int_equal(get_key(b, "forced/all", 22), EGM_OK);
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(a, 1, &removed), EGM_OK);
    assert_int_equal(removed, 1);
    assert_int_equal(get_key(b, "forced/all", 22), EGM_ERR_NOT_FOUND);
    egm_client_destroy(b);
    egm_client_destroy(a);
}

/* A second force remover (or a retried call) finds the key gone: it must wait
 * all the same, or a reader's cached location outlives its return. b caches
 * the key; a force-removes it from another thread (it waits the bound); c
 * force-removes it too, answered NOT_FOUND. A get b starts after c returned
 * answers NOT_FOUND. */
typedef struct {
    egm_client_t *client;
    const char *key;
    egm_status_t status;
} remover_t;

static void *remove_main(void *arg)
{
    remover_t *r = arg;
    r->status = egm_remove(r->client, r->key, 1);
    return NULL;
}

static void test_second_force_remover_waits_too(void **state)
{
    (void)state;
    egm_client_t *a = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *c = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    put_key(a, "twice", 40);
    assert_int_equal(get_key(b, "twice", 40), EGM_OK); /* cached now */
    remover_t first = {.client = a, .key = "twice"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, remove_main, &first), 0);
    /* Wait until the key is gone at the master (a's remove is then sleeping). */
    for (int i = 0; i < 2000 && egm_exist(c, "twice") == EGM_OK; i++)
        egm__sleep_ms(1);
    assert_int_equal(egm_remove(c, "twice", 1), EGM_ERR_NOT_FOUND);
    assert_int_equal(get_key(b, "twice", 40), EGM_ERR_NOT_FOUND);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(first.status, EGM_OK);
    egm_client_destroy(c);
    egm_client_destroy(b);
    egm_client_destroy(a);
}

/* A plain remove refuses a key under a lease (as before caching); the reader's
 * cached location keeps serving the unchanged object. The remover's own cached
 * location goes with its remove. */
static void test_plain_remove_and_own_cache(void **state)
{
    (void)state;
    egm_client_t *a = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(a);
    assert_non_null(b);
    put_key(a, "leased", 30);
    assert_int_equal(get_key(b, "leased", 30), EGM_OK);
    assert_int_equal(egm_remove(a, "leased", 0), EGM_ERR_HAS_LEASE);
    long long before = lists();
    assert_int_equal(get_key(b, "leased", 30), EGM_OK);
    assert_int_equal(lists(), before);
    /* b removes it (force) itself: its own cache forgets the key at once (its
     * entry is gone, not left to run out during the wait). */
    egm_location_cache_stats_t st0, st1;
    egm__location_cache_stats(b->locations, &st0);
    assert_int_equal(egm_remove(b, "leased", 1), EGM_OK);
    egm__location_cache_stats(b->locations, &st1);
    assert_int_equal(st1.invalidations - st0.invalidations, 1);
    assert_int_equal(get_key(b, "leased", 30), EGM_ERR_NOT_FOUND);
    egm_client_destroy(b);
    egm_client_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_second_get_skips_the_master),
        cmocka_unit_test(test_force_remove_outlasts_other_caches),
        cmocka_unit_test(test_second_force_remover_waits_too),
        cmocka_unit_test(test_plain_remove_and_own_cache),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
