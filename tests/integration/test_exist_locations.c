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
 *   chunks not yet prepared ask too, and so does the next get): every byte is
 *   still right;
 * - a batch lookup that finds nothing keeps nothing;
 * - a batch of a looked-up key and one not asks the master once, both right;
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

    /* A missing key caches nothing and still misses; so does a batch lookup
     * that finds nothing (no segment named in its answer). */
    assert_int_equal(egm_exist(b, "never-put"), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_test_get_seeded(b, "never-put", LEN, 1), EGM_ERR_NOT_FOUND);
    const char *missing[] = {"never-put", "never-put-2"};
    egm_status_t found[2];
    assert_int_equal(egm_batch_exist(b, 2, missing, found), EGM_OK);
    assert_int_equal(found[0], EGM_ERR_NOT_FOUND);
    assert_int_equal(found[1], EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_test_get_seeded(b, "never-put-2", LEN, 1), EGM_ERR_NOT_FOUND);

    /* A batch of one looked-up key and one not: the batch asks the master once,
     * and both keys come back right. */
    assert_int_equal(egm_test_put_seeded(a, "not-looked-up", LEN, 2), EGM_OK);
    assert_int_equal(egm_exist(b, "looked-up"), EGM_OK);
    {
        static unsigned char bufs[2][LEN], want[2][LEN];
        const char *mixed[] = {"looked-up", "not-looked-up"};
        void *dsts[] = {bufs[0], bufs[1]};
        size_t caps[] = {LEN, LEN}, sizes[2];
        egm_status_t res[2];
        assert_int_equal(egm_register_buffer(b, bufs, sizeof(bufs)), EGM_OK);
        before = lists();
        assert_int_equal(egm_batch_get_into(b, 2, mixed, dsts, caps, sizes, res), EGM_OK);
        assert_int_equal(lists() - before, 1);
        egm_test_fill(want[0], LEN, 1);
        egm_test_fill(want[1], LEN, 2);
        for (int i = 0; i < 2; i++) {
            assert_int_equal(res[i], EGM_OK);
            assert_int_equal(sizes[i], LEN);
            assert_memory_equal(bufs[i], want[i], LEN);
        }
        assert_int_equal(egm_unregister_buffer(b, bufs), EGM_OK);
    }
    assert_int_equal(egm_remove(a, "not-looked-up", 1), EGM_OK);

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

/* A batch of n_keys keys of `parts` pieces of PART bytes each, enough parts
 * to run pipelined. */
#define PART 48

typedef struct {
    size_t n_keys, parts;
    char (*names)[32];
    const char **keys;
    size_t *counts, *lens, *sizes;
    void **src_parts, **dst_parts;
    egm_status_t *results;
    unsigned char *src, *dst;
    size_t bytes;
} batch_t;

static batch_t *batch_new(size_t n_keys, size_t parts)
{
    batch_t *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    t->n_keys = n_keys;
    t->parts = parts;
    t->bytes = n_keys * parts * PART;
    t->names = calloc(n_keys, sizeof(*t->names));
    t->keys = calloc(n_keys, sizeof(*t->keys));
    t->counts = calloc(n_keys, sizeof(*t->counts));
    t->sizes = calloc(n_keys, sizeof(*t->sizes));
    t->results = calloc(n_keys, sizeof(*t->results));
    t->lens = calloc(n_keys * parts, sizeof(*t->lens));
    t->src_parts = calloc(n_keys * parts, sizeof(*t->src_parts));
    t->dst_parts = calloc(n_keys * parts, sizeof(*t->dst_parts));
    t->src = malloc(t->bytes);
    t->dst = malloc(t->bytes);
    assert_true(t->names && t->keys && t->counts && t->sizes && t->results && t->lens &&
                t->src_parts && t->dst_parts && t->src && t->dst);
    egm_test_fill(t->src, t->bytes, (unsigned)(21 + parts));
    for (size_t i = 0; i < n_keys; i++) {
        snprintf(t->names[i], sizeof(t->names[i]), "exist/%zu/%zu", parts, i);
        t->keys[i] = t->names[i];
        t->counts[i] = parts;
        /* Keys' pieces in reversed places, as regions of a KV cache. */
        for (size_t p = 0; p < parts; p++) {
            size_t q = i * parts + p, at = ((n_keys - 1 - i) * parts + p) * PART;
            t->src_parts[q] = t->src + at;
            t->dst_parts[q] = t->dst + at;
            t->lens[q] = PART;
        }
    }
    return t;
}

static void batch_free(batch_t *t)
{
    free(t->names);
    free(t->keys);
    free(t->counts);
    free(t->sizes);
    free(t->results);
    free(t->lens);
    free(t->src_parts);
    free(t->dst_parts);
    free(t->src);
    free(t->dst);
    free(t);
}

/* A batch get of every key into t->dst: each key OK with its own bytes. */
static void get_all(egm_client_t *c, batch_t *t)
{
    memset(t->dst, 0, t->bytes);
    assert_int_equal(egm_batch_get_into_parts(c, t->n_keys, t->keys, t->counts, t->dst_parts,
                                              t->lens, t->sizes, t->results),
                     EGM_OK);
    for (size_t i = 0; i < t->n_keys; i++) {
        if (t->results[i] != EGM_OK)
            fail_msg("get key %zu: %s", i, egm_status_string(t->results[i]));
        assert_int_equal(t->sizes[i], t->parts * PART);
    }
    if (memcmp(t->dst, t->src, t->bytes) != 0)
        fail_msg("wrong bytes");
}

static uint64_t invalidations(egm_client_t *c)
{
    egm_location_cache_stats_t st;
    egm__location_cache_stats(c->locations, &st);
    return st.invalidations;
}

/* The get of a batch of n_keys x parts, as above. */
static void check_pipelined(size_t n_keys, size_t parts)
{
    batch_t *t = batch_new(n_keys, parts);
    egm_client_t *w = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *r = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(w);
    assert_non_null(r);
    assert_int_equal(egm_register_buffer(w, t->src, t->bytes), EGM_OK);
    assert_int_equal(egm_register_buffer(r, t->dst, t->bytes), EGM_OK);
    assert_int_equal(egm_batch_put_from_parts(w, n_keys, t->keys, t->counts,
                                              (const void *const *)t->src_parts, t->lens, NULL,
                                              t->results),
                     EGM_OK);
    for (size_t i = 0; i < n_keys; i++)
        assert_int_equal(t->results[i], EGM_OK);

    /* How the get is cut, by parts. */
    egm_parts_t pp;
    assert_int_equal(egm__parts_init(&pp, n_keys, t->counts, t->dst_parts, t->lens), EGM_OK);
    egm_chunk_plan_t plan;
    assert_int_equal(egm__chunk_plan(n_keys, &pp, NULL, 0, &plan), EGM_OK);
    egm__parts_free(&pp);
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
    assert_int_equal(egm_batch_exist(r, n_keys, t->keys, t->results), EGM_OK);
    for (size_t i = 0; i < n_keys; i++)
        assert_int_equal(t->results[i], EGM_OK);
    before = lists();
    get_all(r, t);
    assert_int_equal(lists() - before, 0);

    /* The first three chunks looked up (by another client): the others ask. */
    egm_client_t *r2 = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(r2);
    assert_int_equal(egm_register_buffer(r2, t->dst, t->bytes), EGM_OK);
    assert_int_equal(egm_batch_exist(r2, looked_up, t->keys, t->results), EGM_OK);
    before = lists();
    get_all(r2, t);
    assert_int_equal(lists() - before, (long long)(n_chunks - 3));

    /* One spoiled location in chunk 1: that chunk asks again and the lookup is
     * dropped (so chunks not yet prepared then ask too). */
    spoil_lookup(r, n_keys, t->keys, in_chunk1);
    before = lists();
    uint64_t dropped = invalidations(r);
    get_all(r, t);
    long long asked = lists() - before;
    assert_true(asked >= 1 && asked <= (long long)n_chunks);
    assert_true(invalidations(r) > dropped);
    /* Nothing of the lookup is left: the next get asks for every chunk but the
     * one that failed, whose second answer (asked by itself) was cached. */
    before = lists();
    get_all(r, t);
    if (lists() - before != (long long)n_chunks - 1)
        fail_msg("%zu x %zu: %lld asked after the failed lookup, %lld before, %zu chunks", n_keys,
                 parts, lists() - before, asked, n_chunks);

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(w, 1, &removed), EGM_OK);
    assert_int_equal(removed, n_keys);
    assert_int_equal(egm_unregister_buffer(r2, t->dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(r, t->dst), EGM_OK);
    assert_int_equal(egm_unregister_buffer(w, t->src), EGM_OK);
    egm_client_destroy(r2);
    egm_client_destroy(r);
    egm_client_destroy(w);
    batch_free(t);
}

/* vLLM's shape (48 keys of 64 pieces: chunks of several keys), and keys of 256
 * pieces (the first chunks hold one key each). */
static void test_exist_then_pipelined_get(void **state)
{
    (void)state;
    check_pipelined(48, 64);
    check_pipelined(8, 256);
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
