/* Master state without sockets: the object life cycle (PutStart -> PutEnd /
 * PutRevoke), leases against Remove, replica placement on distinct segments,
 * NO_SPACE, client expiry and unmount dropping replicas, retired ids by view,
 * stale PENDING objects discarded, keys colliding in the key table, the index
 * against a model under random calls, eviction when frees find no memory.
 * Time is an argument, so nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"

#define TTL 10000u /* lease, ms */
#define CLIENT_TTL 10000u

static uint64_t live_at_start;

typedef struct {
    egm_master_state_t st;
    egm_id_t provider; /* owns the segments the tests mount */
    egm_id_t writer;
    egm_id_t other;
} fixture_t;

static fixture_t fx;

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = CLIENT_TTL};
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = TTL;
    assert_int_equal(egm__master_state_init(&fx.st, &sp), EGM_OK);
    fx.provider = egm__id_random();
    fx.writer = egm__id_random();
    fx.other = egm__id_random();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egm__objects_check(fx.st.objects), EGM_OK); /* whatever the test did */
    egm__master_state_cleanup(&fx.st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static egm_segment_t *mount_as(egm_id_t owner, uint64_t size, uint64_t now)
{
    static int counter;
    char name[32];
    snprintf(name, sizeof(name), "test/%d", counter++);
    egm_segment_params_t p = {
        .id = egm__id_random(), .size = size, .name = name, .tcp_endpoint = "127.0.0.1:1"};
    assert_int_equal(egm__liveness_mount(fx.st.liveness, owner, &p, now), EGM_OK);
    egm_segment_t *seg = egm__segment_table_find(fx.st.segments, p.id);
    assert_non_null(seg);
    return seg;
}

static egm_segment_t *mount(uint64_t size)
{
    return mount_as(fx.provider, size, 0);
}

static uint64_t used(const egm_segment_t *seg)
{
    egm_allocator_stats_t s;
    egm__allocator_stats(seg->allocator, &s);
    return s.used;
}

static egm_status_t put_start(const char *key, uint64_t size, uint32_t replicas, uint64_t now,
                              egm_object_view_t *obj_p)
{
    return egm__objects_put_start(fx.st.objects, fx.writer, key, strlen(key), size, replicas, now,
                                  obj_p);
}

static egm_status_t put(const char *key, uint64_t size, uint32_t replicas, uint64_t now)
{
    egm_status_t s = put_start(key, size, replicas, now, NULL);
    if (s == EGM_OK)
        s = egm__objects_put_end(fx.st.objects, fx.writer, key, strlen(key), now);
    return s;
}

static egm_status_t get(const char *key, uint64_t now, egm_object_view_t *obj_p)
{
    return egm__objects_get_replicas(fx.st.objects, key, strlen(key), now, obj_p);
}

static egm_status_t exist(const char *key, uint64_t now)
{
    return egm__objects_exist(fx.st.objects, key, strlen(key), now, NULL);
}

static egm_status_t rm(const char *key, int force, uint64_t now)
{
    return egm__objects_remove(fx.st.objects, key, strlen(key), force, now, NULL);
}

/* Remove, answering when the object's latest lease was granted. */
static egm_status_t rm_grant(const char *key, int force, uint64_t now, uint64_t *grant_p)
{
    *grant_p = 12345; /* overwritten on every path */
    return egm__objects_remove(fx.st.objects, key, strlen(key), force, now, grant_p);
}

/* The master's tick at `now`, the provider having pinged just before (so
 * that its segments stay mounted). */
static void tick(uint64_t now)
{
    assert_int_equal(egm__liveness_ping(fx.st.liveness, fx.provider, now), EGM_OK);
    egm__master_state_tick(&fx.st, now);
}

static void check_index(void)
{
    if (egm__objects_check(fx.st.objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
}

static egm_object_index_stats_t stats(void)
{
    egm_object_index_stats_t s;
    egm__objects_stats(fx.st.objects, &s);
    return s;
}

static void test_put_lifecycle(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_object_view_t view, *obj = &view;

    assert_int_equal(put_start("a", 100, 1, 0, obj), EGM_OK);
    assert_non_null(obj);
    assert_int_equal(obj->state, EGM_OBJECT_PENDING);
    assert_int_equal(obj->n_replicas, 1);
    assert_ptr_equal(obj->replicas[0].segment, seg);
    assert_int_equal(obj->replicas[0].offset % EGM_ALLOCATOR_ALIGN, 0);
    assert_int_equal(obj->replicas[0].length, 100);
    assert_int_equal(seg->replica_count, 1);
    assert_int_equal(used(seg), 128);

    /* Invisible while PENDING. */
    assert_int_equal(get("a", 0, obj), EGM_ERR_NOT_READY);
    assert_int_equal(obj->size, 0); /* nothing copied */
    assert_int_equal(exist("a", 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(rm("a", 0, 0), EGM_ERR_NOT_READY);
    assert_int_equal(put_start("a", 100, 1, 0, NULL), EGM_ERR_EXISTS);

    /* Only the writer commits it; a retried PutEnd is harmless. */
    assert_int_equal(egm__objects_put_end(fx.st.objects, fx.other, "a", 1, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__objects_put_end(fx.st.objects, fx.writer, "a", 1, 0), EGM_OK);
    assert_int_equal(egm__objects_put_end(fx.st.objects, fx.writer, "a", 1, 0), EGM_OK);
    assert_int_equal(egm__objects_put_end(fx.st.objects, fx.writer, "zz", 2, 0), EGM_ERR_NOT_FOUND);

    assert_int_equal(get("a", 0, obj), EGM_OK);
    assert_int_equal(obj->state, EGM_OBJECT_COMPLETE);
    assert_int_equal(obj->size, 100);
    assert_int_equal(exist("a", 0), EGM_OK);
    assert_int_equal(put_start("a", 5, 1, 0, NULL), EGM_ERR_EXISTS);
    assert_int_equal(get("missing", 0, obj), EGM_ERR_NOT_FOUND);
    assert_int_equal(exist("missing", 0), EGM_ERR_NOT_FOUND);

    assert_int_equal(rm("a", 0, TTL), EGM_OK); /* lease from t=0 over at t=TTL */
    assert_int_equal(rm("a", 0, TTL), EGM_ERR_NOT_FOUND);
    assert_int_equal(used(seg), 0);
    assert_int_equal(seg->replica_count, 0);
}

static void test_invalid_arguments(void **state)
{
    (void)state;
    static char long_key[EGM_MASTER_KEY_MAX + 2];
    mount(1 << 20);

    assert_int_equal(put_start("k", 0, 1, 0, NULL), EGM_ERR_INVALID_ARG);
    assert_int_equal(put_start("k", 1, 0, 0, NULL), EGM_ERR_INVALID_ARG);
    assert_int_equal(put_start("k", 1, EGM_MASTER_REPLICA_MAX + 1, 0, NULL), EGM_ERR_INVALID_ARG);
    assert_int_equal(put_start("", 1, 1, 0, NULL), EGM_ERR_INVALID_KEY);
    memset(long_key, 'x', EGM_MASTER_KEY_MAX + 1);
    assert_int_equal(put_start(long_key, 1, 1, 0, NULL), EGM_ERR_INVALID_KEY);
    long_key[EGM_MASTER_KEY_MAX] = '\0';
    assert_int_equal(put(long_key, 1, 1, 0), EGM_OK); /* exactly the limit */
    assert_int_equal(exist(long_key, 0), EGM_OK);
    assert_int_equal(exist("", 0), EGM_ERR_INVALID_KEY);
    assert_int_equal(rm("", 1, 0), EGM_ERR_INVALID_KEY);
    /* A size no segment could ever hold is NO_SPACE, not a crash or an overflow. */
    assert_int_equal(put_start("huge", UINT64_MAX, 1, 0, NULL), EGM_ERR_NO_SPACE);
    assert_null(egm__objects_find(fx.st.objects, "huge", 4));
}

static void test_revoke(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);

    assert_int_equal(put_start("r", 1000, 1, 0, NULL), EGM_OK);
    assert_int_equal(egm__objects_put_revoke(fx.st.objects, fx.other, "r", 1), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__objects_put_revoke(fx.st.objects, fx.writer, "r", 1), EGM_OK);
    assert_null(egm__objects_find(fx.st.objects, "r", 1));
    assert_int_equal(used(seg), 0);
    assert_int_equal(egm__objects_put_revoke(fx.st.objects, fx.writer, "r", 1), EGM_ERR_NOT_FOUND);
    /* The key is free again; a committed object cannot be revoked. */
    assert_int_equal(put("r", 1000, 1, 0), EGM_OK);
    assert_int_equal(egm__objects_put_revoke(fx.st.objects, fx.writer, "r", 1),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(exist("r", 0), EGM_OK);
}

static void test_lease_blocks_remove(void **state)
{
    (void)state;
    mount(1 << 20);
    const uint64_t t = 50000;

    assert_int_equal(put("k", 10, 1, 0), EGM_OK);
    assert_int_equal(get("k", t, NULL), EGM_OK); /* lease until t + TTL */
    assert_int_equal(rm("k", 0, t), EGM_ERR_HAS_LEASE);
    assert_int_equal(rm("k", 0, t + TTL - 1), EGM_ERR_HAS_LEASE);
    /* ExistKey refreshes the lease too: now until t + 2 * TTL - 1. */
    assert_int_equal(exist("k", t + TTL - 1), EGM_OK);
    assert_int_equal(rm("k", 0, t + TTL), EGM_ERR_HAS_LEASE);
    assert_int_equal(rm("k", 0, t + 2 * TTL - 2), EGM_ERR_HAS_LEASE);
    assert_int_equal(rm("k", 0, t + 2 * TTL - 1), EGM_OK);

    /* Force ignores the lease (and PENDING state). */
    assert_int_equal(put("f", 10, 1, 0), EGM_OK);
    assert_int_equal(get("f", t, NULL), EGM_OK);
    assert_int_equal(rm("f", 1, t), EGM_OK);
    assert_int_equal(exist("f", t), EGM_ERR_NOT_FOUND);
    assert_int_equal(put_start("p", 10, 1, 0, NULL), EGM_OK);
    assert_int_equal(rm("p", 1, 0), EGM_OK);
    assert_null(egm__objects_find(fx.st.objects, "p", 1));
}

static void test_remove_all(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    const uint64_t t = 20000;
    uint64_t grant = 12345;

    assert_int_equal(put("c1", 10, 1, 0), EGM_OK);
    assert_int_equal(get("c1", 100, NULL), EGM_OK); /* lease over at 100 + TTL < t */
    assert_int_equal(put("c2", 10, 1, 0), EGM_OK);
    assert_int_equal(put("leased", 10, 1, 0), EGM_OK);
    assert_int_equal(get("leased", t, NULL), EGM_OK);
    assert_int_equal(put("leased2", 10, 1, 0), EGM_OK);
    assert_int_equal(get("leased2", t - 3, NULL), EGM_OK);
    assert_int_equal(put_start("pending", 10, 1, t, NULL), EGM_OK);

    /* Without force: the expired lease's object goes, its grant reported. */
    assert_int_equal(egm__objects_remove_all(fx.st.objects, 0, t, &grant), 2);
    assert_int_equal(grant, 100);
    assert_int_equal(exist("c1", t), EGM_ERR_NOT_FOUND);
    assert_int_equal(exist("leased", t), EGM_OK);
    assert_non_null(egm__objects_find(fx.st.objects, "pending", 7));
    assert_int_equal(used(seg), 3 * 64);
    check_index();

    /* Forced: everything goes; the two leased objects' space is held, each
     * until its own lease ends; the others' is freed at once. The grant is
     * the latest over all of them, whatever order they are visited in. */
    char key[16];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "old%d", i);
        assert_int_equal(put(key, 10, 1, 0), EGM_OK);
        assert_int_equal(get(key, i < 8 ? 1000 + (uint64_t)i : 0, NULL), EGM_OK); /* expired */
    }
    assert_int_equal(egm__objects_remove_all(fx.st.objects, 1, t, &grant), 3 + 16);
    assert_int_equal(grant, t); /* the latest grant of them all */
    egm_object_index_stats_t s = stats();
    assert_int_equal(s.objects, 0);
    assert_int_equal(s.pending, 0);
    assert_int_equal(s.held_extents, 2);
    assert_int_equal(s.held_bytes, 2 * 64);
    assert_int_equal(s.used_bytes, 2 * 64);
    assert_int_equal(used(seg), 2 * 64);
    assert_int_equal(seg->replica_count, 0);
    check_index();
    assert_int_equal(egm__objects_release_held(fx.st.objects, t - 3 + TTL - 1), 0);
    assert_int_equal(egm__objects_release_held(fx.st.objects, t - 3 + TTL), 64); /* leased2 */
    assert_int_equal(stats().held_extents, 1);
    assert_int_equal(used(seg), 64);
    check_index();
    assert_int_equal(egm__objects_release_held(fx.st.objects, t + TTL - 1), 0);
    assert_int_equal(egm__objects_release_held(fx.st.objects, t + TTL), 64);
    s = stats();
    assert_int_equal(s.held_extents, 0);
    assert_int_equal(s.held_bytes, 0);
    assert_int_equal(used(seg), 0);

    /* Nothing ever leased: grant 0. */
    assert_int_equal(put("n", 10, 1, t), EGM_OK);
    assert_int_equal(egm__objects_remove_all(fx.st.objects, 1, t, &grant), 1);
    assert_int_equal(grant, 0);
    assert_int_equal(used(seg), 0);
}

/* A forced Remove of an object under a live read lease keeps its space
 * allocated (a reader holding the lease may still copy from it) until the
 * lease ends; a PutStart that needs that space gets NO_SPACE until then. */
static void test_force_remove_holds_leased_space(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    const uint64_t t = 50000, big = 600 * 1024; /* two do not fit in the segment */
    uint64_t grant;
    egm_object_view_t v;

    assert_int_equal(put("a", big, 1, 0), EGM_OK);
    assert_int_equal(get("a", t - 10, NULL), EGM_OK);
    assert_int_equal(get("a", t, &v), EGM_OK); /* the latest grant: lease until t + TTL */
    uint64_t a_offset = v.replicas[0].offset;
    /* Without force the lease refuses, and nothing is reported. */
    assert_int_equal(rm_grant("a", 0, t, &grant), EGM_ERR_HAS_LEASE);
    assert_int_equal(grant, 0);
    assert_int_equal(rm_grant("a", 1, t + 1, &grant), EGM_OK);
    assert_int_equal(grant, t);
    /* The key is gone at once; the space is not. */
    assert_int_equal(get("a", t + 1, NULL), EGM_ERR_NOT_FOUND);
    assert_int_equal(rm_grant("a", 1, t + 1, &grant), EGM_ERR_NOT_FOUND);
    assert_int_equal(grant, 0);
    assert_int_equal(used(seg), big);
    egm_object_index_stats_t s = stats();
    assert_int_equal(s.held_bytes, big);
    assert_int_equal(s.held_extents, 1);
    assert_int_equal(s.used_bytes, big);
    assert_int_equal(seg->replica_count, 0);
    check_index();

    /* Neither a PutStart (nothing to evict) nor the tick frees it early. */
    assert_int_equal(put_start("b", big, 1, t + 1, NULL), EGM_ERR_NO_SPACE);
    tick(t + TTL - 1);
    assert_int_equal(put_start("b", big, 1, t + TTL - 1, NULL), EGM_ERR_NO_SPACE);
    assert_int_equal(stats().held_bytes, big);
    /* The key itself is free: a small object goes elsewhere in the segment. */
    assert_int_equal(put_start("a", 100, 1, t + 1, &v), EGM_OK);
    assert_true(v.replicas[0].offset >= a_offset + big || v.replicas[0].offset + 128 <= a_offset);
    assert_int_equal(egm__objects_put_revoke(fx.st.objects, fx.writer, "a", 1), EGM_OK);
    check_index();

    /* At the lease's end a PutStart frees it itself, before any tick. */
    assert_int_equal(put_start("b", big, 1, t + TTL, &v), EGM_OK);
    assert_int_equal(v.replicas[0].offset, a_offset); /* the only range long enough */
    s = stats();
    assert_int_equal(s.held_bytes, 0);
    assert_int_equal(s.held_extents, 0);
    assert_int_equal(used(seg), big);
    check_index();
}

/* The master's tick frees held space once the lease ends. */
static void test_tick_releases_held_space(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    const uint64_t t = 7000;

    assert_int_equal(put("a", 1000, 1, 0), EGM_OK);
    assert_int_equal(exist("a", t), EGM_OK); /* ExistKey leases too */
    assert_int_equal(rm("a", 1, t), EGM_OK);
    tick(t + TTL - 1);
    assert_int_equal(used(seg), 1024);
    assert_int_equal(stats().held_extents, 1);
    check_index();
    tick(t + TTL);
    assert_int_equal(used(seg), 0);
    assert_int_equal(stats().held_extents, 0);
    assert_int_equal(stats().held_bytes, 0);
}

/* Without a live lease a forced Remove frees the space at once: never leased,
 * leased long ago, or still being written. */
static void test_unleased_force_remove_frees_at_once(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    const uint64_t big = 600 * 1024, t = 5000;
    uint64_t grant;

    assert_int_equal(put("never", big, 1, 0), EGM_OK);
    assert_int_equal(rm_grant("never", 1, 1, &grant), EGM_OK);
    assert_int_equal(grant, 0);
    assert_int_equal(used(seg), 0);
    assert_int_equal(stats().held_extents, 0);
    assert_int_equal(put("b", big, 1, 1), EGM_OK); /* the same space, at once */

    assert_int_equal(get("b", t, NULL), EGM_OK);
    assert_int_equal(rm_grant("b", 1, t + TTL, &grant), EGM_OK); /* lease just over */
    assert_int_equal(grant, t);                                  /* still reported */
    assert_int_equal(used(seg), 0);
    assert_int_equal(stats().held_extents, 0);

    assert_int_equal(put_start("p", big, 1, t + TTL, NULL), EGM_OK);
    assert_int_equal(rm_grant("p", 1, t + TTL, &grant), EGM_OK);
    assert_int_equal(grant, 0);
    assert_int_equal(used(seg), 0);
    assert_int_equal(put("c", big, 1, t + TTL), EGM_OK);
    check_index();
}

/* An unmounted segment takes its held space with it: the memory is gone, and
 * no reader is left to protect. The other replica's stays held. */
static void test_unmount_drops_held_space(void **state)
{
    (void)state;
    egm_id_t a = egm__id_random();
    egm_segment_t *sa = mount_as(a, 1 << 20, 0);
    egm_id_t sa_id = sa->desc.id;
    egm_segment_t *sb = mount(1 << 20);
    const uint64_t t = 3000;

    assert_int_equal(put("x", 1000, 2, 0), EGM_OK);
    assert_int_equal(put("y", 1000, 1, 0), EGM_OK);
    assert_int_equal(get("x", t, NULL), EGM_OK);
    assert_int_equal(rm("x", 1, t), EGM_OK);
    assert_int_equal(stats().held_extents, 2);
    assert_int_equal(stats().held_bytes, 2048);
    check_index();

    assert_int_equal(egm__liveness_unmount(fx.st.liveness, a, sa_id, t), EGM_OK);
    egm_object_index_stats_t s = stats();
    assert_int_equal(s.held_extents, 1);
    assert_int_equal(s.held_bytes, 1024);
    check_index(); /* no held extent left on the unmounted segment */
    assert_int_equal(used(sb), 1024 + (exist("y", t) == EGM_OK ? 1024 : 0));
    tick(t + TTL);
    assert_int_equal(stats().held_extents, 0);
    assert_int_equal(used(sb), exist("y", t + TTL) == EGM_OK ? 1024 : 0);
}

/* Remove and RemoveAll report when the removed object's latest lease was
 * granted: 0 when never leased, also when the lease has expired, never on
 * an error. */
static void test_remove_reports_last_grant(void **state)
{
    (void)state;
    mount(1 << 20);
    uint64_t grant;

    assert_int_equal(put("never", 10, 1, 0), EGM_OK);
    assert_int_equal(rm_grant("never", 1, 1, &grant), EGM_OK);
    assert_int_equal(grant, 0);

    assert_int_equal(put("k", 10, 1, 0), EGM_OK);
    assert_int_equal(get("k", 5000, NULL), EGM_OK);
    assert_int_equal(get("k", 6000, NULL), EGM_OK); /* the latest grant */
    assert_int_equal(rm_grant("k", 0, 6000, &grant), EGM_ERR_HAS_LEASE);
    assert_int_equal(grant, 0);
    assert_int_equal(rm_grant("k", 0, 6000 + TTL, &grant), EGM_OK); /* expired: still told */
    assert_int_equal(grant, 6000);
    assert_int_equal(rm_grant("k", 1, 6000 + TTL, &grant), EGM_ERR_NOT_FOUND);
    assert_int_equal(grant, 0);
    assert_int_equal(rm_grant("", 1, 0, &grant), EGM_ERR_INVALID_KEY);
    assert_int_equal(grant, 0);

    assert_int_equal(put("f", 10, 1, 0), EGM_OK);
    assert_int_equal(exist("f", 7000), EGM_OK); /* ExistKey grants too */
    assert_int_equal(rm_grant("f", 1, 7000, &grant), EGM_OK);
    assert_int_equal(grant, 7000);

    /* RemoveAll: the latest over what it removed, not over what it kept. */
    const uint64_t t = 8000 + TTL;
    assert_int_equal(put("a", 10, 1, 0), EGM_OK);
    assert_int_equal(put("b", 10, 1, 0), EGM_OK);
    assert_int_equal(put("c", 10, 1, 0), EGM_OK);
    assert_int_equal(put("kept", 10, 1, 0), EGM_OK);
    assert_int_equal(get("a", 100, NULL), EGM_OK);
    assert_int_equal(get("b", 8000, NULL), EGM_OK);
    assert_int_equal(get("kept", t, NULL), EGM_OK); /* live: kept without force */
    grant = 12345;
    assert_int_equal(egm__objects_remove_all(fx.st.objects, 0, t, &grant), 3);
    assert_int_equal(grant, 8000);
    assert_int_equal(exist("kept", t), EGM_OK);
    assert_int_equal(egm__objects_remove_all(fx.st.objects, 0, t, &grant), 0);
    assert_int_equal(grant, 0);
}

static int distinct_segments(const egm_object_view_t *obj)
{
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        for (uint32_t j = i + 1; j < obj->n_replicas; j++)
            if (obj->replicas[i].segment == obj->replicas[j].segment)
                return 0;
    return 1;
}

static void test_replicas_on_distinct_segments(void **state)
{
    (void)state;
    egm_segment_t *segs[3] = {mount_as(egm__id_random(), 1 << 20, 0),
                              mount_as(egm__id_random(), 1 << 20, 0),
                              mount_as(egm__id_random(), 1 << 20, 0)};
    int hits[3] = {0, 0, 0};
    char key[32];

    for (int i = 0; i < 60; i++) {
        egm_object_view_t view, *obj = &view;
        snprintf(key, sizeof(key), "two/%d", i);
        assert_int_equal(put_start(key, 1000, 2, 0, obj), EGM_OK);
        assert_int_equal(obj->n_replicas, 2);
        assert_true(distinct_segments(obj));
        for (uint32_t r = 0; r < 2; r++)
            for (int s = 0; s < 3; s++)
                hits[s] += obj->replicas[r].segment == segs[s];
    }
    /* Random placement uses every segment (120 draws over 3 segments). */
    for (int s = 0; s < 3; s++) {
        assert_true(hits[s] > 0);
        assert_int_equal(segs[s]->replica_count, (uint64_t)hits[s]);
    }
    egm_object_view_t view, *obj = &view;
    assert_int_equal(put_start("three", 1000, 3, 0, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 3);
    assert_true(distinct_segments(obj));
    /* Best effort: more replicas asked than segments exist. */
    assert_int_equal(put_start("many", 1000, 16, 0, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 3);
    assert_true(distinct_segments(obj));
}

static void test_best_effort_and_no_space(void **state)
{
    (void)state;
    egm_object_view_t view, *obj = &view;

    /* No segment at all. */
    assert_int_equal(put_start("x", 10, 1, 0, NULL), EGM_ERR_NO_SPACE);
    assert_null(egm__objects_find(fx.st.objects, "x", 1));

    egm_segment_t *small = mount(4096);
    assert_int_equal(put_start("one", 100, 2, 0, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 1); /* one segment: one replica */
    assert_int_equal(put_start("big", 8192, 1, 0, NULL), EGM_ERR_NO_SPACE);
    /* Fill it: 4096 - 128 = 3968 bytes left, taken in 62 blocks of 64. */
    char key[32];
    for (int i = 0; i < 62; i++) {
        snprintf(key, sizeof(key), "fill/%d", i);
        assert_int_equal(put_start(key, 64, 1, 0, NULL), EGM_OK);
    }
    assert_int_equal(put_start("full", 1, 1, 0, NULL), EGM_ERR_NO_SPACE);
    assert_null(egm__objects_find(fx.st.objects, "full", 4));

    /* A second segment with room takes the object; replica_num 2 places one. */
    egm_segment_t *roomy = mount(1 << 20);
    assert_int_equal(put_start("two", 100, 2, 0, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 1);
    assert_ptr_equal(obj->replicas[0].segment, roomy);
    assert_int_equal(small->replica_count, 63);
}

static void test_client_expiry_drops_replicas(void **state)
{
    (void)state;
    egm_id_t a = egm__id_random(), b = egm__id_random();
    egm_object_view_t view, *obj = &view;

    assert_int_equal(egm__liveness_ping(fx.st.liveness, a, 0), EGM_OK);
    egm_segment_t *sa = mount_as(a, 1 << 20, 0);
    egm_id_t sa_id = sa->desc.id;
    /* Placed while a's segment is the only one: */
    assert_int_equal(put("only_a", 100, 1, 0), EGM_OK);
    assert_int_equal(put_start("pend_a", 100, 1, 0, NULL), EGM_OK);
    egm_segment_t *sb = mount_as(b, 1 << 20, 0); /* mounting registers b */
    assert_int_equal(egm__liveness_client_count(fx.st.liveness), 2);
    assert_int_equal(put("both", 100, 2, 0), EGM_OK); /* one replica on each */
    assert_int_equal(sa->replica_count, 3);

    /* b keeps pinging; a falls silent. */
    assert_int_equal(egm__liveness_ping(fx.st.liveness, b, 5000), EGM_OK);
    assert_int_equal(egm__liveness_expire(fx.st.liveness, CLIENT_TTL - 1, CLIENT_TTL), 0);
    assert_non_null(egm__segment_table_find(fx.st.segments, sa_id));
    egm__master_state_tick(&fx.st, CLIENT_TTL);
    assert_null(egm__segment_table_find(fx.st.segments, sa_id));
    assert_false(egm__liveness_is_known(fx.st.liveness, a));
    assert_true(egm__liveness_is_known(fx.st.liveness, b));
    assert_int_equal(egm__liveness_client_count(fx.st.liveness), 1);

    assert_int_equal(get("only_a", CLIENT_TTL, NULL), EGM_ERR_NOT_FOUND);
    assert_null(egm__objects_find(fx.st.objects, "pend_a", 6));
    assert_int_equal(get("both", CLIENT_TTL, obj), EGM_OK);
    assert_int_equal(obj->n_replicas, 1); /* the live ones */
    assert_ptr_equal(obj->replicas[0].segment, sb);
    assert_int_equal(sb->replica_count, 1);

    /* Clients learn the retired id. */
    egm_id_t *ids;
    size_t n;
    int reset;
    assert_int_equal(egm__segment_table_view(fx.st.segments), 1);
    assert_int_equal(egm__segment_table_retired_since(fx.st.segments, 0, &ids, &n, &reset), EGM_OK);
    assert_int_equal(n, 1);
    assert_int_equal(reset, 0);
    assert_true(egm__id_equal(ids[0], sa_id));
    egm_free(ids);

    /* Removing the survivor frees its space on b, once the lease the Get
     * above granted ends. */
    assert_int_equal(rm("both", 1, CLIENT_TTL), EGM_OK);
    assert_int_equal(used(sb), 128);
    assert_int_equal(egm__liveness_ping(fx.st.liveness, b, CLIENT_TTL + TTL), EGM_OK);
    egm__master_state_tick(&fx.st, CLIENT_TTL + TTL);
    assert_non_null(egm__segment_table_find(fx.st.segments, sb->desc.id));
    assert_int_equal(used(sb), 0);
}

static void test_unmount(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_id_t id = seg->desc.id;

    assert_int_equal(put("u", 10, 1, 0), EGM_OK);
    assert_int_equal(egm__liveness_unmount(fx.st.liveness, fx.provider, egm__id_random(), 0),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(egm__liveness_unmount(fx.st.liveness, fx.other, id, 0), EGM_ERR_PERMISSION);
    assert_int_equal(egm__liveness_unmount(fx.st.liveness, fx.provider, id, 0), EGM_OK);
    assert_int_equal(exist("u", 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__liveness_unmount(fx.st.liveness, fx.provider, id, 0),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    /* Ids are never reused. */
    egm_segment_params_t p = {.id = id, .size = 4096, .name = "again"};
    assert_int_equal(egm__liveness_mount(fx.st.liveness, fx.provider, &p, 0),
                     EGM_ERR_SEGMENT_EXISTS);
}

static void expect_mount_error(const egm_segment_params_t *p, egm_status_t status,
                               const char *field)
{
    assert_int_equal(egm__liveness_mount(fx.st.liveness, fx.provider, p, 0), status);
    if (field != NULL && strstr(egm_last_error(), field) == NULL)
        fail_msg("error \"%s\" does not name %s", egm_last_error(), field);
}

static void test_mount_validation(void **state)
{
    (void)state;
    static char big[512];
    uint8_t fabric[65] = {0};
    memset(big, 'a', sizeof(big) - 1);
    const egm_segment_params_t good = {.id = egm__id_random(), .size = 4096, .name = "n"};
    egm_segment_params_t p;

    p = good, p.id = (egm_id_t){0, 0};
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.id");
    p = good, p.size = 0;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.size");
    /* sizes the master's sums could wrap with (2^64 - 1 wrapped the capacity) */
    p = good, p.size = UINT64_MAX;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.size");
    p = good, p.size = EGM_SEGMENT_SIZE_MAX + 1;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.size");
    p = good, p.name = "";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.name");
    p = good, p.name = NULL;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.name");
    p = good, p.name = big;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.name");
    p = good, p.host_id = big;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.host_id");
    p = good, p.tcp_endpoint = big;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.tcp_endpoint");
    p = good, p.shm_socket = big;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.shm_socket");
    p = good, p.handle_kind = 4;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.handle_kind");
    p = good, p.handle_kind = -1;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.handle_kind");
    p = good, p.fabric_handle = fabric, p.fabric_handle_len = sizeof(fabric);
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.fabric_handle");
    /* What clients would refuse in a reply (fuzz/regressions/segment_desc,
     * master_rpc): control bytes, a socket name that is neither "@name" nor a
     * path, a fabric handle on another kind or not whole on HANDLE_FABRIC. */
    p = good, p.name = "tab\there";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.name");
    p = good, p.host_id = "del\x7f";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.host_id");
    p = good, p.tcp_endpoint = "127.0.0.1:1\n";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.tcp_endpoint");
    p = good, p.shm_socket = "@egm\x01";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.shm_socket");
    p = good, p.shm_socket = "relative";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.shm_socket");
    p = good, p.shm_socket = "@";
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.shm_socket");
    p = good, p.fabric_handle = fabric, p.fabric_handle_len = 64;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.fabric_handle");
    p = good, p.fabric_handle = fabric, p.fabric_handle_len = 63, p.handle_kind = 3;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.fabric_handle");
    p = good, p.handle_kind = 3;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.fabric_handle");
    p = good, p.owner = fx.other;
    expect_mount_error(&p, EGM_ERR_INVALID_ARG, "segment.owner");
    assert_int_equal(egm__liveness_mount(fx.st.liveness, (egm_id_t){0, 0}, &good, 0),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__segment_table_count(fx.st.segments), 0);

    p = good, p.fabric_handle = fabric, p.fabric_handle_len = 64, p.handle_kind = 3;
    p.shm_socket = "@egmstore-1-2", p.tcp_endpoint = "host:7000";
    assert_int_equal(egm__liveness_mount(fx.st.liveness, fx.provider, &p, 0), EGM_OK);
    expect_mount_error(&good, EGM_ERR_SEGMENT_EXISTS, NULL);
    egm_segment_t *seg = egm__segment_table_find(fx.st.segments, good.id);
    assert_non_null(seg);
    assert_true(egm__id_equal(seg->desc.owner, fx.provider));
    assert_int_equal(seg->desc.fabric_handle_len, 64);
    assert_string_equal(seg->desc.name, "n");
    assert_string_equal(seg->desc.tcp_endpoint, "host:7000");
    assert_string_equal(seg->desc.shm_socket, "@egmstore-1-2");
}

static void test_view_and_retired_history(void **state)
{
    (void)state;
    egm_segment_table_t *t;
    egm_id_t mounted[6];
    egm_id_t *ids;
    size_t n;
    int reset;

    assert_int_equal(egm__segment_table_create(4, &t), EGM_OK);
    assert_int_equal(egm__segment_table_view(t), 0);
    assert_int_equal(egm__segment_table_retired_since(t, 0, &ids, &n, &reset), EGM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(reset, 0);
    for (int i = 0; i < 6; i++) {
        egm_segment_t *seg;
        egm_segment_params_t p = {
            .id = egm__id_random(), .owner = fx.provider, .size = 4096, .name = "v"};
        assert_int_equal(egm__segment_table_mount(t, &p, &seg), EGM_OK);
        mounted[i] = p.id;
        egm__segment_table_remove(t, seg);
        assert_int_equal(egm__segment_table_view(t), (uint64_t)i + 1);
    }
    /* Up to date: nothing. */
    assert_int_equal(egm__segment_table_retired_since(t, 6, &ids, &n, &reset), EGM_OK);
    assert_int_equal(n, 0);
    assert_int_equal(reset, 0);
    /* The last four are remembered, oldest first. */
    assert_int_equal(egm__segment_table_retired_since(t, 2, &ids, &n, &reset), EGM_OK);
    assert_int_equal(n, 4);
    assert_int_equal(reset, 0);
    for (size_t i = 0; i < 4; i++)
        assert_true(egm__id_equal(ids[i], mounted[2 + i]));
    egm_free(ids);
    assert_int_equal(egm__segment_table_retired_since(t, 5, &ids, &n, &reset), EGM_OK);
    assert_int_equal(n, 1);
    assert_true(egm__id_equal(ids[0], mounted[5]));
    egm_free(ids);
    /* Older than the history, or from the future (a restarted master): reset. */
    assert_int_equal(egm__segment_table_retired_since(t, 1, &ids, &n, &reset), EGM_OK);
    assert_int_equal(reset, 1);
    assert_int_equal(n, 0);
    assert_null(ids);
    assert_int_equal(egm__segment_table_retired_since(t, 7, &ids, &n, &reset), EGM_OK);
    assert_int_equal(reset, 1);
    egm__segment_table_destroy(t);
}

static void test_stale_pending_discarded(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    const uint64_t t0 = 1000, timeout = EGM_MASTER_PENDING_TIMEOUT_MS;

    assert_int_equal(put_start("old", 100, 1, t0, NULL), EGM_OK);
    assert_int_equal(put_start("newer", 100, 1, t0 + 10, NULL), EGM_OK);
    assert_int_equal(put("done", 100, 1, t0), EGM_OK);
    assert_int_equal(egm__objects_sweep_pending(fx.st.objects, t0 + timeout - 1), 0);
    assert_int_equal(egm__objects_sweep_pending(fx.st.objects, t0 + timeout), 1);
    assert_null(egm__objects_find(fx.st.objects, "old", 3));
    assert_non_null(egm__objects_find(fx.st.objects, "newer", 5));
    /* The provider keeps pinging, so the tick only sweeps. */
    assert_int_equal(egm__liveness_ping(fx.st.liveness, fx.provider, t0 + 10 + timeout), EGM_OK);
    egm__master_state_tick(&fx.st, t0 + 10 + timeout);
    assert_null(egm__objects_find(fx.st.objects, "newer", 5));
    assert_int_equal(exist("done", t0 + 10 + timeout), EGM_OK); /* committed ones stay */
    assert_int_equal(used(seg), 128);
    /* The key is free again; PutEnd of the discarded put finds nothing. */
    assert_int_equal(egm__objects_put_end(fx.st.objects, fx.writer, "old", 3, 0),
                     EGM_ERR_NOT_FOUND);

    /* A stale PENDING key is taken over by a new PutStart even before a sweep. */
    assert_int_equal(put_start("take", 100, 1, t0, NULL), EGM_OK);
    assert_int_equal(
        egm__objects_put_start(fx.st.objects, fx.other, "take", 4, 200, 1, t0 + timeout - 1, NULL),
        EGM_ERR_EXISTS);
    egm_object_view_t view, *obj = &view;
    assert_int_equal(
        egm__objects_put_start(fx.st.objects, fx.other, "take", 4, 200, 1, t0 + timeout, obj),
        EGM_OK);
    assert_true(egm__id_equal(obj->writer, fx.other));
    assert_int_equal(obj->size, 200);
    assert_int_equal(used(seg), 128 + 256);
}

/* What egm__objects_batch answered, per key. */
#define BATCH_KEYS 200
typedef struct {
    egm_status_t status[BATCH_KEYS];
    uint32_t n_replicas[BATCH_KEYS];
    uint64_t size[BATCH_KEYS];
    int answered[BATCH_KEYS];
} batch_answers_t;

static egm_status_t record_answer(void *arg, size_t i, egm_status_t status,
                                  const egm_object_view_t *view)
{
    batch_answers_t *a = arg;
    assert_true(i < BATCH_KEYS);
    assert_false(a->answered[i]); /* each key once */
    a->answered[i] = 1;
    a->status[i] = status;
    a->n_replicas[i] = view != NULL ? view->n_replicas : 0;
    a->size[i] = view != NULL ? view->size : 0;
    return EGM_OK;
}

static void run_batch(egm_objects_op_t op, const char *const *keys, size_t n, uint64_t now,
                      batch_answers_t *a)
{
    size_t lens[BATCH_KEYS];
    uint64_t sizes[BATCH_KEYS];
    egm_put_config_t config = {.replica_num = 2};
    for (size_t i = 0; i < n; i++) {
        lens[i] = keys[i] != NULL ? strlen(keys[i]) : 0;
        sizes[i] = 4096 * (1 + i % 3);
    }
    memset(a, 0, sizeof(*a));
    egm_objects_batch_t b = {.op = op,
                             .client = fx.writer,
                             .sizes = sizes,
                             .config = &config,
                             .now_ms = now,
                             .n = n,
                             .keys = keys,
                             .key_lens = lens,
                             .done = record_answer,
                             .arg = a};
    assert_int_equal(egm__objects_batch(fx.st.objects, &b), EGM_OK);
    for (size_t i = 0; i < n; i++)
        assert_true(a->answered[i]);
}

/* A batch answers each key as the one-key call would, in any shard order:
 * keys given twice, an empty key, absent keys, and a Remove that finds the
 * key it removed a moment ago gone. */
static void test_batch_answers_per_key(void **state)
{
    (void)state;
    mount(64 << 20);
    mount_as(fx.other, 64 << 20, 0);
    static char names[BATCH_KEYS][32];
    const char *keys[BATCH_KEYS];
    batch_answers_t a;
    size_t n = 150;
    for (size_t i = 0; i < n; i++) {
        snprintf(names[i], sizeof(names[i]), "batch/%zu", i);
        keys[i] = names[i];
    }
    keys[7] = keys[3]; /* twice */
    keys[11] = "";     /* invalid */
    run_batch(EGM_OBJECTS_PUT_START, keys, n, 1, &a);
    for (size_t i = 0; i < n; i++) {
        egm_status_t want = i == 11 ? EGM_ERR_INVALID_KEY : i == 7 ? EGM_ERR_EXISTS : EGM_OK;
        assert_int_equal(a.status[i], want);
        if (want == EGM_OK) {
            assert_int_equal(a.n_replicas[i], 2);
            assert_int_equal(a.size[i], 4096 * (1 + i % 3));
        }
    }
    /* Not yet committed: GetReplicaList answers NOT_READY, ExistKey NOT_FOUND. */
    run_batch(EGM_OBJECTS_GET_REPLICAS, keys, 20, 2, &a);
    assert_int_equal(a.status[0], EGM_ERR_NOT_READY);
    run_batch(EGM_OBJECTS_EXIST, keys, 20, 2, &a);
    assert_int_equal(a.status[0], EGM_ERR_NOT_FOUND);

    run_batch(EGM_OBJECTS_PUT_END, keys, n, 3, &a);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(a.status[i], i == 11 ? EGM_ERR_INVALID_KEY : EGM_OK);
    keys[12] = "batch/absent";
    run_batch(EGM_OBJECTS_GET_REPLICAS, keys, n, 4, &a);
    for (size_t i = 0; i < n; i++) {
        egm_status_t want = i == 11 ? EGM_ERR_INVALID_KEY : i == 12 ? EGM_ERR_NOT_FOUND : EGM_OK;
        assert_int_equal(a.status[i], want);
        if (want == EGM_OK) {
            assert_int_equal(a.n_replicas[i], 2);
            size_t j = i == 7 ? 3 : i;
            assert_int_equal(a.size[i], 4096 * (1 + j % 3));
        }
    }
    /* The leases granted hold off Remove, as one key at a time. */
    run_batch(EGM_OBJECTS_REMOVE, keys, 20, 5, &a);
    assert_int_equal(a.status[0], EGM_ERR_HAS_LEASE);
    assert_int_equal(egm__objects_check(fx.st.objects), EGM_OK);

    /* After the lease: removed once; the second time the key is gone. */
    run_batch(EGM_OBJECTS_REMOVE, keys, n, 5 + TTL, &a);
    for (size_t i = 0; i < n; i++) {
        egm_status_t want = i == 11   ? EGM_ERR_INVALID_KEY
                            : i == 12 ? EGM_ERR_NOT_FOUND
                            : i == 7  ? EGM_ERR_NOT_FOUND /* key 3, removed just before */
                                      : EGM_OK;
        assert_int_equal(a.status[i], want);
    }
    egm_object_index_stats_t st;
    egm__objects_stats(fx.st.objects, &st);
    assert_int_equal(st.objects, 1); /* batch/12, whose place "batch/absent" took */
}

/* A batch Remove reports the latest lease grant over the keys it removed:
 * not a key it refused (under a lease, without force), not an absent one. */
/* 80 keys of one shard with one home slot in a table of 128 (and of 64
 * before it grows): a run of 80 slots, the last 17 too far from home for a
 * slot to say how far (those are found by hashing their key again). Every key
 * is found, and still after removals in an order that shifts far slots back
 * across the limit; then the table grows past 96 keys and rehashes them. */
#define COLLIDING 80
static void test_colliding_keys(void **state)
{
    (void)state;
    static char keys[COLLIDING][24];
    const uint64_t want = egm__objects_key_hash("c0", 2);
    int n = 0;

    mount(64 << 20);
    for (unsigned i = 0; n < COLLIDING; i++) {
        char key[24];
        snprintf(key, sizeof(key), "c%u", i);
        uint64_t h = egm__objects_key_hash(key, strlen(key));
        if ((h & 127) == (want & 127) && h >> 60 == want >> 60)
            memcpy(keys[n++], key, sizeof(key));
    }
    for (int i = 0; i < COLLIDING; i++)
        assert_int_equal(put(keys[i], 64, 1, 1), EGM_OK);
    check_index(); /* each slot's distance field against where its key's home is */
    for (int i = 0; i < COLLIDING; i++)
        assert_int_equal(exist(keys[i], 2), EGM_OK); /* leased until 2 + TTL */
    /* From the front of the run: every later slot moves back one. */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(rm(keys[i], 0, 2 + TTL), EGM_OK);
        check_index();
    }
    /* Every third of the rest, from the back. */
    for (int i = COLLIDING - 1; i >= 10; i -= 3) {
        assert_int_equal(rm(keys[i], 0, 2 + TTL), EGM_OK);
        check_index();
    }
    for (int i = 0; i < COLLIDING; i++) {
        int gone = i < 10 || (COLLIDING - 1 - i) % 3 == 0;
        assert_int_equal(exist(keys[i], 3 + TTL), gone ? EGM_ERR_NOT_FOUND : EGM_OK);
    }
    /* Back in, and 60 keys of the same shard more: the table doubles. */
    for (int i = 0; i < COLLIDING; i++) {
        int gone = i < 10 || (COLLIDING - 1 - i) % 3 == 0;
        if (gone)
            assert_int_equal(put(keys[i], 64, 1, 4 + TTL), EGM_OK);
    }
    n = 0;
    for (unsigned i = 0; n < 60; i++) {
        char key[24];
        snprintf(key, sizeof(key), "d%u", i);
        if (egm__objects_key_hash(key, strlen(key)) >> 60 == want >> 60) {
            assert_int_equal(put(key, 64, 1, 5 + TTL), EGM_OK);
            n++;
        }
    }
    check_index();
    for (int i = 0; i < COLLIDING; i++)
        assert_int_equal(exist(keys[i], 6 + TTL), EGM_OK);
    assert_int_equal(stats().objects, COLLIDING + 60);
}

static void test_batch_remove_reports_last_grant(void **state)
{
    (void)state;
    mount(1 << 20);
    const char *keys[4] = {"g/a", "g/b", "g/kept", "g/absent"};
    size_t lens[4];
    batch_answers_t a;
    uint64_t grant = 12345;
    const uint64_t t = 1000 + TTL;

    for (size_t i = 0; i < 4; i++)
        lens[i] = strlen(keys[i]);
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(put(keys[i], 10, 1, 0), EGM_OK);
    assert_int_equal(get("g/a", 500, NULL), EGM_OK);
    assert_int_equal(get("g/b", 1000, NULL), EGM_OK);
    assert_int_equal(get("g/kept", t, NULL), EGM_OK); /* later, and live: refused */
    memset(&a, 0, sizeof(a));
    egm_objects_batch_t b = {.op = EGM_OBJECTS_REMOVE,
                             .now_ms = t,
                             .n = 4,
                             .keys = keys,
                             .key_lens = lens,
                             .done = record_answer,
                             .arg = &a,
                             .last_grant_ms_p = &grant};
    assert_int_equal(egm__objects_batch(fx.st.objects, &b), EGM_OK);
    assert_int_equal(a.status[0], EGM_OK);
    assert_int_equal(a.status[1], EGM_OK);
    assert_int_equal(a.status[2], EGM_ERR_HAS_LEASE);
    assert_int_equal(a.status[3], EGM_ERR_NOT_FOUND);
    assert_int_equal(grant, 1000);
    /* Nothing removed: 0. */
    memset(&a, 0, sizeof(a));
    b.n = 1;
    b.keys = keys + 3;
    b.key_lens = lens + 3;
    assert_int_equal(egm__objects_batch(fx.st.objects, &b), EGM_OK);
    assert_int_equal(grant, 0);

    /* Forced (the Remove RPC's path), the leased one goes too, its space
     * held until its lease ends. */
    memset(&a, 0, sizeof(a));
    b.force = 1;
    b.keys = keys + 2;
    b.key_lens = lens + 2;
    assert_int_equal(egm__objects_batch(fx.st.objects, &b), EGM_OK);
    assert_int_equal(a.status[0], EGM_OK);
    assert_int_equal(grant, t);
    assert_int_equal(stats().held_extents, 1);
    assert_int_equal(stats().held_bytes, 64);
    check_index();
    assert_int_equal(egm__objects_release_held(fx.st.objects, t + TTL - 1), 0);
    assert_int_equal(egm__objects_release_held(fx.st.objects, t + TTL), 64);
}

/* ---- the index against a model -------------------------------------------------- */

/* Random puts, exists (each a lease grant), removes (forced or not), batch
 * exists and removes, eviction and held-space release, and RemoveAll (now
 * and then through its in-scan deletion path, its list's allocation made to
 * fail) on 400 keys of one shard whose home slots are near the end of the
 * table (probe runs wrap round it), the clock going back and forth by up to
 * `jitter` ms and now and then jumping `bigjump` ms ahead; every answer is
 * checked against a model of which keys exist and until when they are
 * leased, and egm__objects_check runs every 7 steps (the lease wheel against
 * the objects' lease ends, each slot's distance and hash bits). */
#define MODEL_KEYS 400
static uint64_t model_rng = 88172645463325252ull;
static uint64_t model_rand(void)
{
    model_rng ^= model_rng << 13;
    model_rng ^= model_rng >> 7;
    model_rng ^= model_rng << 17;
    return model_rng;
}

static void reinit_ttl(uint64_t ttl)
{
    egm__master_state_cleanup(&fx.st);
    egm_master_state_params_t sp = {.client_ttl_ms = CLIENT_TTL};
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = ttl;
    assert_int_equal(egm__master_state_init(&fx.st, &sp), EGM_OK);
}

static void model_run(uint64_t ttl, uint64_t jitter, uint64_t bigjump, int iters, uint64_t seed)
{
    static char keys[MODEL_KEYS][24];
    static int present[MODEL_KEYS];
    static uint64_t expiry[MODEL_KEYS];
    const char *kp[BATCH_KEYS];
    int n = 0;
    model_rng = seed;
    reinit_ttl(ttl);
    mount(256 << 20);
    /* all in one shard, homes at the end of every table size up to 1024: chains wrap */
    uint64_t want = egm__objects_key_hash("z0", 2);
    for (unsigned i = 0; n < MODEL_KEYS; i++) {
        char key[24];
        snprintf(key, sizeof(key), "z%u", i);
        uint64_t h = egm__objects_key_hash(key, strlen(key));
        if (h >> 60 == want >> 60 && (h & 1023) >= 1018)
            memcpy(keys[n++], key, sizeof(key));
    }
    memset(present, 0, sizeof(present));
    memset(expiry, 0, sizeof(expiry));
    uint64_t base = 1000000;
    for (int it = 0; it < iters; it++) {
        base += model_rand() % 50;
        if (bigjump && model_rand() % 500 == 0)
            base += bigjump;
        uint64_t now = base + model_rand() % (jitter + 1) - jitter / 2; /* not monotonic */
        int k = (int)(model_rand() % MODEL_KEYS);
        unsigned op = (unsigned)(model_rand() % 100);
        egm_status_t s;
        if (op < 35) {
            s = put(keys[k], 64, 1, now);
            assert_int_equal(s, present[k] ? EGM_ERR_EXISTS : EGM_OK);
            present[k] = 1;
        } else if (op < 65) {
            s = exist(keys[k], now);
            assert_int_equal(s, present[k] ? EGM_OK : EGM_ERR_NOT_FOUND);
            if (present[k] && now + ttl > expiry[k])
                expiry[k] = now + ttl;
        } else if (op < 85) {
            int force = model_rand() % 2;
            s = rm(keys[k], force, now);
            if (!present[k])
                assert_int_equal(s, EGM_ERR_NOT_FOUND);
            else if (!force && now < expiry[k])
                assert_int_equal(s, EGM_ERR_HAS_LEASE);
            else {
                assert_int_equal(s, EGM_OK);
                present[k] = 0;
                expiry[k] = 0;
            }
        } else if (op < 92) {
            /* batch exist or remove over random keys */
            batch_answers_t a;
            size_t m = 1 + model_rand() % 40;
            int idx[BATCH_KEYS];
            for (size_t j = 0; j < m; j++) {
                idx[j] = (int)(model_rand() % MODEL_KEYS);
                kp[j] = keys[idx[j]];
            }
            int rmop = model_rand() % 2;
            run_batch(rmop ? EGM_OBJECTS_REMOVE : EGM_OBJECTS_EXIST, kp, m, now, &a);
            for (size_t j = 0; j < m; j++) {
                int q = idx[j];
                if (!rmop) {
                    assert_int_equal(a.status[j], present[q] ? EGM_OK : EGM_ERR_NOT_FOUND);
                    if (present[q] && now + ttl > expiry[q])
                        expiry[q] = now + ttl;
                } else if (!present[q]) {
                    assert_int_equal(a.status[j], EGM_ERR_NOT_FOUND);
                } else if (now < expiry[q]) {
                    assert_int_equal(a.status[j], EGM_ERR_HAS_LEASE);
                } else {
                    assert_int_equal(a.status[j], EGM_OK);
                    present[q] = 0;
                    expiry[q] = 0;
                }
            }
        } else if (op < 95) {
            egm__objects_evict_if_needed(fx.st.objects, now);
            egm__objects_release_held(fx.st.objects, now);
        } else if (op < 97) {
            int force = model_rand() % 4 == 0;
            if (model_rand() % 2)
                egm__alloc_fail_site("master.remove_all", 1); /* the in-scan deletion path */
            egm__objects_remove_all(fx.st.objects, force, now, NULL);
            egm__alloc_fail_site("master.remove_all", 0);
            for (int q = 0; q < MODEL_KEYS; q++)
                if (present[q] && (force || now >= expiry[q])) {
                    present[q] = 0;
                    expiry[q] = 0;
                }
        }
        if (it % 7 == 0)
            check_index();
        /* every key agrees with the model (exist grants: update expiry) */
        if (it % 97 == 0)
            for (int q = 0; q < MODEL_KEYS; q++) {
                s = exist(keys[q], now);
                if (s != (present[q] ? EGM_OK : EGM_ERR_NOT_FOUND))
                    fail_msg("it %d key %s: exist %d, model %d", it, keys[q], s, present[q]);
                if (present[q] && now + ttl > expiry[q])
                    expiry[q] = now + ttl;
            }
    }
    check_index();
    egm__objects_remove_all(fx.st.objects, 1, base + 10 * ttl + 100000, NULL);
    egm__objects_release_held(fx.st.objects, UINT64_MAX / 2);
}

/* Lease TTLs of 10 s (the default), 1 ms, 1025 ms (a grain of 2 ms), 24 h,
 * and more seeds between them; clocks out of order by up to 30 s. */
static void test_model_leases_and_slots(void **state)
{
    (void)state;
    model_run(10000, 200, 0, 20000, 1);
    model_run(1, 5, 0, 10000, 3);
    model_run(1025, 3000, 5000, 10000, 4);
    model_run(86400000, 100000, 200000000, 10000, 5);
    model_run(10000, 30000, 30000000, 10000, 6);
    for (uint64_t seed = 10; seed < 16; seed++)
        model_run(seed % 3 ? 1000 + seed : 86400000, seed * 997, seed % 2 ? 0 : 3000000 * seed,
                  5000, seed);
}

/* A PutEnd batch naming one key twice, every replica of which is on a
 * provider presumed gone: the first answer deletes the object (not
 * committed), the second finds nothing (it read the freed object). */
static void test_put_end_twice_all_unreachable(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(64 << 20);
    assert_int_equal(put_start("u1", 4096, 1, 0, NULL), EGM_OK);
    atomic_store(&seg->unreachable, 1);
    const char *keys[] = {"u1", "u1"};
    batch_answers_t a;
    run_batch(EGM_OBJECTS_PUT_END, keys, 2, 0, &a);
    atomic_store(&seg->unreachable, 0);
    assert_int_equal(a.status[0], EGM_ERR_NOT_FOUND);
    assert_int_equal(a.status[1], EGM_ERR_NOT_FOUND);
    assert_int_equal(exist("u1", 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(used(seg), 0);
    check_index();
}

/* A shard's key table that fills grows in steps (master/key_table.h): the put
 * that fills it leaves it growing, with objects still in the old table, and
 * every lookup, batch lookup, removal and put meanwhile sees every key (the
 * old table's and the new one's) until the objects have all moved over, a few
 * slots per put. Without the steps, the first growth is over within that put. */
#define GROW_KEYS 300

/* Every key of keys[0..n) answers as present[] says, alone and in batches. */
static void expect_keys(char keys[][24], const int *present, int n)
{
    const char *batch[BATCH_KEYS];
    batch_answers_t a;
    for (int k = 0; k < n; k++)
        assert_int_equal(exist(keys[k], 0), present[k] ? EGM_OK : EGM_ERR_NOT_FOUND);
    for (int k0 = 0; k0 < n; k0 += BATCH_KEYS) {
        size_t m = (size_t)(n - k0) < BATCH_KEYS ? (size_t)(n - k0) : BATCH_KEYS;
        for (size_t j = 0; j < m; j++)
            batch[j] = keys[k0 + j];
        run_batch(EGM_OBJECTS_EXIST, batch, m, 0, &a);
        for (size_t j = 0; j < m; j++)
            assert_int_equal(a.status[j], present[k0 + j] ? EGM_OK : EGM_ERR_NOT_FOUND);
    }
}
static void test_table_grows_in_steps(void **state)
{
    (void)state;
    static char keys[GROW_KEYS][24];
    static int present[GROW_KEYS];
    mount(64 << 20);
    uint64_t want = egm__objects_key_hash("g0", 2) >> 60; /* all in one shard */
    int n = 0;
    for (unsigned i = 0; n < GROW_KEYS; i++) {
        snprintf(keys[n], sizeof(keys[n]), "g%u", i);
        if (egm__objects_key_hash(keys[n], strlen(keys[n])) >> 60 == want)
            n++;
    }
    int next = 0, growths = 0;
    while (next < GROW_KEYS) {
        /* Puts until a put leaves the table growing. */
        while (next < GROW_KEYS && stats().growing_tables == 0) {
            assert_int_equal(put(keys[next], 64, 1, 0), EGM_OK);
            present[next++] = 1;
        }
        if (next == GROW_KEYS)
            break;
        growths++;
        check_index();
        /* While it grows: a removal (every third key put before) and a put
         * in turn, each followed by a full check and every key looked up alone
         * and in batches, until the old table is empty. */
        expect_keys(keys, present, next);
        int ops_while_growing = 0;
        for (int k = 0; next < GROW_KEYS && stats().growing_tables > 0; k += 3) {
            if (k < next && present[k]) {
                assert_int_equal(rm(keys[k], 1, 0), EGM_OK);
                present[k] = 0;
                ops_while_growing++;
                check_index();
                expect_keys(keys, present, next);
            }
            if (stats().growing_tables == 0)
                break;
            assert_int_equal(put(keys[next], 64, 1, 0), EGM_OK);
            present[next++] = 1;
            ops_while_growing++;
            check_index();
            expect_keys(keys, present, next);
        }
        /* The move took several calls: each moves only a step of slots. */
        if (next < GROW_KEYS)
            assert_true(ops_while_growing > 1);
    }
    assert_true(growths >= 2); /* 64 -> 128 -> 256 slots at least */
    expect_keys(keys, present, GROW_KEYS);
    check_index();
}

/* The objects "PREFIXi" for i < LOST_N, of LOST_SIZE bytes each, put at time 0. */
#define LOST_N 1200
#define LOST_SIZE 4096
static void put_numbered(const char *prefix)
{
    char key[32];
    for (int i = 0; i < LOST_N; i++) {
        snprintf(key, sizeof(key), "%s%d", prefix, i);
        assert_int_equal(put(key, LOST_SIZE, 1, 0), EGM_OK);
    }
}

/* Runs `release` (which frees space and answers the bytes it says it freed)
 * while the allocator's records cannot grow: some frees lose their range,
 * and what it says it freed must be what seg has free again. Returns that. */
static uint64_t check_freed_without_memory(egm_segment_t *seg, uint64_t (*release)(void))
{
    egm__alloc_fail_site("master.allocator_spans", UINT64_MAX);
    uint64_t before = used(seg);
    uint64_t freed = release();
    uint64_t after = used(seg);
    egm__alloc_fail_site("master.allocator_spans", 0);
    egm_allocator_stats_t st;
    egm__allocator_stats(seg->allocator, &st);
    check_index();
    assert_true(st.lost > 0); /* the case arose */
    assert_int_equal(freed, before - after);
    return freed;
}

static uint64_t evict_a_quarter(void)
{
    return egm__objects_evict(fx.st.objects, (uint64_t)(LOST_N / 4) * LOST_SIZE, 1000000000);
}

static uint64_t release_held_at_lease_end(void)
{
    return egm__objects_release_held(fx.st.objects, 1 + TTL);
}

/* An eviction whose frees find no memory for a free range record (the
 * evicted objects have allocated neighbours): the bytes it says it freed are
 * the bytes the allocator has free again, not counting what was lost. */
static void test_evict_counts_lost_space_as_not_freed(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(64 << 20);
    char key[32];
    put_numbered("e");
    for (int i = 0; i < LOST_N; i += 4) {
        snprintf(key, sizeof(key), "e%d", i);
        assert_int_equal(rm(key, 0, 0), EGM_OK);
    }
    for (int i = 0; i < LOST_N; i++)
        if (i % 4 == 1 || i % 4 == 3) {
            snprintf(key, sizeof(key), "e%d", i);
            assert_int_equal(exist(key, 1), EGM_OK);
        }
    uint64_t evicted_before = stats().evicted_bytes_total;
    uint64_t freed = check_freed_without_memory(seg, evict_a_quarter);
    assert_int_equal(stats().evicted_bytes_total - evicted_before, freed);
}

/* The same for held space: objects force-removed under a lease, every other
 * one (their neighbours stay allocated), released when the leases end while
 * frees find no memory: what the release says it freed is what the
 * allocator has free again. */
static void test_release_held_counts_lost_space_as_not_freed(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(64 << 20);
    char key[32];
    put_numbered("h");
    for (int i = 0; i < LOST_N; i += 2) {
        snprintf(key, sizeof(key), "h%d", i);
        assert_int_equal(exist(key, 1), EGM_OK); /* leased until 1 + TTL */
        assert_int_equal(rm(key, 1, 2), EGM_OK); /* forced: its space held */
    }
    assert_int_equal(stats().held_extents, LOST_N / 2);
    check_freed_without_memory(seg, release_held_at_lease_end);
    assert_int_equal(stats().held_extents, 0);
    assert_int_equal(stats().held_bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_invalid_arguments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revoke, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_blocks_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_all, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_reports_last_grant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_remove_holds_leased_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tick_releases_held_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unleased_force_remove_frees_at_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmount_drops_held_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_replicas_on_distinct_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_best_effort_and_no_space, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_expiry_drops_replicas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unmount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mount_validation, setup, teardown),
        cmocka_unit_test_setup_teardown(test_view_and_retired_history, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_pending_discarded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_answers_per_key, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batch_remove_reports_last_grant, setup, teardown),
        cmocka_unit_test_setup_teardown(test_colliding_keys, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_leases_and_slots, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_grows_in_steps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_put_end_twice_all_unreachable, setup, teardown),
        cmocka_unit_test_setup_teardown(test_evict_counts_lost_space_as_not_freed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_release_held_counts_lost_space_as_not_freed, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
