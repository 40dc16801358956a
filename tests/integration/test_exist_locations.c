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
#include "client/parts.h"
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/process.h"
#include "rpc/command.h"
#include "support/cluster.h"
#include "support/model.h"

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

/* vLLM's shape: keys of PARTS pieces, enough parts to run pipelined. */
#define N_KEYS 48
#define PARTS 64
#define PART 48

typedef struct {
    char names[N_KEYS][32];
    const char *keys[N_KEYS];
    size_t counts[N_KEYS];
    void *src_parts[N_KEYS * PARTS], *dst_parts[N_KEYS * PARTS];
    size_t lens[N_KEYS * PARTS], sizes[N_KEYS];
    egm_status_t results[N_KEYS];
    unsigned char src[N_KEYS * PARTS * PART], dst[N_KEYS * PARTS * PART];
} batch_t;

static batch_t *batch_new(void)
{
    batch_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    egm_test_fill(t->src, sizeof(t->src), 21);
    for (size_t i = 0; i < N_KEYS; i++) {
        snprintf(t->names[i], sizeof(t->names[i]), "exist/%zu", i);
        t->keys[i] = t->names[i];
        t->counts[i] = PARTS;
        /* Keys' pieces in reversed places, as regions of a KV cache. */
        for (size_t p = 0; p < PARTS; p++) {
            size_t q = i * PARTS + p, at = ((N_KEYS - 1 - i) * PARTS + p) * PART;
            t->src_parts[q] = t->src + at;
            t->dst_parts[q] = t->dst + at;
            t->lens[q] = PART;
        }
    }
    return t;
}

/* A batch get of every key into t->dst: each key OK with its own bytes. */
static void get_all(egm_client_t *c, batch_t *t)
{
    memset(t->dst, 0, sizeof(t->dst));
    assert_int_equal(egm_batch_get_into_parts(c, N_KEYS, t->keys, t->counts, t->dst_parts, t->lens,
                                              t->sizes, t->results),
                     EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++) {
        if (t->results[i] != EGM_OK)
            fail_msg("get key %zu: %s", i, egm_status_string(t->results[i]));
        assert_int_equal(t->sizes[i], PARTS * PART);
    }
    if (memcmp(t->dst, t->src, sizeof(t->src)) != 0)
        fail_msg("wrong bytes");
}

static void test_exist_then_pipelined_get(void **state)
{
    (void)state;
    batch_t *t = batch_new();
    egm_client_t *w = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *r = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(w);
    assert_non_null(r);
    assert_int_equal(egm_register_buffer(w, t->src, sizeof(t->src)), EGM_OK);
    assert_int_equal(egm_register_buffer(r, t->dst, sizeof(t->dst)), EGM_OK);
    assert_int_equal(egm_batch_put_from_parts(w, N_KEYS, t->keys, t->counts,
                                              (const void *const *)t->src_parts, t->lens, NULL,
                                              t->results),
                     EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++)
        assert_int_equal(t->results[i], EGM_OK);

    /* How the get is cut, by parts. */
    egm_parts_t parts;
    assert_int_equal(egm__parts_init(&parts, N_KEYS, t->counts, t->dst_parts, t->lens), EGM_OK);
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(N_KEYS, &parts, NULL, &plan), EGM_OK);
    egm__parts_free(&parts);
    assert_true(egm__chunk_plan_pipelined(&plan));
    size_t n_chunks = plan.n_chunks, looked_up = egm__chunk_first(&plan, 3);
    size_t in_chunk1 = egm__chunk_first(&plan, 1);
    assert_true(n_chunks > 3);
    egm__chunk_plan_free(&plan);

    /* No lookup: one GetReplicaList per chunk. */
    long long before = lists();
    get_all(r, t);
    assert_int_equal(lists() - before, (long long)n_chunks);

    /* All looked up: none. */
    assert_int_equal(egm_batch_exist(r, N_KEYS, t->keys, t->results), EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++)
        assert_int_equal(t->results[i], EGM_OK);
    before = lists();
    get_all(r, t);
    assert_int_equal(lists() - before, 0);

    /* The first three chunks looked up (by another client): the others ask. */
    egm_client_t *r2 = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(r2);
    assert_int_equal(egm_register_buffer(r2, t->dst, sizeof(t->dst)), EGM_OK);
    assert_int_equal(egm_batch_exist(r2, looked_up, t->keys, t->results), EGM_OK);
    before = lists();
    get_all(r2, t);
    assert_int_equal(lists() - before, (long long)(n_chunks - 3));

    /* One spoiled location in chunk 1: that chunk asks again, and the failure
     * drops the lookup, so chunks not yet prepared then ask too. */
    spoil_lookup(r, N_KEYS, t->keys, in_chunk1);
    before = lists();
    get_all(r, t);
    long long asked = lists() - before;
    assert_true(asked >= 1 && asked <= (long long)n_chunks);

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(w, 1, &removed), EGM_OK);
    assert_int_equal(removed, N_KEYS);
    assert_int_equal(egm_unregister_buffer(r2, t->dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(r, t->dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(w, t->src), EGM_OK);
    egm_client_destroy(r2);
    egm_client_destroy(r);
    egm_client_destroy(w);
    free(t);
}

/* A lookup of more than EGM_LOOKUP_LOCATIONS_MAX keys asks for no locations
 * (its get would run pipelined, its round trips hidden): the get that follows
 * asks the master; one of exactly that many keys is served from the lookup. */
static void test_large_lookup_asks_no_locations(void **state)
{
    (void)state;
    enum { N = EGM_LOOKUP_LOCATIONS_MAX + 1 };
    static char names[N][32];
    static const char *keys[N];
    static void *dsts[N];
    static size_t lens[N], sizes[N];
    static egm_status_t results[N];
    static unsigned char dst[N * 64];
    egm_client_t *w = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *r = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(w);
    assert_non_null(r);
    assert_int_equal(egm_register_buffer(r, dst, sizeof(dst)), EGM_OK);
    for (size_t i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "many/%zu", i);
        keys[i] = names[i];
        dsts[i] = dst + 64 * i;
        lens[i] = 64;
        assert_int_equal(egm_test_put_seeded(w, keys[i], 64, (unsigned)i), EGM_OK);
    }
    for (size_t n = N - 1; n <= N; n++) {
        assert_int_equal(egm_batch_exist(r, n, keys, results), EGM_OK);
        long long before = lists();
        assert_int_equal(egm_batch_get_into(r, n, keys, dsts, lens, sizes, results), EGM_OK);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(results[i], EGM_OK);
        assert_int_equal(lists() - before, n == N ? 1 : 0);
    }
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(w, 1, &removed), EGM_OK);
    assert_int_equal(egm_unregister_buffer(r, dst), EGM_OK);
    egm_client_destroy(r);
    egm_client_destroy(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exist_then_get),
        cmocka_unit_test(test_exist_then_pipelined_get),
        cmocka_unit_test(test_large_lookup_asks_no_locations),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
