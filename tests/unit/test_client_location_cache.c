/* Unit: the location cache (src/client/location_cache.[ch]): an entry is used
 * only before min(lease, its bound) less the margin has passed since it was
 * asked for; expired entries go on lookup; a full cache drops expired entries
 * before it skips an insert; a drop and a clear forget entries, and a location
 * asked before a clear is not kept; a bound of 0 keeps nothing; a location
 * comes back with its segments' descriptors. A kept lookup (a batch ExistKey's
 * answer) serves a reply for keys found in it in order, from the hint or from
 * its start, each within its own lease and the bound; not keys out of order,
 * missing, failed, without replicas or past their time; a drop or a clear
 * forgets every kept lookup, and one asked before a clear is not kept.
 * Threads using one cache at once always get each key's own place (and TSan,
 * which runs this test too, sees no race). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "client/location_cache.h"
#include "common/alloc.h"

static egm_location_t loc_at(uint64_t asked_ms, uint64_t ttl_ms, egm_segment_desc_t *seg)
{
    egm_location_t loc = {.size = 100,
                          .lease_ttl_ms = ttl_ms,
                          .bound_ms = 1000,
                          .asked_ms = asked_ms,
                          .n_replicas = 1};
    loc.replicas[0] = (egm_replica_desc_t){.segment = seg->id, .offset = 64, .length = 100};
    return loc;
}

static void test_usable_window(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 1, .lo = 2}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    egm_location_t got;
    assert_int_equal(egm__location_cache_create(8, &c), EGM_OK);

    /* Its bound 1000 < lease 10000: usable until 1000 + 1000 - margin. */
    egm_location_t loc = loc_at(1000, 10000, &seg);
    egm__location_cache_put(c, "k", &loc, segs, egm__location_cache_generation(c));
    assert_int_equal(egm__location_usable_until(&loc), 2000 - EGM_LOCATION_MARGIN_MS);
    assert_true(egm__location_cache_get(c, "k", 1000, &got));
    assert_int_equal(got.replicas[0].offset, 64);
    assert_true(egm__location_cache_get(c, "k", 2000 - EGM_LOCATION_MARGIN_MS - 1, &got));
    assert_false(egm__location_cache_get(c, "k", 2000 - EGM_LOCATION_MARGIN_MS, &got));
    /* ... and it is gone, not just unusable. */
    egm_location_cache_stats_t st;
    egm__location_cache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);

    /* Lease 500 < bound: the lease decides. */
    loc = loc_at(1000, 500, &seg);
    egm__location_cache_put(c, "short", &loc, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "short", 1500 - EGM_LOCATION_MARGIN_MS - 1, &got));
    assert_false(egm__location_cache_get(c, "short", 1500 - EGM_LOCATION_MARGIN_MS, &got));

    /* The segment's descriptor comes back; an unknown one does not. */
    egm_segment_desc_t d;
    assert_true(egm__location_cache_segment(c, seg.id, &d));
    assert_int_equal(d.size, 4096);
    assert_false(egm__location_cache_segment(c, (egm_id_t){.hi = 9, .lo = 9}, &d));

    /* Drop and clear forget entries. */
    loc = loc_at(1000, 10000, &seg);
    egm__location_cache_put(c, "a", &loc, segs, egm__location_cache_generation(c));
    egm__location_cache_put(c, "b", &loc, segs, egm__location_cache_generation(c));
    egm__location_cache_drop(c, "a");
    assert_false(egm__location_cache_get(c, "a", 1001, &got));
    assert_true(egm__location_cache_get(c, "b", 1001, &got));
    uint64_t before_clear = egm__location_cache_generation(c);
    egm__location_cache_clear(c);
    assert_false(egm__location_cache_get(c, "b", 1001, &got));
    assert_false(egm__location_cache_segment(c, seg.id, &d));
    /* A location asked before the clear (a restart seen meanwhile) is not kept. */
    egm__location_cache_put(c, "b", &loc, segs, before_clear);
    assert_false(egm__location_cache_get(c, "b", 1001, &got));
    egm__location_cache_put(c, "b", &loc, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "b", 1001, &got));
    /* Bound 0 (the master's caching off): not kept. */
    loc.bound_ms = 0;
    egm__location_cache_put(c, "zero", &loc, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "zero", 1001, &got));
    egm__location_cache_destroy(c);
}

static void test_capacity(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 3, .lo = 4}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    egm_location_t got;
    assert_int_equal(egm__location_cache_create(2, &c), EGM_OK);
    egm_location_t old = loc_at(0, 10000, &seg), fresh = loc_at(5000, 10000, &seg);
    egm__location_cache_put(c, "old1", &old, segs, egm__location_cache_generation(c));
    egm__location_cache_put(c, "old2", &old, segs, egm__location_cache_generation(c));
    /* Full of entries expired by the new one's ask time: they make room. */
    egm__location_cache_put(c, "new1", &fresh, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "new1", 5001, &got));
    egm__location_cache_put(c, "new2", &fresh, segs, egm__location_cache_generation(c));
    /* Full of live entries: the insert is skipped. */
    egm__location_cache_put(c, "new3", &fresh, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "new3", 5001, &got));
    assert_true(egm__location_cache_get(c, "new2", 5001, &got));
    /* A location of no replica, or of too many, is not kept. */
    egm_location_t none = fresh;
    none.n_replicas = 0;
    egm__location_cache_drop(c, "new2");
    egm__location_cache_put(c, "none", &none, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "none", 5001, &got));
    egm__location_cache_destroy(c);
}

/* A lookup's answer for 6 keys "a".."f": each OK with one replica at offset
 * 100 * i of seg and lease 10000 (c: 300; e: NOT_FOUND), bound 1000. */
typedef struct {
    egm_key_result_t results[6];
    egm_replica_desc_t replicas[6];
    egm_keys_reply_t reply;
} answer_t;

static const char *const lookup_keys[] = {"a", "b", "c", "d", "e", "f"};

static void answer_init(answer_t *a, const egm_segment_desc_t *seg)
{
    memset(a, 0, sizeof(*a));
    for (uint32_t i = 0, at = 0; i < 6; i++) {
        a->results[i] = (egm_key_result_t){.status = i == 4 ? EGM_ERR_NOT_FOUND : EGM_OK,
                                           .size = 100,
                                           .lease_ttl_ms = i == 2 ? 300 : 10000,
                                           .replica_first = at,
                                           .n_replicas = i == 4 ? 0 : 1};
        if (i != 4)
            a->replicas[at++] =
                (egm_replica_desc_t){.segment = seg->id, .offset = 100 * i, .length = 100};
    }
    a->reply = (egm_keys_reply_t){.status = EGM_OK,
                                  .n_results = 6,
                                  .results = a->results,
                                  .n_replicas = 5,
                                  .replicas = a->replicas,
                                  .location_cache_ms = 1000};
}

/* A reply for keys at now_ms: 1 and each key's offset in offsets (the reply
 * and descriptors checked and freed), or 0. */
static int reply_for(egm_location_cache_t *c, size_t n, const char *const *keys, size_t hint,
                     uint64_t now_ms, uint64_t *offsets)
{
    egm_keys_reply_t *reply;
    egm_segment_desc_t *descs;
    size_t n_descs;
    uint64_t asked_ms;
    if (!egm__location_cache_reply(c, n, keys, hint, now_ms, &reply, &descs, &n_descs, &asked_ms))
        return 0;
    assert_int_equal(reply->n_results, n);
    assert_int_equal(n_descs, 1);
    assert_int_equal(descs[0].size, 4096);
    assert_int_equal(asked_ms, 1000);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(reply->results[i].status, EGM_OK);
        assert_int_equal(reply->results[i].n_replicas, 1);
        offsets[i] = reply->replicas[reply->results[i].replica_first].offset;
    }
    egm__keys_reply_free(reply);
    egm_free(descs);
    return 1;
}

/* One key (no hint) is answered from its own entry: its size, lease and
 * replica, and its segment's descriptor; a hit and a miss counted once each,
 * an expired entry dropped. */
static void test_one_key_reply(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 1, .lo = 2}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    const char *k[] = {"k"}, *other[] = {"other"};
    uint64_t off[1];
    assert_int_equal(egm__location_cache_create(8, &c), EGM_OK);
    egm_location_t loc = loc_at(1000, 10000, &seg);
    loc.replicas[0].offset = 4096;
    egm__location_cache_put(c, "k", &loc, segs, egm__location_cache_generation(c));

    egm_keys_reply_t *reply;
    egm_segment_desc_t *descs;
    size_t n_descs;
    uint64_t asked_ms;
    assert_true(egm__location_cache_reply(c, 1, k, EGM_LOCATION_NO_HINT, 1400, &reply, &descs,
                                          &n_descs, &asked_ms));
    assert_int_equal(reply->n_results, 1);
    assert_int_equal(reply->results[0].status, EGM_OK);
    assert_int_equal(reply->results[0].size, 100);
    assert_int_equal(reply->results[0].lease_ttl_ms, 10000);
    assert_int_equal(reply->results[0].n_replicas, 1);
    assert_int_equal(reply->replicas[reply->results[0].replica_first].offset, 4096);
    assert_int_equal(n_descs, 1);
    assert_true(egm__id_equal(descs[0].id, seg.id));
    assert_int_equal(asked_ms, 1000);
    egm__keys_reply_free(reply);
    egm_free(descs);

    assert_false(reply_for(c, 1, other, EGM_LOCATION_NO_HINT, 1400, off));
    egm_location_cache_stats_t st;
    egm__location_cache_stats(c, &st);
    assert_int_equal(st.hits, 1);
    assert_int_equal(st.misses, 1);
    /* Past its bound: no reply, and the entry is gone. */
    assert_false(reply_for(c, 1, k, EGM_LOCATION_NO_HINT, 2000 - EGM_LOCATION_MARGIN_MS, off));
    egm__location_cache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.misses, 2);
    egm__location_cache_destroy(c);
}

static void test_kept_lookup(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 1, .lo = 2}, .size = 4096};
    answer_t a;
    uint64_t off[6];
    answer_init(&a, &seg);
    assert_int_equal(egm__location_cache_create(8, &c), EGM_OK);
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    /* What was kept is a copy. */
    memset(&a, 0xff, sizeof(a));

    /* In order, with gaps, from the start or from the hint. */
    const char *const sub[] = {"a", "b", "d"};
    assert_true(reply_for(c, 3, sub, 0, 1100, off));
    assert_int_equal(off[0], 0);
    assert_int_equal(off[1], 100);
    assert_int_equal(off[2], 300);
    const char *const tail[] = {"d", "f"};
    assert_true(reply_for(c, 2, tail, 3, 1100, off));
    assert_int_equal(off[1], 500);
    assert_true(reply_for(c, 2, tail, 1, 1100, off)); /* a wrong hint: from the start */
    assert_int_equal(off[0], 300);
    /* Out of order, a key it does not hold, a key it answered NOT_FOUND: none. */
    const char *const swapped[] = {"b", "a"};
    assert_false(reply_for(c, 2, swapped, 0, 1100, off));
    const char *const other[] = {"a", "z"};
    assert_false(reply_for(c, 2, other, 0, 1100, off));
    const char *const missing[] = {"d", "e"};
    assert_false(reply_for(c, 2, missing, 0, 1100, off));
    /* Each key's own lease: "c" (300) until 1300 - margin; the others the bound. */
    const char *const with_c[] = {"b", "c"};
    assert_true(reply_for(c, 2, with_c, 0, 1300 - EGM_LOCATION_MARGIN_MS - 1, off));
    assert_false(reply_for(c, 2, with_c, 0, 1300 - EGM_LOCATION_MARGIN_MS, off));
    assert_true(reply_for(c, 3, sub, 0, 2000 - EGM_LOCATION_MARGIN_MS - 1, off));
    assert_false(reply_for(c, 3, sub, 0, 2000 - EGM_LOCATION_MARGIN_MS, off));

    /* A drop of any key forgets the lookup. */
    egm__location_cache_drop(c, "zzz");
    assert_false(reply_for(c, 3, sub, 0, 1100, off));
    /* So does a clear; and one asked before a clear is not kept. */
    answer_init(&a, &seg);
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    assert_true(reply_for(c, 3, sub, 0, 1100, off));
    uint64_t generation = egm__location_cache_generation(c);
    egm__location_cache_clear(c);
    assert_false(reply_for(c, 3, sub, 0, 1100, off));
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000, generation);
    assert_false(reply_for(c, 3, sub, 0, 1100, off));
    /* One key, or a bound of 0: not kept. */
    egm__location_cache_keep_lookup(c, 1, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    const char *const just_a[] = {"a"};
    assert_false(reply_for(c, 1, just_a, 0, 1100, off));
    a.reply.location_cache_ms = 0;
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    assert_false(reply_for(c, 3, sub, 0, 1100, off));
    /* The newest of several is asked first; older ones still serve. */
    a.reply.location_cache_ms = 1000;
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    a.replicas[0].offset = 7;
    const char *const two[] = {"a", "b"};
    egm__location_cache_keep_lookup(c, 2, two, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    assert_true(reply_for(c, 2, two, 0, 1100, off));
    assert_int_equal(off[0], 7);
    assert_true(reply_for(c, 2, tail, 3, 1100, off));

    /* One key: only at its hint (a pipelined chunk of one key), never by a walk. */
    const char *const just_d[] = {"d"};
    assert_true(reply_for(c, 1, just_d, 3, 1100, off));
    assert_int_equal(off[0], 300);
    assert_false(reply_for(c, 1, just_d, 2, 1100, off));
    assert_false(reply_for(c, 1, just_d, EGM_LOCATION_NO_HINT, 1100, off));

    /* A lookup that found nothing (no segment in its answer) is not kept: it
     * would only push useful ones out. */
    egm_location_cache_stats_t st0, st1;
    egm__location_cache_clear(c);
    egm__location_cache_stats(c, &st0);
    for (int i = 0; i < 6; i++)
        a.results[i] = (egm_key_result_t){.status = EGM_ERR_NOT_FOUND};
    a.reply.n_replicas = 0;
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, NULL, 0, 1000,
                                    egm__location_cache_generation(c));
    egm__location_cache_drop(c, "zzz"); /* counts the lookups it drops */
    egm__location_cache_stats(c, &st1);
    assert_int_equal(st1.invalidations, st0.invalidations);
    /* ... where a lookup that found something is kept (and counted when dropped). */
    answer_init(&a, &seg);
    egm__location_cache_keep_lookup(c, 6, lookup_keys, &a.reply, &seg, 1, 1000,
                                    egm__location_cache_generation(c));
    egm__location_cache_drop(c, "zzz");
    egm__location_cache_stats(c, &st1);
    assert_int_equal(st1.invalidations, st0.invalidations + 1);
    egm__location_cache_destroy(c);
}

/* A batch served from per-key entries asked at different times: each key's
 * lease is rebased onto the oldest ask, so that it still ends when its own
 * does (ask + lease). */
static void test_per_key_reply_rebases_leases(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 1, .lo = 2}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    assert_int_equal(egm__location_cache_create(8, &c), EGM_OK);
    egm_location_t early = loc_at(1000, 600, &seg), late = loc_at(1200, 600, &seg);
    egm__location_cache_put(c, "early", &early, segs, egm__location_cache_generation(c));
    egm__location_cache_put(c, "late", &late, segs, egm__location_cache_generation(c));
    const char *const keys[] = {"early", "late"};
    egm_keys_reply_t *reply;
    egm_segment_desc_t *descs;
    size_t n_descs;
    uint64_t asked_ms;
    assert_true(
        egm__location_cache_reply(c, 2, keys, 0, 1300, &reply, &descs, &n_descs, &asked_ms));
    assert_int_equal(asked_ms, 1000);
    assert_int_equal(n_descs, 1);
    assert_int_equal(reply->results[0].lease_ttl_ms, 600);
    assert_int_equal(reply->results[1].lease_ttl_ms, 800);
    egm__keys_reply_free(reply);
    egm_free(descs);
    /* Past the early one's time, the batch is not served (a key of it has none). */
    assert_false(egm__location_cache_reply(c, 2, keys, 0, 1600 - EGM_LOCATION_MARGIN_MS, &reply,
                                           &descs, &n_descs, &asked_ms));
    egm__location_cache_destroy(c);
}

/* Threads keeping lookups, reading replies, putting and reading per-key
 * entries, dropping and clearing at once (the ahead and copy threads of a
 * pipelined get, and a remover, share one cache): every reply still names
 * each key's own place. Run under TSan (label tsan) for the races. */
#define RACE_THREADS 4
#define RACE_ROUNDS 3000

typedef struct {
    egm_location_cache_t *c;
    const egm_segment_desc_t *seg;
    int index;
} racer_t;

static void *racer_main(void *arg)
{
    racer_t *r = arg;
    const char *keys[4];
    char names[4][16];
    for (int i = 0; i < 4; i++) {
        snprintf(names[i], sizeof(names[i]), "r%d", i);
        keys[i] = names[i];
    }
    egm_key_result_t results[4];
    egm_replica_desc_t replicas[4];
    for (uint32_t i = 0; i < 4; i++) {
        results[i] = (egm_key_result_t){.status = EGM_OK,
                                        .size = 10,
                                        .lease_ttl_ms = 10000,
                                        .replica_first = i,
                                        .n_replicas = 1};
        replicas[i] = (egm_replica_desc_t){.segment = r->seg->id, .offset = 64 * i, .length = 10};
    }
    egm_keys_reply_t reply = {.status = EGM_OK,
                              .n_results = 4,
                              .results = results,
                              .n_replicas = 4,
                              .replicas = replicas,
                              .location_cache_ms = 1000};
    const egm_segment_desc_t *segs[] = {r->seg};
    for (int round = 0; round < RACE_ROUNDS; round++) {
        uint64_t g = egm__location_cache_generation(r->c);
        switch ((round + r->index) % 5) {
        case 0:
            egm__location_cache_keep_lookup(r->c, 4, keys, &reply, r->seg, 1, 1000, g);
            break;
        case 1: {
            egm_location_t loc = {.size = 10,
                                  .lease_ttl_ms = 10000,
                                  .bound_ms = 1000,
                                  .asked_ms = 1000,
                                  .n_replicas = 1};
            int k = round % 4;
            loc.replicas[0] = replicas[k];
            egm__location_cache_put(r->c, keys[k], &loc, segs, g);
            break;
        }
        case 2:
            egm__location_cache_drop(r->c, keys[round % 4]);
            break;
        case 3:
            if (round % 50 == 3)
                egm__location_cache_clear(r->c);
            break;
        default:
            break;
        }
        egm_keys_reply_t *got;
        egm_segment_desc_t *descs;
        size_t n_descs;
        uint64_t asked_ms;
        size_t n = (size_t)(round % 3) + 1;
        if (egm__location_cache_reply(r->c, n, keys + 1, n == 1 ? 1 : 0, 1100, &got, &descs,
                                      &n_descs, &asked_ms)) {
            for (size_t i = 0; i < n; i++)
                assert_int_equal(got->replicas[got->results[i].replica_first].offset, 64 * (i + 1));
            egm__keys_reply_free(got);
            egm_free(descs);
        }
    }
    return NULL;
}

static void test_concurrent_use(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 3, .lo = 4}, .size = 4096};
    assert_int_equal(egm__location_cache_create(64, &c), EGM_OK);
    pthread_t threads[RACE_THREADS];
    racer_t racers[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        racers[i] = (racer_t){.c = c, .seg = &seg, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, racer_main, &racers[i]), 0);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    egm__location_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable_window),
        cmocka_unit_test(test_capacity),
        cmocka_unit_test(test_one_key_reply),
        cmocka_unit_test(test_kept_lookup),
        cmocka_unit_test(test_per_key_reply_rebases_leases),
        cmocka_unit_test(test_concurrent_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
