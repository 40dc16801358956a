/* The master's eviction, pins and placement strategies, driven without
 * sockets through the object index with explicit times: LRU order (recency =
 * last lease, or PutEnd), leased objects never evicted, soft-pinned ones last
 * and lapsing after their TTL, hard-pinned never, the watermark from the tick,
 * eviction when a PutStart finds no room, the discard timeout, each placement
 * strategy, and the RPC plumbing (host id from pings, ReplicateConfig). */
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

static uint64_t live_at_start;
static egm_master_state_t st;
static egm_id_t provider, writer;
static uint64_t fake_now;

static uint64_t clock_ms(void)
{
    return fake_now;
}

/* Background eviction off and a PutStart evicting just what it needs, unless
 * a test says otherwise. */
static void init_with(const egm_objects_params_t *params)
{
    assert_int_equal(egm__master_state_init_with(&st, params, CLIENT_TTL), EGM_OK);
    st.now_ms = clock_ms;
}

static egm_objects_params_t quiet_params(void)
{
    egm_objects_params_t p;
    egm__objects_params_default(&p);
    p.lease_ttl_ms = TTL;
    p.eviction_high_watermark = 1.0;
    p.eviction_ratio = 0.0;
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

static egm_segment_t *mount_named(const char *name, const char *host, uint64_t size)
{
    egm_segment_params_t p = {.id = egm__id_random(),
                              .size = size,
                              .name = name,
                              .host_id = host,
                              .tcp_endpoint = "127.0.0.1:1"};
    assert_int_equal(egm__liveness_mount(st.liveness, provider, &p, 0), EGM_OK);
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
    assert_int_equal(egm__objects_remove(st.objects, "h3", 2, 0, 1000000), EGM_OK);
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
    p.soft_pin_ttl_ms = EGM_MASTER_SOFT_PIN_TTL_MAX_MS + 1;
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
    egm__objects_params_default(&p);
    assert_int_equal(egm__objects_params_check(&p), EGM_OK);
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
    /* A pool's name matches its chunks; the third replica comes from the strategy. */
    const char *pref_c[] = {"c"};
    cfg = (egm_put_config_t){.replica_num = 3, .preferred_segments = pref_c, .n_preferred = 1};
    assert_int_equal(put_cfg("c", OBJ, &cfg, 1, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 3);
    assert_true(obj->replicas[0].segment == c0 || obj->replicas[0].segment == c1);
    assert_true(obj->replicas[1].segment == c0 || obj->replicas[1].segment == c1);
    assert_true(obj->replicas[2].segment == a || obj->replicas[2].segment == b);
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
    cfg.replica_num = 3;
    assert_int_equal(put_cfg("three", 64, &cfg, 1, obj), EGM_OK);
    assert_true(obj->replicas[0].segment == l0 || obj->replicas[0].segment == l1);
    assert_true(obj->replicas[1].segment == l0 || obj->replicas[1].segment == l1);
    assert_true(obj->replicas[2].segment == r0 || obj->replicas[2].segment == r1);
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
    char host_buf[EGM_MASTER_HOST_ID_MAX];
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
    char long_host[EGM_MASTER_HOST_ID_MAX + 8];
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
    assert_int_equal(egm__objects_find(st.objects, "soft", 4)->last_access_ms, 777);
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
