/* Integration: an ExistKey caches the locations it is answered (docs/consistency.md,
 * "Lease-cached locations"), with a real master (location_cache_ms 2000) and
 * provider. Engines look keys up (is_exist, batch_is_exist) just before they
 * read them; the read that follows then makes no GetReplicaList:
 * - a single get after egm_exist, counted at the master;
 * - a batch large enough to run pipelined, after egm_batch_exist of all of it
 *   (no GetReplicaList), of its first chunks only (one per chunk not looked up:
 *   the chunk plan says how many), and with no lookup (one per chunk);
 * - a client with location_cache_entries 0 still asks for every get;
 * - a cached location that fails (an offset past its segment's end, put into
 *   the cache by the test) is dropped and the master asked again, for a single
 *   get and for one chunk of a pipelined batch (the failure drops the lookup:
 *   chunks not yet prepared ask too): every byte is still right;
 * - another client's force remove after the lookup: a get that starts after the
 *   remove returned answers NOT_FOUND, never the old bytes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/process.h"
#include "rpc/command.h"
#include "support/cluster.h"
#include "support/model.h"

#define N_KEYS (2 * EGM_PIPELINE_CHUNK_PARTS + 977) /* six chunks, one part a key */
#define BLOCK 192
#define LEN 4096

static egm_test_cluster_t cluster;
static unsigned master_http;

static int setup(void **state)
{
    (void)state;
    const char *flags[] = {"--location-cache-ms", "2000", NULL};
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

/* Moves key's cached location past its segment's end: a copy from it fails. */
static void spoil_cached(egm_client_t *c, const char *key)
{
    egm_location_t loc;
    egm_segment_desc_t seg;
    assert_true(egm__location_cache_get(c->locations, key, egm__now_ms(), &loc));
    assert_true(egm__location_cache_segment(c->locations, loc.replicas[0].segment, &seg));
    loc.replicas[0].offset = seg.size;
    const egm_segment_desc_t *segs[] = {&seg};
    loc.n_replicas = 1;
    egm__location_cache_put(c->locations, key, &loc, segs,
                            egm__location_cache_generation(c->locations));
}

/* Keeps, as the newest lookup of keys[0..n), the master's answer with key
 * `bad`'s location moved past its segment's end. */
static void spoil_lookup(egm_client_t *c, size_t n, const char *const *keys, size_t bad)
{
    egm_keys_reply_t *reply = NULL;
    egm_segment_desc_t *descs = NULL;
    uint64_t generation = egm__location_cache_generation(c->locations);
    uint64_t asked_ms = egm__now_ms();
    assert_int_equal(
        egm__client_keys_call(c, EGM_RPC_EXIST_KEY, n, keys, EGM_KEYS_CALL_LOCATIONS, &reply),
        EGM_OK);
    assert_int_equal(egm__client_reply_segments(reply, &descs), EGM_OK);
    assert_int_equal(reply->results[bad].status, EGM_OK);
    egm_replica_desc_t *rep = &reply->replicas[reply->results[bad].replica_first];
    const egm_segment_desc_t *seg = egm__segment_desc_find(descs, reply->n_segments, rep->segment);
    assert_non_null(seg);
    rep->offset = seg->size;
    egm__location_cache_keep_lookup(c->locations, n, keys, reply, descs, reply->n_segments,
                                    asked_ms, generation);
    egm_free(descs);
    egm__keys_reply_free(reply);
}

static void test_exist_then_get(void **state)
{
    (void)state;
    egm_client_t *a = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    const char *off[] = {"location_cache_entries=0", NULL};
    egm_client_t *c = egm_test_client(&cluster, "shm", off);
    assert_non_null(a);
    assert_non_null(b);
    assert_non_null(c);
    assert_int_equal(egm_test_put_seeded(a, "looked-up", LEN, 1), EGM_OK);

    long long before = lists();
    assert_int_equal(egm_exist(b, "looked-up"), EGM_OK);
    assert_int_equal(egm_test_get_seeded(b, "looked-up", LEN, 1), EGM_OK);
    assert_int_equal(lists(), before); /* served from the lookup's location */

    /* Without a cache the lookup keeps nothing: the get asks. */
    before = lists();
    assert_int_equal(egm_exist(c, "looked-up"), EGM_OK);
    assert_int_equal(egm_test_get_seeded(c, "looked-up", LEN, 1), EGM_OK);
    assert_int_equal(lists() - before, 1);

    /* A location that fails is dropped; the master is asked, the bytes are right. */
    assert_int_equal(egm_exist(b, "looked-up"), EGM_OK);
    spoil_cached(b, "looked-up");
    before = lists();
    assert_int_equal(egm_test_get_seeded(b, "looked-up", LEN, 1), EGM_OK);
    assert_int_equal(lists() - before, 1);

    /* A missing key caches nothing and still misses. */
    assert_int_equal(egm_exist(b, "never-put"), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_test_get_seeded(b, "never-put", LEN, 1), EGM_ERR_NOT_FOUND);

    /* Another client's force remove after b's lookup: a get b starts after the
     * remove returned must not be served from b's location (its lease still
     * holds the old bytes). */
    assert_int_equal(egm_exist(b, "looked-up"), EGM_OK);
    assert_int_equal(egm_remove(a, "looked-up", 1), EGM_OK);
    assert_int_equal(egm_test_get_seeded(b, "looked-up", LEN, 1), EGM_ERR_NOT_FOUND);

    egm_client_destroy(c);
    egm_client_destroy(b);
    egm_client_destroy(a);
}

typedef struct {
    char (*names)[32];
    const char **keys;
    void **srcs, **dsts;
    size_t *lens, *sizes;
    egm_status_t *results;
    unsigned char *src, *dst;
} batch_t;

static void batch_init(batch_t *t)
{
    t->names = calloc(N_KEYS, sizeof(*t->names));
    t->keys = calloc(N_KEYS, sizeof(*t->keys));
    t->srcs = calloc(N_KEYS, sizeof(*t->srcs));
    t->dsts = calloc(N_KEYS, sizeof(*t->dsts));
    t->lens = calloc(N_KEYS, sizeof(*t->lens));
    t->sizes = calloc(N_KEYS, sizeof(*t->sizes));
    t->results = calloc(N_KEYS, sizeof(*t->results));
    t->src = malloc((size_t)N_KEYS * BLOCK);
    t->dst = malloc((size_t)N_KEYS * BLOCK);
    assert_true(t->names && t->keys && t->srcs && t->dsts && t->lens && t->sizes && t->results &&
                t->src && t->dst);
    egm_test_fill(t->src, (size_t)N_KEYS * BLOCK, 21);
    for (size_t i = 0; i < N_KEYS; i++) {
        snprintf(t->names[i], sizeof(t->names[i]), "exist/%zu", i);
        t->keys[i] = t->names[i];
        t->srcs[i] = t->src + (N_KEYS - 1 - i) * BLOCK;
        t->dsts[i] = t->dst + (N_KEYS - 1 - i) * BLOCK;
        t->lens[i] = BLOCK;
    }
}

static void batch_free(batch_t *t)
{
    free(t->names);
    free(t->keys);
    free(t->srcs);
    free(t->dsts);
    free(t->lens);
    free(t->sizes);
    free(t->results);
    free(t->src);
    free(t->dst);
}

/* A batch get of every key into t->dst: each key OK with its own bytes. */
static void get_all(egm_client_t *c, batch_t *t)
{
    memset(t->dst, 0, (size_t)N_KEYS * BLOCK);
    assert_int_equal(egm_batch_get_into(c, N_KEYS, t->keys, t->dsts, t->lens, t->sizes, t->results),
                     EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++) {
        if (t->results[i] != EGM_OK)
            fail_msg("get key %zu: %s", i, egm_status_string(t->results[i]));
        assert_int_equal(t->sizes[i], BLOCK);
        if (memcmp(t->dsts[i], t->srcs[i], BLOCK) != 0)
            fail_msg("get key %zu: wrong bytes", i);
    }
}

static void test_exist_then_pipelined_get(void **state)
{
    (void)state;
    batch_t t;
    batch_init(&t);
    egm_client_t *w = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *r = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(w);
    assert_non_null(r);
    assert_int_equal(egm_register_buffer(w, t.src, (size_t)N_KEYS * BLOCK), EGM_OK);
    assert_int_equal(egm_register_buffer(r, t.dst, (size_t)N_KEYS * BLOCK), EGM_OK);
    assert_int_equal(
        egm_batch_put_from(w, N_KEYS, t.keys, (const void *const *)t.srcs, t.lens, NULL, t.results),
        EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++)
        assert_int_equal(t.results[i], EGM_OK);

    /* How the get is cut: one part a key. */
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(N_KEYS, NULL, NULL, &plan), EGM_OK);
    assert_true(egm__chunk_plan_pipelined(&plan));
    size_t n_chunks = plan.n_chunks, looked_up = egm__chunk_first(&plan, 3);
    assert_true(n_chunks > 3);
    egm__chunk_plan_free(&plan);

    /* No lookup: one GetReplicaList per chunk. */
    long long before = lists();
    get_all(r, &t);
    assert_int_equal(lists() - before, (long long)n_chunks);

    /* All looked up: none. */
    assert_int_equal(egm_batch_exist(r, N_KEYS, t.keys, t.results), EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++)
        assert_int_equal(t.results[i], EGM_OK);
    before = lists();
    get_all(r, &t);
    assert_int_equal(lists() - before, 0);

    /* The first three chunks looked up (by another client): the others ask. */
    egm_client_t *r2 = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(r2);
    assert_int_equal(egm_register_buffer(r2, t.dst, (size_t)N_KEYS * BLOCK), EGM_OK);
    assert_int_equal(egm_batch_exist(r2, looked_up, t.keys, t.results), EGM_OK);
    before = lists();
    get_all(r2, &t);
    assert_int_equal(lists() - before, (long long)(n_chunks - 3));

    /* One spoiled location in chunk 1: that chunk asks again, and the failure
     * drops the lookup, so chunks not yet prepared then ask too. */
    spoil_lookup(r, N_KEYS, t.keys, egm__pipeline_chunk_cap(0) + 7);
    before = lists();
    get_all(r, &t);
    long long asked = lists() - before;
    assert_true(asked >= 1 && asked <= (long long)n_chunks);

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(w, 1, &removed), EGM_OK);
    assert_int_equal(removed, N_KEYS);
    assert_int_equal(egm_unregister_buffer(r2, t.dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(r, t.dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(w, t.src), EGM_OK);
    egm_client_destroy(r2);
    egm_client_destroy(r);
    egm_client_destroy(w);
    batch_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exist_then_get),
        cmocka_unit_test(test_exist_then_pipelined_get),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
