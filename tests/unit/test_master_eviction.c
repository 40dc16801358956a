/* The master's eviction, pins and placement strategies, driven without
 * sockets through the object index with explicit times: LRU order (recency =
 * last lease, or PutEnd), leased objects never evicted, soft-pinned ones last
 * and lapsing after their TTL, hard-pinned never, the watermark from the tick,
 * eviction when a PutStart finds no room, the minimum residency after PutEnd
 * (a put either answers NO_SPACE or stays readable; unfinished puts do not
 * push finished objects out; churn still evicts), the discard timeout, each
 * placement strategy, and the RPC plumbing (host id from pings,
 * ReplicateConfig). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

#define TTL 10000u /* lease, ms */
#define CLIENT_TTL 1000000u
#define OBJ 4096u      /* object size: a multiple of the alignment */
#define SEG (16 * OBJ) /* a segment holds 16 objects */
#define RES 1000u      /* eviction_min_residency_ms of the residency tests */

static uint64_t live_at_start;
static egm_master_state_t st;
static egm_id_t provider, writer;
static uint64_t fake_now;

static uint64_t clock_ms(void)
{
    return fake_now;
}

/* Background eviction off and a PutStart evicting just what it needs, unless
 * a test says otherwise; no minimum residency (these tests put and evict
 * within a few fake ms; residency_params() is for the tests of it). */
static void init_with(const egm_objects_params_t *params)
{
    egm_master_state_params_t sp = {.objects = *params, .client_ttl_ms = CLIENT_TTL};
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    st.now_ms = clock_ms;
}

static egm_objects_params_t quiet_params(void)
{
    egm_objects_params_t p;
    egm__objects_params_default(&p);
    p.lease_ttl_ms = TTL;
    p.eviction_high_watermark = 1.0;
    p.eviction_ratio = 0.0;
    p.min_residency_ms = 0;
    return p;
}

/* The defaults (watermark 0.90, eviction_ratio 0.05) with a residency of RES. */
static egm_objects_params_t residency_params(void)
{
    egm_objects_params_t p;
    egm__objects_params_default(&p);
    p.lease_ttl_ms = TTL;
    p.min_residency_ms = RES;
    return p;
}

static void reinit(const egm_objects_params_t *params)
{
    egm__master_state_cleanup(&st);
    init_with(params);
}

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_objects_params_t p = quiet_params();
    init_with(&p);
    provider = egm__id_random();
    writer = egm__id_random();
    fake_now = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egm__objects_check(st.objects), EGM_OK); /* whatever the test did */
    egm__master_state_cleanup(&st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static uint64_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static egm_segment_t *mount_named(const char *name, const char *host, uint64_t size)
{
    egm_segment_params_t p = {.id = egm__id_random(),
                              .size = size,
                              .name = name,
                              .host_id = host,
                              .tcp_endpoint = "127.0.0.1:1"};
    /* Each segment its own provider (replicas of one object go to distinct
     * providers), but the chunks of one pool ("NAME/...") one provider. */
    char pool[64];
    snprintf(pool, sizeof(pool), "%s", name);
    char *slash = strchr(pool, '/');
    if (slash != NULL && strncmp(pool, "seg", 3) != 0)
        *slash = '\0';
    egm_id_t owner = provider;
    owner.lo ^= name_hash(pool);
    assert_int_equal(egm__liveness_mount(st.liveness, owner, &p, 0), EGM_OK);
    egm_segment_t *seg = egm__segment_table_find(st.segments, p.id);
    assert_non_null(seg);
    return seg;
}

static egm_segment_t *mount(uint64_t size)
{
    static int counter;
    char name[32];
    snprintf(name, sizeof(name), "seg/%d", counter++);
    return mount_named(name, "host-a", size);
}

static egm_status_t put_cfg(const char *key, uint64_t size, const egm_put_config_t *cfg,
                            uint64_t now, egm_object_view_t *obj_p)
{
    egm_status_t s =
        egm__objects_put_start_with(st.objects, writer, key, strlen(key), size, cfg, now, obj_p);
    if (s == EGM_OK)
        s = egm__objects_put_end(st.objects, writer, key, strlen(key), now);
    return s;
}

static egm_status_t put(const char *key, uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 1};
    return put_cfg(key, OBJ, &cfg, now, NULL);
}

static egm_status_t put_sized(const char *key, uint64_t size, uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 1};
    return put_cfg(key, size, &cfg, now, NULL);
}

static egm_status_t put_begin(const char *key, uint64_t now)
{
    return egm__objects_put_start(st.objects, writer, key, strlen(key), OBJ, 1, now, NULL);
}

static egm_status_t put_pinned(const char *key, int soft, int hard, uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 1, .soft_pin = soft, .hard_pin = hard};
    return put_cfg(key, OBJ, &cfg, now, NULL);
}

static egm_status_t get(const char *key, uint64_t now)
{
    egm_object_view_t view;
    return egm__objects_get_replicas(st.objects, key, strlen(key), now, &view);
}

static int present(const char *key)
{
    return egm__objects_find(st.objects, key, strlen(key)) != NULL;
}

static egm_object_index_stats_t stats(void)
{
    egm_object_index_stats_t s;
    egm__objects_stats(st.objects, &s);
    return s;
}

static void fill(const char *prefix, int n, uint64_t t0)
{
    char key[32];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        assert_int_equal(put(key, t0 + (uint64_t)i), EGM_OK);
    }
}

static void test_lru_order(void **state)
{
    (void)state;
    mount(SEG);
    fill("k", 16, 1); /* k0 at t=1 ... k15 at t=16: the segment is full */
    const uint64_t t = 100;

    /* A read makes k0 the most recently used; its lease lapses at t + TTL. */
    assert_int_equal(get("k0", t), EGM_OK);
    assert_int_equal(put("n0", t + TTL), EGM_OK); /* evicts the LRU object, k1 */
    assert_false(present("k1"));
    assert_true(present("k0"));
    assert_true(present("k2"));
    assert_int_equal(get("k2", t + TTL), EGM_OK); /* ExistKey/Get both refresh recency */
    assert_int_equal(egm__objects_exist(st.objects, "k3", 2, t + TTL, NULL), EGM_OK);
    assert_int_equal(put("n1", t + 2 * TTL), EGM_OK); /* k4: k2 and k3 were just read */
    assert_false(present("k4"));
    assert_true(present("k2"));
    assert_true(present("k3"));
    egm_object_index_stats_t s = stats();
    assert_int_equal(s.evictions_total, 2);
    assert_int_equal(s.evicted_bytes_total, 2 * OBJ);
    assert_int_equal(s.objects, 16);
    assert_int_equal(s.used_bytes, SEG);
    assert_int_equal(s.capacity_bytes, SEG);

    /* Never read: recency is the PutEnd time. k5..k15 (t=6..16) go before n0/n1. */
    for (int i = 0; i < 11; i++) {
        char key[32];
        snprintf(key, sizeof(key), "m%d", i);
        assert_int_equal(put(key, t + 2 * TTL + 1 + (uint64_t)i), EGM_OK);
    }
    for (int i = 5; i < 16; i++) {
        char key[32];
        snprintf(key, sizeof(key), "k%d", i);
        assert_false(present(key));
    }
    assert_true(present("n0"));
    assert_true(present("n1"));
    assert_true(present("k0"));
}

static void test_leased_never_evicted(void **state)
{
    (void)state;
    mount(SEG);
    fill("k", 16, 1);
    const uint64_t t = 1000;
    char key[32];

    /* Every object but k7 read (leased until t + TTL + i). */
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        if (i != 7)
            assert_int_equal(get(key, t + (uint64_t)i), EGM_OK);
    }
    assert_int_equal(stats().leased, 15);
    assert_int_equal(put("a", t + 20), EGM_OK);
    assert_false(present("k7"));
    /* Now everything evictable is leased: no space, nothing lost. The newest
     * object "a" was never read, so it goes first once needed. */
    assert_int_equal(put("b", t + 21), EGM_OK);
    assert_false(present("a"));
    assert_int_equal(get("b", t + 22), EGM_OK);
    assert_int_equal(put("c", t + 23), EGM_ERR_NO_SPACE);
    assert_false(present("c"));
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_true(present(key) == (i != 7));
    }
    /* A repeated failure at the same instant does not walk again (and still fails). */
    uint64_t runs = stats().eviction_runs_total;
    assert_int_equal(put("c", t + 23), EGM_ERR_NO_SPACE);
    assert_int_equal(stats().eviction_runs_total, runs);
    /* Leases lapse in grant order: k0's first (t + TTL). */
    assert_int_equal(put("c", t + TTL), EGM_OK);
    assert_false(present("k0"));
    assert_true(present("k1"));
    assert_int_equal(get("c", t + TTL), EGM_OK);
    assert_int_equal(put("d", t + TTL), EGM_ERR_NO_SPACE); /* k1 leased until t + TTL + 1 */
    assert_int_equal(stats().leased, 16);                  /* b, c, and k1..k15 but k7 */
    egm__master_state_tick(&st, t + TTL + 100);            /* trims the lapsed ones: c's is left */
    assert_int_equal(stats().leased, 1);
}

static void test_soft_pins_last(void **state)
{
    (void)state;
    mount(SEG);
    char key[32];

    /* Soft-pinned objects are the oldest; unpinned ones are evicted first all the same. */
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "s%d", i);
        assert_int_equal(put_pinned(key, 1, 0, 1 + (uint64_t)i), EGM_OK);
    }
    fill("u", 8, 100);
    assert_int_equal(stats().soft_pinned, 8);
    assert_int_equal(put("n0", 200), EGM_OK);
    assert_false(present("u0"));
    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "s%d", i);
        assert_true(present(key));
    }
    /* With every unpinned object leased, the LRU soft-pinned one goes. */
    const uint64_t t = 300;
    for (int i = 1; i < 8; i++) {
        snprintf(key, sizeof(key), "u%d", i);
        assert_int_equal(get(key, t), EGM_OK);
    }
    assert_int_equal(get("n0", t), EGM_OK);
    assert_int_equal(get("s0", t), EGM_OK); /* leased, and now the most recent soft pin */
    assert_int_equal(put("n1", t + 1), EGM_OK);
    assert_false(present("s1"));
    assert_true(present("s0"));
    assert_int_equal(stats().soft_pinned, 7);
    assert_int_equal(stats().evictions_total, 2);
}

static void test_soft_pin_lapses(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.soft_pin_ttl_ms = 50000; /* longer than a lease */
    reinit(&p);
    mount(SEG);
    char key[32];

    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "s%d", i);
        assert_int_equal(put_pinned(key, 1, 0, 1 + (uint64_t)i), EGM_OK);
    }
    fill("u", 8, 100);
    /* s1 read at 40000: its pin now lasts until 90000. At 60000 the others'
     * pins have lapsed: they are evicted in LRU order with unpinned objects
     * (s0 is the oldest of all). */
    assert_int_equal(get("s1", 40000), EGM_OK);
    assert_int_equal(put("n0", 60000), EGM_OK);
    assert_false(present("s0"));
    assert_int_equal(put("n1", 60000), EGM_OK);
    assert_false(present("s2"));
    assert_true(present("s1"));
    /* Evicting everything else leaves s1 (soft-pinned) last. */
    uint64_t freed = egm__objects_evict(st.objects, 14 * OBJ, 60001);
    assert_int_equal(freed, 14 * OBJ);
    assert_true(present("s1"));
    assert_int_equal(stats().objects, 2);
    assert_int_equal(egm__objects_evict(st.objects, OBJ, 60001), OBJ);
    assert_true(present("s1")); /* n1 (unpinned) before it */
    assert_int_equal(egm__objects_evict(st.objects, OBJ, 60001), OBJ);
    assert_false(present("s1")); /* soft pins go only when nothing else is left */
}

static void test_hard_pins_never(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(SEG);
    char key[32];

    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "h%d", i);
        /* A soft pin asked with a hard pin counts as the hard pin. */
        assert_int_equal(put_pinned(key, i % 2, 1, 1 + (uint64_t)i), EGM_OK);
    }
    assert_int_equal(stats().hard_pinned, 16);
    assert_int_equal(stats().soft_pinned, 0);
    assert_int_equal(put("x", 1000000), EGM_ERR_NO_SPACE);
    assert_int_equal(egm__objects_evict(st.objects, SEG, 1000000), 0);
    assert_int_equal(egm__objects_evict_if_needed(st.objects, 1000000), 0);
    assert_int_equal(stats().objects, 16);
    /* Remove still removes a hard-pinned object. */
    assert_int_equal(egm__objects_remove(st.objects, "h3", 2, 0, 1000000, NULL), EGM_OK);
    assert_int_equal(stats().hard_pinned, 15);
    assert_int_equal(put("x", 1000000), EGM_OK);
    assert_int_equal(seg->replica_count, 16);
}

static void test_pending_never_evicted(void **state)
{
    (void)state;
    mount(SEG);
    char key[32];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(
            egm__objects_put_start(st.objects, writer, key, strlen(key), OBJ, 1, 0, NULL), EGM_OK);
    }
    assert_int_equal(put("x", 10), EGM_ERR_NO_SPACE);
    assert_int_equal(egm__objects_evict(st.objects, SEG, 10), 0);
    assert_int_equal(stats().pending, 16);
}

static void test_watermark_from_tick(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.eviction_high_watermark = 0.5;
    p.eviction_ratio = 0.25;
    reinit(&p);
    mount(SEG);
    char key[32];

    fill("k", 8, 1); /* exactly half: not above */
    egm__master_state_tick(&st, 100);
    assert_int_equal(stats().objects, 8);
    /* 12 of 16 (0.75): the tick evicts down to 0.25, i.e. 4 objects left,
     * the oldest first; a PENDING object counts as used but stays. */
    fill("m", 3, 50);
    assert_int_equal(egm__objects_put_start(st.objects, writer, "p", 1, OBJ, 1, 60, NULL), EGM_OK);
    egm__master_state_tick(&st, 100);
    egm_object_index_stats_t s = stats();
    assert_int_equal(s.objects, 4);
    assert_int_equal(s.used_bytes, 4 * OBJ);
    assert_int_equal(s.evictions_total, 8);
    assert_int_equal(s.evicted_bytes_total, 8 * OBJ);
    assert_true(present("p"));
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "m%d", i);
        assert_true(present(key));
    }
    /* Below the watermark: nothing more. */
    egm__master_state_tick(&st, 200);
    assert_int_equal(stats().evictions_total, 8);
}

static void test_failed_put_evicts_ratio(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.eviction_ratio = 0.25; /* a failed PutStart frees a quarter of capacity: 4 objects */
    reinit(&p);
    mount(SEG);
    fill("k", 16, 1);
    assert_int_equal(put("n", 100), EGM_OK);
    assert_int_equal(stats().evictions_total, 4);
    assert_int_equal(stats().objects, 13);
    /* No segment could ever hold it: nothing is evicted for it. */
    assert_int_equal(egm__objects_put_start(st.objects, writer, "huge", 4, 2 * SEG, 1, 100, NULL),
                     EGM_ERR_NO_SPACE);
    assert_int_equal(stats().evictions_total, 4);
}

/* ---- minimum residency ---------------------------------------------------- */

/* Issue 15's 1 GiB put into a 1 GiB pool, scaled down: it was accepted by
 * evicting every earlier key, then the tick evicted it too. A put either
 * answers NO_SPACE, evicting nothing, or stays readable after the pass ran. */
static void test_put_as_big_as_pool(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    char key[32];
    fill("k", 4, 1); /* k0..k3 at t = 1..4, protected until t + RES */

    /* As big as the pool: above the watermark (0.90), kept only by evicting
     * itself. Refused, whatever the earlier keys' age. */
    assert_int_equal(put_sized("big", SEG, 10), EGM_ERR_NO_SPACE);
    assert_non_null(strstr(egm_last_error(), "eviction_high_watermark_ratio"));
    assert_int_equal(put_sized("big", SEG, 10 * RES), EGM_ERR_NO_SPACE);
    /* 14 of 16 fits under the watermark, but only by evicting keys within
     * their residency: NO_SPACE, and none of them is lost. */
    assert_int_equal(put_sized("big", 14 * OBJ, 10), EGM_ERR_NO_SPACE);
    assert_non_null(strstr(egm_last_error(), "eviction_min_residency_ms"));
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        assert_true(present(key));
    }
    assert_int_equal(stats().evictions_total, 0);
    assert_int_equal(stats().no_space_total, 3);

    /* Once they are older than the residency, eviction takes them for it. */
    const uint64_t t = 5 + RES;
    assert_int_equal(put_sized("big", 14 * OBJ, t), EGM_OK);
    assert_false(present("k0"));
    /* A small put takes usage above the watermark (15 of 16): the pass runs
     * and keeps both, the put within its residency... */
    assert_int_equal(put("small", t + 1), EGM_OK);
    egm__master_state_tick(&st, t + 2);
    egm__master_state_tick(&st, t + RES - 1);
    assert_int_equal(get("big", t + RES - 1), EGM_OK);
    assert_int_equal(get("small", t + RES - 1), EGM_OK);
    /* ...and after it, least recently used first: big (read first) goes. */
    egm__master_state_tick(&st, t + RES + TTL);
    assert_false(present("big"));
    assert_true(present("small"));
}

/* A put that evicting every unprotected object would still not make room
 * for evicts nothing: the old objects are not lost for a put that fails. */
static void test_no_eviction_for_a_refused_put(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    char key[32];
    fill("read", 4, 1); /* the first 4 of 16 */
    fill("old", 2, 10); /* the next 2: 10 of 16 free after them */
    const uint64_t t = 20 + RES;
    for (int i = 0; i < 4; i++) { /* leased: only the 2 old ones are evictable */
        snprintf(key, sizeof(key), "read%d", i);
        assert_int_equal(get(key, t), EGM_OK);
    }
    assert_int_equal(put_sized("x", 13 * OBJ, t), EGM_ERR_NO_SPACE);
    assert_true(present("old0"));
    assert_true(present("old1"));
    assert_int_equal(stats().evictions_total, 0);
    /* 12 is enough: the old ones go, the leased ones stay. */
    assert_int_equal(put_sized("x", 12 * OBJ, t), EGM_OK);
    assert_false(present("old0"));
    assert_false(present("old1"));
    assert_true(present("read3"));
}

/* The free space would hold the object, but no segment has that much in one
 * range and nothing is evictable: the refusal says so (not that protected
 * objects hold the space), and the marker that spares later PutStarts the
 * walk lasts no longer than nothing is evictable: it ends when an object is
 * committed, and at the instant the first protected object's residency ends. */
static void test_fragmented_pool_refusal(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    mount(SEG);
    char why[512];

    /* Two unfinished puts of 10 objects, one per segment: 6 + 6 free. */
    assert_int_equal(egm__objects_put_start(st.objects, writer, "pa", 2, 10 * OBJ, 1, 0, NULL),
                     EGM_OK);
    assert_int_equal(egm__objects_put_start(st.objects, writer, "pb", 2, 10 * OBJ, 1, 0, NULL),
                     EGM_OK);
    uint64_t runs = stats().eviction_runs_total;
    assert_int_equal(put_sized("x", 8 * OBJ, 10), EGM_ERR_NO_SPACE);
    snprintf(why, sizeof(why), "%s", egm_last_error());
    if (strstr(why, "no single segment has room for 32768 bytes") == NULL ||
        strstr(why, "49152 bytes are free in 2 segments, at most 24576 of them in one range") ==
            NULL)
        fail_msg("fragmented pool: %s", why);
    assert_null(strstr(why, "what eviction could free"));
    assert_int_equal(stats().eviction_runs_total, runs + 1);
    /* Nothing evictable, nothing protected: the next PutStarts do not walk
     * again (the same answer), whatever their size... */
    assert_int_equal(put_sized("x", 8 * OBJ, 11), EGM_ERR_NO_SPACE);
    assert_non_null(strstr(egm_last_error(), "no single segment has room for 32768 bytes"));
    assert_int_equal(put_sized("y", 14 * OBJ, 11), EGM_ERR_NO_SPACE); /* more than is free */
    assert_non_null(strstr(egm_last_error(), "what eviction could free"));
    assert_int_equal(stats().eviction_runs_total, runs + 1);

    /* ...until an object is committed: then they walk again, and the marker
     * lasts until its residency ends, not longer. */
    assert_int_equal(egm__objects_put_end(st.objects, writer, "pa", 2, 20), EGM_OK);
    assert_int_equal(put_sized("x", 8 * OBJ, 21), EGM_ERR_NO_SPACE);
    assert_non_null(strstr(egm_last_error(), "no single segment has room for 32768 bytes"));
    assert_int_equal(stats().eviction_runs_total, runs + 2);
    assert_int_equal(put_sized("x", 8 * OBJ, 20 + RES - 1), EGM_ERR_NO_SPACE);
    assert_int_equal(stats().eviction_runs_total, runs + 2);
    assert_int_equal(put_sized("x", 8 * OBJ, 20 + RES), EGM_OK);
    assert_false(present("pa"));
    assert_true(present("pb"));
    assert_int_equal(stats().evictions_total, 1);
    assert_int_equal(stats().no_space_total, 5);
}

/* A put's replicas stop at the watermark: what would go over it is not placed. */
static void test_replicas_under_watermark(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    mount(SEG); /* capacity 32 objects: at most 28.8 under the watermark */
    egm_put_config_t two = {.replica_num = 2};
    egm_object_view_t view;
    assert_int_equal(put_cfg("a", 10 * OBJ, &two, 1, &view), EGM_OK);
    assert_int_equal(view.n_replicas, 2);
    assert_int_equal(egm__objects_remove(st.objects, "a", 1, 0, 2, NULL), EGM_OK);
    assert_int_equal(put_cfg("b", 15 * OBJ, &two, 3, &view), EGM_OK);
    assert_int_equal(view.n_replicas, 1);
    assert_int_equal(stats().used_bytes, 15 * OBJ);
}

/* Unfinished puts on most of the pool: finished objects that land are not
 * evicted by the next tick; the tick keeps its headroom in the space the
 * unfinished puts leave, instead of taking every finished object; the
 * unfinished puts, once landed, are protected like any other. */
static void test_pending_cannot_push_out_committed(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    char key[32];

    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(put_begin(key, 0), EGM_OK);
    }
    fill("c", 4, 10); /* c0..c3: the pool is full */
    egm__master_state_tick(&st, 20);
    egm__master_state_tick(&st, 10 + RES - 1);
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        assert_true(present(key));
    }
    /* Nothing evictable: a new put is refused without losing anything. */
    assert_int_equal(put("n", 10 + RES - 1), EGM_ERR_NO_SPACE);
    assert_int_equal(stats().evictions_total, 0);

    /* After the residency the tick frees its 15% of what the unfinished
     * puts leave (4 objects: 0.6 of one), not 2.4 objects: c0 alone goes. */
    egm__master_state_tick(&st, 13 + RES);
    assert_false(present("c0"));
    assert_int_equal(stats().evictions_total, 1);
    for (int i = 1; i < 4; i++) {
        snprintf(key, sizeof(key), "c%d", i);
        assert_true(present(key));
    }

    /* The unfinished puts land: the tick takes older objects for them. */
    const uint64_t t = 20 + RES;
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(egm__objects_put_end(st.objects, writer, key, strlen(key), t), EGM_OK);
    }
    assert_int_equal(put("n", t), EGM_OK);
    egm__master_state_tick(&st, t + 1);
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_true(present(key));
    }
    assert_true(present("n"));
    for (int i = 1; i < 4; i++) { /* down to 13.6 of 16 objects: the 3 older ones */
        snprintf(key, sizeof(key), "c%d", i);
        assert_false(present(key));
    }
}

/* Steady churn: puts keep coming, old objects make room for them, and every
 * put accepted stays readable for the residency. A burst larger than the
 * pool answers NO_SPACE once only young objects are left, instead of
 * evicting what it just stored; once they age, puts are accepted again. */
static void test_churn_evicts_old_accepts_new(void **state)
{
    (void)state;
    egm_objects_params_t p = residency_params();
    reinit(&p);
    mount(SEG);
    char key[32];
    const int rounds = 12, per_round = 6; /* 6 puts per 600 ms: 10 per residency */

    for (int r = 0; r < rounds; r++) {
        uint64_t t = 1000 + (uint64_t)r * 600;
        for (int i = 0; i < per_round; i++) {
            snprintf(key, sizeof(key), "r%d/%d", r, i);
            egm_status_t s = put(key, t + (uint64_t)i);
            if (s != EGM_OK)
                fail_msg("round %d put %d: %s (%s)", r, i, egm_status_string(s), egm_last_error());
        }
        egm__master_state_tick(&st, t + 100);
        /* This round and the one before (within the residency) are all there. */
        for (int back = 0; back <= 1 && back <= r; back++)
            for (int i = 0; i < per_round; i++) {
                snprintf(key, sizeof(key), "r%d/%d", r - back, i);
                assert_true(present(key));
            }
    }
    egm_object_index_stats_t s = stats();
    assert_true(s.evictions_total >= (uint64_t)(rounds * per_round - 16));
    assert_int_equal(s.no_space_total, 0);
    assert_false(present("r0/0"));

    /* A burst of 20 at one instant, 1 ms after the last round. */
    const uint64_t t = 1000 + (uint64_t)rounds * 600;
    int ok = 0, no_space = 0;
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "burst%d", i);
        egm_status_t status = put(key, t);
        if (status == EGM_OK)
            ok++;
        else if (status == EGM_ERR_NO_SPACE)
            no_space++;
        else
            fail_msg("burst put %d: %s", i, egm_status_string(status));
        egm__master_state_tick(&st, t);
    }
    assert_true(ok > 0 && no_space > 0 && ok + no_space == 20);
    for (int i = 0; i < ok; i++) {
        snprintf(key, sizeof(key), "burst%d", i);
        assert_int_equal(get(key, t), EGM_OK);
    }
    assert_int_equal(stats().no_space_total, (uint64_t)no_space);
    /* A refusal starts no eviction run. */
    uint64_t runs = stats().eviction_runs_total;
    assert_int_equal(put("late", t + 1), EGM_ERR_NO_SPACE);
    assert_int_equal(stats().eviction_runs_total, runs);
    /* Aged past the residency and their leases, the burst makes room again. */
    uint64_t later = t + RES + TTL;
    for (int i = 0; i < per_round; i++) {
        snprintf(key, sizeof(key), "after%d", i);
        assert_int_equal(put(key, later), EGM_OK);
    }
}

static void test_discard_timeout(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.pending_timeout_ms = 5000;
    reinit(&p);
    mount(SEG);

    assert_int_equal(egm__objects_put_start(st.objects, writer, "a", 1, OBJ, 1, 0, NULL), EGM_OK);
    assert_int_equal(egm__objects_sweep_pending(st.objects, 4999), 0);
    assert_int_equal(egm__objects_put_start(st.objects, writer, "a", 1, OBJ, 1, 4999, NULL),
                     EGM_ERR_EXISTS);
    egm__master_state_tick(&st, 5000);
    assert_false(present("a"));
    assert_int_equal(stats().discarded_puts_total, 1);
    assert_int_equal(stats().used_bytes, 0);
}

static void test_params_checked(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.soft_pin_ttl_ms = EGM_SETTINGS_SOFT_PIN_TTL_MAX_MS + 1;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "default_kv_soft_pin_ttl"));
    p = quiet_params();
    p.eviction_ratio = 1.5;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "eviction_ratio"));
    p = quiet_params();
    p.eviction_high_watermark = -0.1;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    p = quiet_params();
    p.pending_timeout_ms = 0;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    p = quiet_params();
    p.min_residency_ms = EGM_SETTINGS_MIN_RESIDENCY_MAX_MS + 1;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "eviction_min_residency_ms"));
    p = quiet_params();
    p.placement = (egm_placement_t)3;
    assert_int_equal(egm__objects_params_check(&p), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(),
                        "placement_strategy: 3 is not one of random|free_ratio_first|local_first");
    egm__objects_params_default(&p);
    assert_int_equal(egm__objects_params_check(&p), EGM_OK);
    assert_int_equal(p.min_residency_ms, 10000);
    assert_true(p.eviction_high_watermark == 0.90 && p.eviction_ratio == 0.05); /* Mooncake's */
    assert_int_equal(p.soft_pin_ttl_ms, 30u * 60u * 1000u);
    assert_int_equal(p.pending_timeout_ms, 30000);
    assert_int_equal(p.placement, EGM_PLACEMENT_RANDOM);
}

/* ---- placement ------------------------------------------------------------ */

static void test_preferred_segments(void **state)
{
    (void)state;
    egm_segment_t *a = mount_named("a", "h1", SEG), *b = mount_named("b", "h1", SEG);
    egm_segment_t *c0 = mount_named("c/0", "h2", SEG), *c1 = mount_named("c/1", "h2", SEG);
    const char *pref_ba[] = {"b", "nowhere", "a"};
    egm_put_config_t cfg = {.replica_num = 2, .preferred_segments = pref_ba, .n_preferred = 3};
    egm_object_view_t view, *obj = &view;
    char key[32];

    for (int i = 0; i < 8; i++) {
        snprintf(key, sizeof(key), "ba%d", i);
        assert_int_equal(put_cfg(key, OBJ, &cfg, 1, obj), EGM_OK);
        assert_ptr_equal(obj->replicas[0].segment, b);
        assert_ptr_equal(obj->replicas[1].segment, a);
    }
    /* A pool's name matches its chunks, but one provider (pool c) holds one
     * replica: the second and third come from the strategy, on the other
     * providers (a and b, on another host than c). */
    const char *pref_c[] = {"c"};
    cfg = (egm_put_config_t){.replica_num = 3, .preferred_segments = pref_c, .n_preferred = 1};
    assert_int_equal(put_cfg("c", OBJ, &cfg, 1, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 3);
    assert_true(obj->replicas[0].segment == c0 || obj->replicas[0].segment == c1);
    assert_true(obj->replicas[1].segment == a || obj->replicas[1].segment == b);
    assert_true(obj->replicas[2].segment == a || obj->replicas[2].segment == b);
    assert_ptr_not_equal(obj->replicas[1].segment, obj->replicas[2].segment);
    /* A full chunk name matches that chunk only. */
    const char *pref_c1[] = {"c/1"};
    cfg = (egm_put_config_t){.replica_num = 1, .preferred_segments = pref_c1, .n_preferred = 1};
    assert_int_equal(put_cfg("c1", OBJ, &cfg, 1, obj), EGM_OK);
    assert_ptr_equal(obj->replicas[0].segment, c1);
    /* Best effort: a full preferred segment is skipped. */
    fill("fill", 7, 2); /* random: somewhere */
    const char *pref_b[] = {"b"};
    cfg = (egm_put_config_t){.replica_num = 1, .preferred_segments = pref_b, .n_preferred = 1};
    for (int i = 0; b->replica_count < 16; i++) {
        snprintf(key, sizeof(key), "tob%d", i);
        assert_true(i < 16);
        assert_int_equal(put_cfg(key, OBJ, &cfg, 3, obj), EGM_OK);
        assert_ptr_equal(obj->replicas[0].segment, b);
    }
    assert_int_equal(put_cfg("notb", OBJ, &cfg, 3, obj), EGM_OK);
    assert_ptr_not_equal(obj->replicas[0].segment, b);
    /* Too many names is refused. */
    cfg.n_preferred = EGM_MASTER_PREFERRED_MAX + 1;
    assert_int_equal(egm__objects_put_start_with(st.objects, writer, "many", 4, OBJ, &cfg, 3, NULL),
                     EGM_ERR_INVALID_ARG);
}

static void test_free_ratio_first(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.placement = EGM_PLACEMENT_FREE_RATIO_FIRST;
    reinit(&p);
    /* No segment yet: NO_SPACE, with nothing to rank (UBSan once saw qsort(NULL, 0):
     * fuzz/regressions/master_rpc/free-ratio-first-no-segment) */
    assert_int_equal(put("nowhere", 1), EGM_ERR_NO_SPACE);
    egm_segment_t *big = mount_named("big", "h", 2 * SEG), *small = mount_named("small", "h", SEG);
    const char *pref_big[] = {"big"};
    egm_put_config_t cfg = {.replica_num = 1, .preferred_segments = pref_big, .n_preferred = 1};
    egm_object_view_t view, *obj = &view;
    char key[32];

    /* big: 12 of 32 used (free ratio 0.625) against small's 1.0: small takes
     * objects until its ratio falls to 0.625 (6 of 16 used), after which the
     * two alternate. */
    for (int i = 0; i < 12; i++) {
        snprintf(key, sizeof(key), "big%d", i);
        assert_int_equal(put_cfg(key, OBJ, &cfg, 1, obj), EGM_OK);
        assert_ptr_equal(obj->replicas[0].segment, big);
    }
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "f%d", i);
        assert_int_equal(put(key, 2), EGM_OK);
        assert_int_equal(small->replica_count, (uint64_t)i + 1);
    }
    assert_int_equal(put("g0", 2), EGM_OK); /* tie at 0.625: either */
    assert_int_equal(big->replica_count + small->replica_count, 19);
    for (int i = 1; i < 8; i++) {
        snprintf(key, sizeof(key), "g%d", i);
        assert_int_equal(put(key, 2), EGM_OK);
        /* The segment with more free share took it: the two stay within one object. */
        double rb = (32.0 - (double)big->replica_count) / 32.0;
        double rs = (16.0 - (double)small->replica_count) / 16.0;
        assert_true(rb - rs <= 1.0 / 16.0 + 1e-9 && rs - rb <= 1.0 / 16.0 + 1e-9);
    }
}

static void test_local_first(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.placement = EGM_PLACEMENT_LOCAL_FIRST;
    reinit(&p);
    egm_segment_t *l0 = mount_named("l0", "here", SEG), *l1 = mount_named("l1", "here", SEG);
    egm_segment_t *r0 = mount_named("r0", "there", SEG), *r1 = mount_named("r1", "there", SEG);
    egm_put_config_t cfg = {.replica_num = 1, .writer_host_id = "here"};
    egm_object_view_t view, *obj = &view;
    char key[32];

    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "one%d", i);
        assert_int_equal(put_cfg(key, 64, &cfg, 1, obj), EGM_OK);
        assert_true(obj->replicas[0].segment == l0 || obj->replicas[0].segment == l1);
    }
    assert_true(l0->replica_count > 0 && l1->replica_count > 0); /* random among local ones */
    /* Three replicas: one here, then another host before a second one here
     * (each segment its own provider). */
    cfg.replica_num = 3;
    assert_int_equal(put_cfg("three", 64, &cfg, 1, obj), EGM_OK);
    assert_true(obj->replicas[0].segment == l0 || obj->replicas[0].segment == l1);
    assert_true(obj->replicas[1].segment == r0 || obj->replicas[1].segment == r1);
    assert_true(obj->replicas[2].segment == l0 || obj->replicas[2].segment == l1);
    assert_ptr_not_equal(obj->replicas[0].segment, obj->replicas[2].segment);
    /* Preferred segments come before local ones. */
    const char *pref[] = {"r1"};
    cfg = (egm_put_config_t){
        .replica_num = 2, .writer_host_id = "here", .preferred_segments = pref, .n_preferred = 1};
    assert_int_equal(put_cfg("pref", 64, &cfg, 1, obj), EGM_OK);
    assert_ptr_equal(obj->replicas[0].segment, r1);
    assert_true(obj->replicas[1].segment == l0 || obj->replicas[1].segment == l1);
    /* An unknown writer host: random over all (every segment gets some). */
    cfg = (egm_put_config_t){.replica_num = 1};
    uint64_t before = r0->replica_count + r1->replica_count;
    for (int i = 0; i < 64; i++) {
        snprintf(key, sizeof(key), "any%d", i);
        assert_int_equal(put_cfg(key, 64, &cfg, 1, NULL), EGM_OK);
    }
    assert_true(r0->replica_count + r1->replica_count > before);
}

static void test_random_spreads(void **state)
{
    (void)state;
    egm_segment_t *s[3] = {mount(SEG), mount(SEG), mount(SEG)};
    char key[32];
    for (int i = 0; i < 30; i++) {
        snprintf(key, sizeof(key), "r%d", i);
        assert_int_equal(put(key, 1), EGM_OK);
    }
    for (int i = 0; i < 3; i++)
        assert_true(s[i]->replica_count > 0);
}

/* ---- RPC plumbing --------------------------------------------------------- */

static void handle(uint16_t type, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *d,
                   ProtobufCMessage **reply_p)
{
    uint8_t *buf;
    size_t len;
    egm_rpc_reply_t reply = {0};
    assert_int_equal(egm__pb_pack(req, &buf, &len), EGM_OK);
    assert_int_equal(egm__master_handle(&st, type, buf, len, &reply), EGM_OK);
    egm_free(buf);
    assert_int_equal(egm__pb_unpack(d, reply.buf, reply.len, reply_p), EGM_OK);
    egm_free(reply.buf);
}

static void test_rpc_plumbing(void **state)
{
    (void)state;
    egm_objects_params_t p = quiet_params();
    p.placement = EGM_PLACEMENT_LOCAL_FIRST;
    reinit(&p);
    mount_named("far", "there", SEG);
    egm_segment_t *near = mount_named("near", "here", SEG);
    egm_segment_t *pref = mount_named("pref", "there", SEG);
    Egm__Id client = EGM__ID__INIT;
    char host_buf[EGM_HOST_ID_MAX];
    egm__id_to_pb(writer, &client);

    /* The ping's host id is kept for local_first. */
    Egm__PingRequest ping = EGM__PING_REQUEST__INIT;
    Egm__PingReply *pong;
    ping.client = &client;
    ping.host_id = "here";
    handle(EGM_RPC_PING, &ping.base, &egm__ping_reply__descriptor, (ProtobufCMessage **)&pong);
    assert_int_equal(pong->status, EGM_OK);
    egm__pb_free(&pong->base);
    assert_string_equal(egm__liveness_host_id(st.liveness, writer, host_buf), "here");
    /* Too long a host id is refused, naming the field. */
    char long_host[EGM_HOST_ID_MAX + 8];
    memset(long_host, 'h', sizeof(long_host) - 1);
    long_host[sizeof(long_host) - 1] = '\0';
    ping.host_id = long_host;
    handle(EGM_RPC_PING, &ping.base, &egm__ping_reply__descriptor, (ProtobufCMessage **)&pong);
    assert_int_equal(pong->status, EGM_ERR_INVALID_ARG);
    egm__pb_free(&pong->base);
    assert_string_equal(egm__liveness_host_id(st.liveness, writer, host_buf), "here");

    /* PutStart: pins and preferred segments from the ReplicateConfig. */
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__KeysReply *reply;
    char *keys[] = {"soft", "local"};
    uint64_t sizes[] = {OBJ, OBJ};
    char *prefs[] = {"pref"};
    req.client = &client;
    req.n_keys = req.n_sizes = 1;
    req.keys = keys;
    req.sizes = sizes;
    req.config = &cfg;
    cfg.with_soft_pin = 1;
    cfg.n_preferred_segments = 1;
    cfg.preferred_segments = prefs;
    handle(EGM_RPC_PUT_START, &req.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply);
    assert_int_equal(reply->results[0]->status, EGM_OK);
    egm__pb_free(&reply->base);
    const egm_object_t *obj = egm__objects_find(st.objects, "soft", 4);
    assert_non_null(obj);
    assert_int_equal(obj->soft_pin, 1);
    assert_int_equal(obj->hard_pin, 0);
    assert_ptr_equal(obj->replicas[0].segment, pref);

    req.keys = &keys[1];
    cfg = (Egm__ReplicateConfig)EGM__REPLICATE_CONFIG__INIT;
    cfg.with_hard_pin = 1;
    handle(EGM_RPC_PUT_START, &req.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply);
    assert_int_equal(reply->results[0]->status, EGM_OK);
    egm__pb_free(&reply->base);
    obj = egm__objects_find(st.objects, "local", 5);
    assert_non_null(obj);
    assert_int_equal(obj->hard_pin, 1);
    assert_ptr_equal(obj->replicas[0].segment, near);
    assert_int_equal(stats().soft_pinned, 1);
    assert_int_equal(stats().hard_pinned, 1);

    /* PutEnd records its time as the object's recency. */
    fake_now = 777;
    Egm__KeysRequest end = EGM__KEYS_REQUEST__INIT;
    end.client = &client;
    end.n_keys = 2;
    end.keys = keys;
    handle(EGM_RPC_PUT_END, &end.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply);
    assert_int_equal(reply->results[0]->status, EGM_OK);
    assert_int_equal(reply->results[1]->status, EGM_OK);
    egm__pb_free(&reply->base);
    egm_object_view_t view;
    assert_int_equal(egm__objects_stat(st.objects, "soft", 4, &view), EGM_OK);
    assert_int_equal(view.last_access_ms, 777);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_lru_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leased_never_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_soft_pins_last, setup, teardown),
        cmocka_unit_test_setup_teardown(test_soft_pin_lapses, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hard_pins_never, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_never_evicted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_watermark_from_tick, setup, teardown),
        cmocka_unit_test_setup_teardown(test_failed_put_evicts_ratio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_as_big_as_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_eviction_for_a_refused_put, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fragmented_pool_refusal, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replicas_under_watermark, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pending_cannot_push_out_committed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_churn_evicts_old_accepts_new, setup, teardown),
        cmocka_unit_test_setup_teardown(test_discard_timeout, setup, teardown),
        cmocka_unit_test_setup_teardown(test_params_checked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preferred_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_free_ratio_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_random_spreads, setup, teardown),
        cmocka_unit_test_setup_teardown(test_rpc_plumbing, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
