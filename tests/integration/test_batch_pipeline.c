/* Integration: batches large enough to run pipelined (>= EGM_PIPELINE_MIN_PARTS
 * buffers, in chunks of EGM_PIPELINE_CHUNK_PARTS, the last one partial) put and
 * get over shm; every key's status and bytes are checked, including keys that
 * fail (empty value: refused by the client; key already stored: refused by the
 * master) in the middle of later chunks; the scatter-gather forms likewise, and
 * a batch of few keys with many parts each (vLLM's shape), which the pipeline
 * cuts by parts: the master sees one PutStart, PutEnd and GetReplicaList per
 * chunk. A client's log_level, when set, is the process's log level (the
 * pipeline's trace lines are read at trace level). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "client/pipeline.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/process.h"
#include "support/cluster.h"
#include "support/model.h"

#define N_KEYS                                                                                     \
    (2 * EGM_PIPELINE_CHUNK_PARTS + 977) /* a get's six chunks (128, 256, 512, 1024, 1024, 81);    \
                                            a put's eight (the last three shrink) */
#define BLOCK 192
#define EMPTY_KEY 1500                             /* chunk 1: zero length */
#define DUP_KEY (2 * EGM_PIPELINE_CHUNK_PARTS + 5) /* chunk 2: stored before the batch */

static egm_test_cluster_t cluster;
static unsigned master_http;

static int setup(void **state)
{
    (void)state;
    const char *flags[] = {NULL};
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

static void test_pipelined_put_get(void **state)
{
    (void)state;
    size_t live = egm__alloc_live_count();
    char(*names)[32] = calloc(N_KEYS, sizeof(*names));
    const char **keys = calloc(N_KEYS, sizeof(*keys));
    const void **srcs = calloc(N_KEYS, sizeof(*srcs));
    void **dsts = calloc(N_KEYS, sizeof(*dsts));
    size_t *lens = calloc(N_KEYS, sizeof(*lens)), *sizes = calloc(N_KEYS, sizeof(*sizes));
    egm_status_t *results = calloc(N_KEYS, sizeof(*results));
    unsigned char *src = malloc((size_t)N_KEYS * BLOCK), *dst = malloc((size_t)N_KEYS * BLOCK);
    unsigned char dup_value[BLOCK];
    assert_true(names && keys && srcs && dsts && lens && sizes && results && src && dst);

    egm_client_t *client = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(client);
    assert_int_equal(egm_register_buffer(client, src, (size_t)N_KEYS * BLOCK), EGM_OK);
    assert_int_equal(egm_register_buffer(client, dst, (size_t)N_KEYS * BLOCK), EGM_OK);
    egm_test_fill(src, (size_t)N_KEYS * BLOCK, 11);
    for (size_t i = 0; i < N_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "pipe/%zu", i);
        keys[i] = names[i];
        /* Reversed places, so a chunk's keys are not one contiguous range. */
        srcs[i] = src + (N_KEYS - 1 - i) * BLOCK;
        dsts[i] = dst + (N_KEYS - 1 - i) * BLOCK;
        lens[i] = i == EMPTY_KEY ? 0 : BLOCK;
    }
    egm_test_fill(dup_value, sizeof(dup_value), 99);
    assert_int_equal(egm_put(client, keys[DUP_KEY], dup_value, sizeof(dup_value), NULL), EGM_OK);

    assert_int_equal(egm_batch_put_from(client, N_KEYS, keys, srcs, lens, NULL, results), EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++) {
        egm_status_t want = i == EMPTY_KEY ? EGM_ERR_INVALID_ARG
                            : i == DUP_KEY ? EGM_ERR_EXISTS
                                           : EGM_OK;
        if (results[i] != want)
            fail_msg("put key %zu: %d, expected %d", i, results[i], want);
    }

    memset(dst, 0, (size_t)N_KEYS * BLOCK);
    for (size_t i = 0; i < N_KEYS; i++)
        lens[i] = BLOCK;
    assert_int_equal(egm_batch_get_into(client, N_KEYS, keys, dsts, lens, sizes, results), EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++) {
        egm_status_t want = i == EMPTY_KEY ? EGM_ERR_NOT_FOUND : EGM_OK;
        if (results[i] != want)
            fail_msg("get key %zu: %d, expected %d", i, results[i], want);
        if (want != EGM_OK)
            continue;
        assert_int_equal(sizes[i], BLOCK);
        const void *expect = i == DUP_KEY ? (const void *)dup_value : srcs[i];
        if (memcmp(dsts[i], expect, BLOCK) != 0)
            fail_msg("get key %zu: wrong bytes", i);
    }

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    assert_int_equal(removed, N_KEYS - 1);
    assert_int_equal(egm_unregister_buffer(client, src), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, dst), EGM_OK);
    egm_client_destroy(client);
    assert_int_equal(egm__alloc_live_count(), live);
    free(names);
    free(keys);
    free(srcs);
    free(dsts);
    free(lens);
    free(sizes);
    free(results);
    free(src);
    free(dst);
}

/* The scatter-gather forms pipelined: every key is a K half and a V half from
 * two separate areas (as a paged KV cache stores them), read back into other
 * places; chunk views must find each key's parts. */
static void test_pipelined_parts(void **state)
{
    (void)state;
    enum { HALF = BLOCK / 2 };
    size_t live = egm__alloc_live_count();
    char(*names)[32] = calloc(N_KEYS, sizeof(*names));
    const char **keys = calloc(N_KEYS, sizeof(*keys));
    size_t *counts = calloc(N_KEYS, sizeof(*counts)), *sizes = calloc(N_KEYS, sizeof(*sizes));
    void **addrs = calloc(2 * N_KEYS, sizeof(*addrs)),
         **get_addrs = calloc(2 * N_KEYS, sizeof(*addrs));
    size_t *lens = calloc(2 * N_KEYS, sizeof(*lens));
    egm_status_t *results = calloc(N_KEYS, sizeof(*results));
    unsigned char *src = malloc((size_t)N_KEYS * BLOCK), *dst = malloc((size_t)N_KEYS * BLOCK);
    assert_true(names && keys && counts && sizes && addrs && get_addrs && lens && results && src &&
                dst);

    egm_client_t *client = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(client);
    assert_int_equal(egm_register_buffer(client, src, (size_t)N_KEYS * BLOCK), EGM_OK);
    assert_int_equal(egm_register_buffer(client, dst, (size_t)N_KEYS * BLOCK), EGM_OK);
    egm_test_fill(src, (size_t)N_KEYS * BLOCK, 23);
    for (size_t i = 0; i < N_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "parts/%zu", i);
        keys[i] = names[i];
        counts[i] = 2;
        addrs[2 * i] = src + i * HALF;                             /* K area */
        addrs[2 * i + 1] = src + (size_t)N_KEYS * HALF + i * HALF; /* V area */
        get_addrs[2 * i] = dst + (N_KEYS - 1 - i) * HALF;          /* reversed */
        get_addrs[2 * i + 1] = dst + (size_t)N_KEYS * HALF + (N_KEYS - 1 - i) * HALF;
        lens[2 * i] = lens[2 * i + 1] = HALF;
    }
    assert_int_equal(egm_batch_put_from_parts(client, N_KEYS, keys, counts,
                                              (const void *const *)addrs, lens, NULL, results),
                     EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++)
        if (results[i] != EGM_OK)
            fail_msg("put key %zu: %d", i, results[i]);

    memset(dst, 0, (size_t)N_KEYS * BLOCK);
    assert_int_equal(
        egm_batch_get_into_parts(client, N_KEYS, keys, counts, get_addrs, lens, sizes, results),
        EGM_OK);
    for (size_t i = 0; i < N_KEYS; i++) {
        if (results[i] != EGM_OK || sizes[i] != BLOCK)
            fail_msg("get key %zu: %d, %zu bytes", i, results[i], sizes[i]);
        if (memcmp(get_addrs[2 * i], addrs[2 * i], HALF) != 0 ||
            memcmp(get_addrs[2 * i + 1], addrs[2 * i + 1], HALF) != 0)
            fail_msg("get key %zu: wrong bytes", i);
    }

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    assert_int_equal(removed, N_KEYS);
    assert_int_equal(egm_unregister_buffer(client, src), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, dst), EGM_OK);
    egm_client_destroy(client);
    assert_int_equal(egm__alloc_live_count(), live);
    free(names);
    free(keys);
    free(counts);
    free(sizes);
    free(addrs);
    free(get_addrs);
    free(lens);
    free(results);
    free(src);
    free(dst);
}

static long long rpc_count(const char *type)
{
    long long n = egm_model_master_rpc_count(master_http, type);
    assert_true(n >= 0);
    return n;
}

/* vLLM's shape: 40 keys of 64 parts (2560 buffers, too few keys to pipeline by
 * keys). A get is cut by parts into chunks of 2, 4, 8, 16 and 10 keys: five
 * GetReplicaList. A put's last chunks shrink (pipeline.h): 2, 4, 8, 12, then
 * 8, 4, 2 keys: seven Commits when the client places its puts (a SlabGrant or
 * two: the two placing threads may both find no slab), seven PutStart and
 * seven PutEnd when the master does (slab_bytes=0); every part's bytes come
 * back. */
static void pipelined_by_parts(const char *slab_bytes)
{
    enum { KEYS = 40, PARTS = 64, PIECE = 96, CHUNKS = 5, PUT_CHUNKS = 7 };
    size_t live = egm__alloc_live_count();
    static char names[KEYS][32];
    const char *keys[KEYS];
    size_t counts[KEYS], sizes[KEYS], lens[KEYS * PARTS];
    static void *addrs[KEYS * PARTS], *get_addrs[KEYS * PARTS];
    egm_status_t results[KEYS];
    const size_t region = (size_t)KEYS * PIECE; /* a layer's K or V region */
    unsigned char *src = malloc(PARTS * region), *dst = malloc(PARTS * region);
    assert_true(src && dst);

    const char *pairs[] = {slab_bytes, NULL};
    int client_placed = strcmp(slab_bytes, "slab_bytes=0") != 0;
    egm_client_t *client = egm_test_client(&cluster, "shm", pairs);
    assert_non_null(client);
    assert_int_equal(egm_register_buffer(client, src, PARTS * region), EGM_OK);
    assert_int_equal(egm_register_buffer(client, dst, PARTS * region), EGM_OK);
    egm_test_fill(src, PARTS * region, 29);
    for (size_t i = 0; i < KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "vllm/%zu", i);
        keys[i] = names[i];
        counts[i] = PARTS;
        for (size_t r = 0; r < PARTS; r++) { /* block i of region r; read back reversed */
            addrs[i * PARTS + r] = src + r * region + i * PIECE;
            get_addrs[i * PARTS + r] = dst + r * region + (KEYS - 1 - i) * PIECE;
            lens[i * PARTS + r] = PIECE;
        }
    }
    long long starts = rpc_count("PutStart"), ends = rpc_count("PutEnd");
    long long grants = rpc_count("SlabGrant"), commits = rpc_count("Commit");
    assert_int_equal(egm_batch_put_from_parts(client, KEYS, keys, counts,
                                              (const void *const *)addrs, lens, NULL, results),
                     EGM_OK);
    for (size_t i = 0; i < KEYS; i++)
        if (results[i] != EGM_OK)
            fail_msg("put key %zu: %d", i, results[i]);
    assert_int_equal(rpc_count("PutStart") - starts, client_placed ? 0 : PUT_CHUNKS);
    assert_int_equal(rpc_count("PutEnd") - ends, client_placed ? 0 : PUT_CHUNKS);
    assert_int_equal(rpc_count("Commit") - commits, client_placed ? PUT_CHUNKS : 0);
    long long granted = rpc_count("SlabGrant") - grants;
    if (client_placed ? granted < 1 || granted > 2 : granted != 0)
        fail_msg("%lld SlabGrants", granted);

    memset(dst, 0, PARTS * region);
    long long lists = rpc_count("GetReplicaList");
    assert_int_equal(
        egm_batch_get_into_parts(client, KEYS, keys, counts, get_addrs, lens, sizes, results),
        EGM_OK);
    assert_int_equal(rpc_count("GetReplicaList") - lists, CHUNKS);
    for (size_t i = 0; i < KEYS; i++) {
        if (results[i] != EGM_OK || sizes[i] != (size_t)PARTS * PIECE)
            fail_msg("get key %zu: %d, %zu bytes", i, results[i], sizes[i]);
        for (size_t r = 0; r < PARTS; r++)
            if (memcmp(get_addrs[i * PARTS + r], addrs[i * PARTS + r], PIECE) != 0)
                fail_msg("get key %zu part %zu: wrong bytes", i, r);
    }

    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    assert_int_equal(removed, KEYS);
    assert_int_equal(egm_unregister_buffer(client, src), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, dst), EGM_OK);
    egm_client_destroy(client);
    assert_int_equal(egm__alloc_live_count(), live);
    free(src);
    free(dst);
}

static void test_pipelined_by_parts_client_placed(void **state)
{
    (void)state;
    pipelined_by_parts("slab_bytes=256MiB");
}

static void test_pipelined_by_parts_master_placed(void **state)
{
    (void)state;
    pipelined_by_parts("slab_bytes=0");
}

/* log_level set in a client's configuration is the process's level; a
 * client without the key leaves the level as it is. */
static void test_client_log_level(void **state)
{
    (void)state;
    int before = egm__log_level;
    const char *warn[] = {"log_level=warn", NULL};
    const char *trace[] = {"log_level=trace", NULL};
    egm_client_t *a = egm_test_client(&cluster, "shm", warn);
    assert_non_null(a);
    assert_int_equal(egm__log_level, EGM_LOG_WARN);
    egm_client_t *b = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(b);
    assert_int_equal(egm__log_level, EGM_LOG_WARN);
    egm_client_t *c = egm_test_client(&cluster, "shm", trace);
    assert_non_null(c);
    assert_int_equal(egm__log_level, EGM_LOG_TRACE);
    egm_client_destroy(c);
    egm_client_destroy(b);
    egm_client_destroy(a);
    egm__log_set_level((egm_log_level_t)before);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipelined_put_get),
        cmocka_unit_test(test_pipelined_parts),
        cmocka_unit_test(test_pipelined_by_parts_client_placed),
        cmocka_unit_test(test_pipelined_by_parts_master_placed),
        cmocka_unit_test(test_client_log_level),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
