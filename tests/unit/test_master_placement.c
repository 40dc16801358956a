/* Placement over failure domains (src/master/placement.c) and fast failure
 * detection in the master (liveness: a provider whose connections closed),
 * without sockets:
 * - providers cut into several segments each: two replicas never share a
 *   provider, whatever the strategy, on the PutStart and the slab paths;
 * - hosts: two replicas on two hosts whenever two hosts have room;
 * - fewer providers than replicas: fewer replicas, each on its own provider;
 * - egm__placement_choose with providers excluded and copies already held
 *   (what re-replication calls);
 * - a provider presumed gone: no replica placed there, PutEnd and Commit keep
 *   only replicas on live providers (and fail with none), it is dropped
 *   after the grace, and a provider that reconnects within it keeps all. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/batch_answer.h"

#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"
#include "master/repair.h"
#include "master/placement.h"

#define GRACE 3000u
#define TTL 30000u

static uint64_t live_at_start;
static egm_master_state_t st;
static egm_id_t writer;

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = TTL, .disconnect_grace_ms = GRACE};
    egm__objects_params_default(&sp.objects);
    sp.objects.eviction_high_watermark = 1.0; /* no watermark cap on replicas here */
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    writer = egm__id_random();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egm__objects_check(st.objects), EGM_OK);
    egm__master_state_cleanup(&st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static void reinit(egm_placement_t strategy)
{
    egm__master_state_cleanup(&st);
    egm_master_state_params_t sp = {.client_ttl_ms = TTL, .disconnect_grace_ms = GRACE};
    egm__objects_params_default(&sp.objects);
    sp.objects.eviction_high_watermark = 1.0;
    sp.objects.placement = strategy;
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
}

/* A provider `owner` in `zone` (NULL: none) on `host` with `n` segments of
 * `size` bytes, named "NAME/0", "NAME/1", ... as a provider's pool chunks are. */
static void mount_provider_in(egm_id_t owner, const char *name, const char *zone, const char *host,
                              int n, uint64_t size, egm_segment_t **segs)
{
    for (int i = 0; i < n; i++) {
        char chunk[64];
        snprintf(chunk, sizeof(chunk), "%s/%d", name, i);
        egm_segment_params_t p = {.id = egm__id_random(),
                                  .size = size,
                                  .name = chunk,
                                  .host_id = host,
                                  .zone = zone,
                                  .tcp_endpoint = "127.0.0.1:1"};
        assert_int_equal(egm__liveness_mount(st.liveness, owner, &p, 0), EGM_OK);
        egm_segment_t *seg = egm__segment_table_find(st.segments, p.id);
        assert_non_null(seg);
        if (segs != NULL)
            segs[i] = seg;
    }
}

static void mount_provider(egm_id_t owner, const char *name, const char *host, int n, uint64_t size,
                           egm_segment_t **segs)
{
    mount_provider_in(owner, name, NULL, host, n, size, segs);
}

static egm_status_t put_start(const char *key, uint64_t size, uint32_t replicas, uint64_t now,
                              egm_object_view_t *view)
{
    egm_put_config_t cfg = {.replica_num = replicas, .writer_host_id = "host-a"};
    return egm__objects_put_start_with(st.objects, writer, key, strlen(key), size, &cfg, now, view);
}

static int distinct_providers(const egm_replica_view_t *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (egm__id_equal(r[i].segment->desc.owner, r[j].segment->desc.owner))
                return 0;
    return 1;
}

static int distinct_hosts(const egm_replica_view_t *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (strcmp(r[i].segment->desc.host_id, r[j].segment->desc.host_id) == 0)
                return 0;
    return 1;
}

/* 3 providers of 4 segments each, one host: replica_num 2 never puts both on
 * one provider (the old placement did, for about a third of the keys), with
 * every strategy. */
static void test_two_replicas_two_providers(void **state)
{
    (void)state;
    egm_placement_t strategies[] = {EGM_PLACEMENT_RANDOM, EGM_PLACEMENT_FREE_RATIO_FIRST,
                                    EGM_PLACEMENT_LOCAL_FIRST};
    for (size_t s = 0; s < 3; s++) {
        reinit(strategies[s]);
        egm_id_t owners[3] = {egm__id_random(), egm__id_random(), egm__id_random()};
        for (int p = 0; p < 3; p++) {
            char name[32];
            snprintf(name, sizeof(name), "prov%d", p);
            mount_provider(owners[p], name, "host-a", 4, 1 << 20, NULL);
        }
        int used[3] = {0, 0, 0};
        for (int i = 0; i < 200; i++) {
            char key[32];
            egm_object_view_t v;
            snprintf(key, sizeof(key), "k%d", i);
            assert_int_equal(put_start(key, 1024, 2, 0, &v), EGM_OK);
            assert_int_equal(v.n_replicas, 2);
            assert_true(distinct_providers(v.replicas, 2));
            for (uint32_t r = 0; r < 2; r++)
                for (int p = 0; p < 3; p++)
                    used[p] += egm__id_equal(v.replicas[r].segment->desc.owner, owners[p]);
            assert_int_equal(egm__objects_put_end(st.objects, writer, key, strlen(key), 0), EGM_OK);
        }
        for (int p = 0; p < 3; p++)
            assert_true(used[p] > 0);
        assert_int_equal(egm__objects_check(st.objects), EGM_OK);
    }
}

/* Two hosts, two providers each with 3 segments: two replicas always on two
 * hosts; four replicas on all four providers. */
static void test_hosts_first(void **state)
{
    (void)state;
    mount_provider(egm__id_random(), "a1", "host-a", 3, 1 << 20, NULL);
    mount_provider(egm__id_random(), "a2", "host-a", 3, 1 << 20, NULL);
    mount_provider(egm__id_random(), "b1", "host-b", 3, 1 << 20, NULL);
    mount_provider(egm__id_random(), "b2", "host-b", 3, 1 << 20, NULL);
    for (int i = 0; i < 100; i++) {
        char key[32];
        egm_object_view_t v;
        snprintf(key, sizeof(key), "h%d", i);
        assert_int_equal(put_start(key, 512, 2, 0, &v), EGM_OK);
        assert_int_equal(v.n_replicas, 2);
        assert_true(distinct_hosts(v.replicas, 2));
    }
    egm_object_view_t v;
    assert_int_equal(put_start("four", 512, 4, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 4);
    assert_true(distinct_providers(v.replicas, 4));
    assert_true(distinct_hosts(v.replicas, 2)); /* the first two: one per host */
}

static int distinct_zones(const egm_replica_view_t *r, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t j = i + 1; j < n; j++)
            if (strcmp(r[i].segment->desc.zone, r[j].segment->desc.zone) == 0)
                return 0;
    return 1;
}

/* Zones before hosts: 2 zones, zone z1 with 2 hosts, z2 with 1 host. Two
 * replicas always in two zones; three: two zones, three hosts; a full zone
 * leaves the next replica on another host of the same zone. */
static void test_zones_first(void **state)
{
    (void)state;
    mount_provider_in(egm__id_random(), "a", "z1", "host-a", 2, 1 << 20, NULL);
    mount_provider_in(egm__id_random(), "b", "z1", "host-b", 2, 1 << 20, NULL);
    mount_provider_in(egm__id_random(), "c", "z2", "host-c", 2, 1 << 20, NULL);
    for (int i = 0; i < 60; i++) {
        char key[32];
        egm_object_view_t v;
        snprintf(key, sizeof(key), "z%d", i);
        assert_int_equal(put_start(key, 512, 2, 0, &v), EGM_OK);
        assert_int_equal(v.n_replicas, 2);
        assert_true(distinct_zones(v.replicas, 2));
        snprintf(key, sizeof(key), "three%d", i);
        assert_int_equal(put_start(key, 512, 3, 0, &v), EGM_OK);
        assert_int_equal(v.n_replicas, 3);
        assert_true(distinct_zones(v.replicas, 2));
        assert_true(distinct_hosts(v.replicas, 3));
    }
}

/* The hosts and providers placement counts follow mounts and unmounts: a
 * host that appears takes the second replica at once. */
static void test_domains_follow_mounts(void **state)
{
    (void)state;
    egm_id_t b = egm__id_random();
    mount_provider(egm__id_random(), "a1", "host-a", 2, 1 << 20, NULL);
    mount_provider(egm__id_random(), "a2", "host-a", 2, 1 << 20, NULL);
    egm_object_view_t v;
    assert_int_equal(put_start("one-host", 512, 2, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);
    assert_false(distinct_hosts(v.replicas, 2));
    egm_segment_t *bs[2];
    mount_provider(b, "b1", "host-b", 2, 1 << 20, bs);
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "two-hosts%d", i);
        assert_int_equal(put_start(key, 512, 2, 0, &v), EGM_OK);
        assert_true(distinct_hosts(v.replicas, 2));
    }
    assert_int_equal(egm__liveness_unmount(st.liveness, b, bs[0]->desc.id, 0), EGM_OK);
    assert_int_equal(egm__liveness_unmount(st.liveness, b, bs[1]->desc.id, 0), EGM_OK);
    assert_int_equal(put_start("one-host-again", 512, 3, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2); /* two providers left */
    assert_true(distinct_providers(v.replicas, 2));
}

/* A full host: the second replica goes to another provider of the same host
 * rather than nowhere. */
static void test_host_full_falls_back_to_provider(void **state)
{
    (void)state;
    egm_segment_t *b[1];
    mount_provider(egm__id_random(), "a1", "host-a", 2, 1 << 20, NULL);
    mount_provider(egm__id_random(), "a2", "host-a", 2, 1 << 20, NULL);
    mount_provider(egm__id_random(), "b1", "host-b", 1, 4096, b);
    egm_object_view_t v;
    assert_int_equal(put_start("big", 64 << 10, 2, 0, &v), EGM_OK); /* b1 is too small */
    assert_int_equal(v.n_replicas, 2);
    assert_true(distinct_providers(v.replicas, 2));
    assert_string_equal(v.replicas[0].segment->desc.host_id, "host-a");
    assert_string_equal(v.replicas[1].segment->desc.host_id, "host-a");
}

/* Fewer providers than replicas: fewer replicas, one per provider (PutStart
 * and slabs alike). */
static void test_fewer_providers_than_replicas(void **state)
{
    (void)state;
    mount_provider(egm__id_random(), "p1", "host-a", 3, 1 << 20, NULL);
    egm_object_view_t v;
    assert_int_equal(put_start("alone", 512, 2, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    mount_provider(egm__id_random(), "p2", "host-a", 3, 1 << 20, NULL);
    assert_int_equal(put_start("three", 512, 3, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);
    assert_true(distinct_providers(v.replicas, 2));

    egm_put_config_t cfg = {.replica_num = 3};
    egm_slab_view_t slab;
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, 64 << 10, 4096, 0, 0, &cfg, 0, &slab), EGM_OK);
    assert_int_equal(slab.n_extents, 2);
    assert_false(
        egm__id_equal(slab.extents[0].segment->desc.owner, slab.extents[1].segment->desc.owner));
}

/* Slabs of 2 replicas over providers of 4 segments: extents on two providers. */
static void test_slab_extents_distinct_providers(void **state)
{
    (void)state;
    mount_provider(egm__id_random(), "p1", "host-a", 4, 1 << 20, NULL);
    mount_provider(egm__id_random(), "p2", "host-a", 4, 1 << 20, NULL);
    egm_put_config_t cfg = {.replica_num = 2};
    for (int i = 0; i < 40; i++) {
        egm_slab_view_t slab;
        assert_int_equal(
            egm__objects_slab_grant(st.objects, writer, 8192, 4096, 0, 0, &cfg, 0, &slab), EGM_OK);
        assert_int_equal(slab.n_extents, 2);
        assert_false(egm__id_equal(slab.extents[0].segment->desc.owner,
                                   slab.extents[1].segment->desc.owner));
        assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_OK);
    }
}

/* A provider with room for what the call needs but not for a whole slab:
 * the slab is placed at the call's size, with both replicas, rather than at
 * the slab's size with one. */
static void test_short_slab_placed_smaller(void **state)
{
    (void)state;
    mount_provider(egm__id_random(), "big", "host-a", 1, 4 << 20, NULL);
    mount_provider(egm__id_random(), "small", "host-a", 1, 64 << 10, NULL);
    egm_put_config_t cfg = {.replica_num = 2};
    egm_slab_view_t slab;
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, 1 << 20, 16 << 10, 0, 0, &cfg, 0, &slab),
        EGM_OK);
    assert_int_equal(slab.n_extents, 2);
    assert_int_equal(slab.size, 16 << 10);
    assert_false(
        egm__id_equal(slab.extents[0].segment->desc.owner, slab.extents[1].segment->desc.owner));
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_OK);
    /* With every provider short of even that, a short slab of the size asked. */
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, 1 << 20, 128 << 10, 0, 0, &cfg, 0, &slab),
        EGM_OK);
    assert_int_equal(slab.n_extents, 1);
    assert_int_equal(slab.size, 128 << 10);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_OK);
}

static egm_segment_t *held_seg;

static int accept_any(void *arg, egm_segment_t *seg)
{
    egm_segment_t **out = arg;
    for (int i = 0; i < 8; i++)
        if (out[i] == NULL) {
            out[i] = seg;
            return 1;
        }
    return 0;
}

/* What re-replication calls: a copy held on p1, p2 excluded: the new homes
 * are on p3 and p4 (p3's host first, unlike p1's), never p1 or p2. */
static void test_choose_excluding(void **state)
{
    (void)state;
    egm_id_t p[4] = {egm__id_random(), egm__id_random(), egm__id_random(), egm__id_random()};
    egm_segment_t *s1[2];
    mount_provider(p[0], "p1", "host-a", 2, 1 << 20, s1);
    mount_provider(p[1], "p2", "host-b", 2, 1 << 20, NULL);
    mount_provider(p[2], "p3", "host-c", 2, 1 << 20, NULL);
    mount_provider(p[3], "p4", "host-a", 2, 1 << 20, NULL);
    held_seg = s1[0];
    for (int round = 0; round < 20; round++) {
        egm_segment_t *out[8] = {NULL};
        egm_placement_request_t req = {.strategy = EGM_PLACEMENT_RANDOM,
                                       .holding = &held_seg,
                                       .n_holding = 1,
                                       .exclude_providers = &p[1],
                                       .n_exclude = 1};
        uint32_t placed;
        egm_placer_t *placer;
        assert_int_equal(egm__placer_create(&placer), EGM_OK);
        assert_int_equal(
            egm__placement_choose(placer, st.segments, &req, 3, accept_any, out, &placed), EGM_OK);
        egm__placer_destroy(placer);
        assert_int_equal(placed, 2); /* p3 and p4: p1 holds one, p2 is excluded */
        assert_true(egm__id_equal(out[0]->desc.owner, p[2])); /* host-c before host-a */
        assert_true(egm__id_equal(out[1]->desc.owner, p[3]));
    }
}

/* ---- a provider presumed gone ------------------------------------------- */

static egm_status_t commit_in(uint64_t slab, const char *key, uint64_t size, uint64_t offset,
                              uint64_t now);

/* Its connection closed: no replica goes there, PutEnd keeps the replicas on
 * live providers, a put with none left is refused, and after the grace its
 * segments are gone. */
static void test_disconnected_provider(void **state)
{
    (void)state;
    egm_id_t a = egm__id_random(), b = egm__id_random();
    mount_provider(a, "a", "host-a", 2, 1 << 20, NULL);
    mount_provider(b, "b", "host-a", 2, 1 << 20, NULL);
    egm__liveness_connected(st.liveness, a, 0);
    egm__liveness_connected(st.liveness, b, 0);
    egm_object_view_t v;
    assert_int_equal(put_start("both", 512, 2, 0, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);
    egm_put_config_t one = {
        .replica_num = 1, .preferred_segments = (const char *[]){"a"}, .n_preferred = 1};
    assert_int_equal(egm__objects_put_start_with(st.objects, writer, "on-a", 4, 512, &one, 0, &v),
                     EGM_OK);
    assert_true(egm__id_equal(v.replicas[0].segment->desc.owner, a));
    egm_slab_view_t slab;
    egm_put_config_t two = {.replica_num = 2};
    assert_int_equal(egm__objects_slab_grant(st.objects, writer, 8192, 4096, 0, 0, &two, 0, &slab),
                     EGM_OK);
    assert_int_equal(slab.n_extents, 2);

    egm__liveness_disconnected(st.liveness, a, 100); /* a's process died */
    /* No new replica on a. */
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "after%d", i);
        assert_int_equal(put_start(key, 512, 2, 100, &v), EGM_OK);
        assert_int_equal(v.n_replicas, 1);
        assert_true(egm__id_equal(v.replicas[0].segment->desc.owner, b));
    }
    /* A put with a replica on a commits with the one on b only. */
    assert_int_equal(egm__objects_put_end(st.objects, writer, "both", 4, 100), EGM_OK);
    assert_int_equal(egm__objects_get_replicas(st.objects, "both", 4, 100, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    assert_true(egm__id_equal(v.replicas[0].segment->desc.owner, b));
    /* A put whose only replica is on a is not acknowledged, and is gone. */
    assert_int_equal(egm__objects_put_end(st.objects, writer, "on-a", 4, 100), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__objects_stat(st.objects, "on-a", 4, &v), EGM_ERR_NOT_FOUND);
    /* A slab commit: the extent on b only. */
    assert_int_equal(commit_in(slab.id, "slabbed", 100, 0, 100), EGM_OK);
    assert_int_equal(egm__objects_get_replicas(st.objects, "slabbed", 7, 100, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    assert_true(egm__id_equal(v.replicas[0].segment->desc.owner, b));
    egm_object_index_stats_t s;
    egm__objects_stats(st.objects, &s);
    assert_int_equal(s.unreachable_replicas_total, 3);
    /* "both" and "slabbed" were placed with two and have one: queued for
     * re-replication, not left with one copy for good. */
    egm_repair_stats_t rs;
    egm__repair_queue_stats(egm__objects_repair_queue(st.objects), &rs);
    assert_int_equal(rs.under_replicated, 2);
    assert_int_equal(egm__objects_check(st.objects), EGM_OK);

    /* Within the grace its segments stay mounted; after it they are dropped. */
    assert_int_equal(egm__segment_table_count(st.segments), 4);
    egm__master_state_tick(&st, 100 + GRACE - 1);
    assert_int_equal(egm__segment_table_count(st.segments), 4);
    egm__master_state_tick(&st, 100 + GRACE);
    assert_int_equal(egm__segment_table_count(st.segments), 2);
    egm_liveness_stats_t ls;
    egm__liveness_stats(st.liveness, &ls);
    assert_int_equal(ls.segments_dropped[EGM_DROP_DISCONNECTED], 2);
    assert_int_equal(ls.segments_dropped[EGM_DROP_EXPIRED], 0);
    assert_int_equal(egm__objects_get_replicas(st.objects, "both", 4, 100, &v), EGM_OK);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 100), EGM_OK);
}

/* A provider whose connection closed and that pings (or binds a new
 * connection) within the grace keeps its segments and serves again; one that
 * still has another connection open is never presumed gone. */
static void test_reconnect_within_grace(void **state)
{
    (void)state;
    egm_id_t a = egm__id_random(), b = egm__id_random();
    mount_provider(a, "a", "host-a", 2, 1 << 20, NULL);
    mount_provider(b, "b", "host-a", 1, 1 << 20, NULL);
    egm__liveness_connected(st.liveness, a, 0);
    egm_object_view_t v;
    assert_int_equal(put_start("x", 512, 2, 0, &v), EGM_OK);
    assert_int_equal(egm__objects_put_end(st.objects, writer, "x", 1, 0), EGM_OK);

    egm__liveness_disconnected(st.liveness, a, 1000);
    assert_int_equal(put_start("y", 512, 2, 1000, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);             /* b only meanwhile */
    egm__liveness_connected(st.liveness, a, 1500); /* a new connection */
    egm__master_state_tick(&st, 1000 + 2 * GRACE);
    assert_int_equal(egm__segment_table_count(st.segments), 3);
    assert_int_equal(put_start("z", 512, 2, 1000 + 2 * GRACE, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);
    assert_int_equal(egm__objects_get_replicas(st.objects, "x", 1, 1000 + 2 * GRACE, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);

    /* A ping is as good as a new connection. */
    egm__liveness_disconnected(st.liveness, a, 20000);
    assert_int_equal(egm__liveness_ping(st.liveness, a, 20500), EGM_OK);
    egm__master_state_tick(&st, 20000 + 2 * GRACE);
    assert_int_equal(egm__segment_table_count(st.segments), 3);

    /* Two connections: one closing leaves it reachable. */
    egm__liveness_connected(st.liveness, a, 30000);
    egm__liveness_connected(st.liveness, a, 30000); /* two connections */
    egm__liveness_disconnected(st.liveness, a, 30000);
    assert_int_equal(put_start("w", 512, 2, 30000, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 2);
    egm_liveness_stats_t ls;
    egm__liveness_stats(st.liveness, &ls);
    assert_int_equal(ls.disconnects, 2);
    assert_int_equal(ls.reconnects, 2);
}

/* With the grace off, a closed connection changes nothing: the TTL alone. */
static void test_grace_off(void **state)
{
    (void)state;
    egm__master_state_cleanup(&st);
    egm_master_state_params_t sp = {.client_ttl_ms = TTL, .disconnect_grace_ms = 0};
    egm__objects_params_default(&sp.objects);
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    egm_id_t a = egm__id_random();
    mount_provider(a, "a", "host-a", 1, 1 << 20, NULL);
    egm__liveness_connected(st.liveness, a, 0);
    egm__liveness_disconnected(st.liveness, a, 0);
    egm__master_state_tick(&st, TTL - 1);
    assert_int_equal(egm__segment_table_count(st.segments), 1);
    egm__master_state_tick(&st, TTL);
    assert_int_equal(egm__segment_table_count(st.segments), 0);
}

static egm_status_t commit_in(uint64_t slab, const char *key, uint64_t size, uint64_t offset,
                              uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 2};
    size_t len = strlen(key);
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = writer,
                             .sizes = &size,
                             .slab_ids = &slab,
                             .offsets = &offset,
                             .config = &cfg,
                             .now_ms = now,
                             .n = 1,
                             .keys = &key,
                             .key_lens = &len,
                             .done = egm_test_record_answer};
    egm_test_answered = EGM_INPROGRESS;
    assert_int_equal(egm__objects_batch(st.objects, &b), EGM_OK);
    return egm_test_answered;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_two_replicas_two_providers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_hosts_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_domains_follow_mounts, setup, teardown),
        cmocka_unit_test_setup_teardown(test_zones_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_full_falls_back_to_provider, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fewer_providers_than_replicas, setup, teardown),
        cmocka_unit_test_setup_teardown(test_slab_extents_distinct_providers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_slab_placed_smaller, setup, teardown),
        cmocka_unit_test_setup_teardown(test_choose_excluding, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disconnected_provider, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnect_within_grace, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grace_off, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
