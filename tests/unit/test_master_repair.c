/* Re-replication in the master, without sockets (master/repair.h;
 * docs/rereplication.md): a dropped segment queues exactly the objects that
 * kept a replica; a grant's target is on a provider that holds no replica of
 * the object; a commit restores the replica count; a commit after a force
 * remove, an upsert, the lease's end, a failed copy or the target's segment
 * going is refused and gives the extent's space back; an object that cannot
 * be repaired (no other provider) stays queued; the RPCs answer as the
 * index does. Every test ends with the index's own check (allocators =
 * replicas + held space). Time is an argument, so nothing sleeps. */
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
#include "master/repair.h"
#include "rpc/command.h"
#include "rpc/proto_util.h"

#define LEASE 10000u
#define N_OBJECTS 24
#define SIZE 1000u

static uint64_t live_at_start;
static egm_master_state_t st;
static egm_id_t providers[3], writer;
static egm_segment_t *segs[3];
static uint64_t fake_now = 1000;

static uint64_t clock_ms(void)
{
    return fake_now;
}

static void check(void)
{
    if (egm__objects_check(st.objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
}

static egm_segment_t *mount(egm_id_t owner, int i)
{
    char name[32];
    snprintf(name, sizeof(name), "p%d/0", i);
    egm_segment_params_t p = {
        .id = egm__id_random(), .size = 1 << 20, .name = name, .tcp_endpoint = "127.0.0.1:1"};
    assert_int_equal(egm__liveness_mount(st.liveness, owner, &p, 0), EGM_OK);
    return egm__segment_table_find(st.segments, p.id);
}

static void key_name(int i, char *buf, size_t len)
{
    snprintf(buf, len, "obj-%02d", i);
}

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000}; /* no expiry */
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = LEASE;
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    st.now_ms = clock_ms;
    writer = egm__id_random();
    for (int i = 0; i < 3; i++) {
        providers[i] = egm__id_random();
        segs[i] = mount(providers[i], i);
    }
    for (int i = 0; i < N_OBJECTS; i++) {
        char key[32];
        key_name(i, key, sizeof(key));
        assert_int_equal(
            egm__objects_put_start(st.objects, writer, key, strlen(key), SIZE, 2, fake_now, NULL),
            EGM_OK);
        assert_int_equal(egm__objects_put_end(st.objects, writer, key, strlen(key), fake_now),
                         EGM_OK);
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    check();
    egm__master_state_cleanup(&st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static egm_repair_stats_t rstats(void)
{
    egm_repair_stats_t s;
    egm__repair_queue_stats(egm__objects_repair_queue(st.objects), &s);
    return s;
}

static uint64_t held_bytes(void)
{
    egm_object_index_stats_t s;
    egm__objects_stats(st.objects, &s);
    return s.held_bytes;
}

static uint64_t used(const egm_segment_t *seg)
{
    egm_allocator_stats_t s;
    egm__allocator_stats(seg->allocator, &s);
    return s.used;
}

/* Live replicas of a key (StatKey's view), and whether one is on segment seg. */
static uint32_t replicas_of(const char *key, const egm_segment_t *seg, int *on_seg_p)
{
    egm_object_view_t v;
    if (on_seg_p != NULL)
        *on_seg_p = 0;
    if (egm__objects_stat(st.objects, key, strlen(key), &v) != EGM_OK)
        return 0;
    if (on_seg_p != NULL) {
        for (uint32_t r = 0; r < v.n_replicas; r++)
            *on_seg_p |= v.replicas[r].segment == seg;
    }
    return v.n_replicas;
}

/* Drops provider 0's segment; returns how many objects had a replica there. */
static size_t drop_provider0(void)
{
    size_t on = 0;
    for (int i = 0; i < N_OBJECTS; i++) {
        char key[32];
        int there;
        key_name(i, key, sizeof(key));
        replicas_of(key, segs[0], &there);
        on += there;
    }
    assert_int_equal(egm__liveness_unmount(st.liveness, providers[0], segs[0]->desc.id, fake_now),
                     EGM_OK);
    segs[0] = NULL;
    return on;
}

typedef struct {
    size_t n;
    char *keys[N_OBJECTS];
    egm_repair_task_t tasks[N_OBJECTS];
} grant_t;

static void grant(grant_t *g, size_t max_keys)
{
    assert_int_equal(egm__repair_grant(st.objects, max_keys, 0, fake_now, g->keys, g->tasks, &g->n),
                     EGM_OK);
}

static void grant_free(grant_t *g)
{
    for (size_t i = 0; i < g->n; i++)
        egm_free(g->keys[i]);
    g->n = 0;
}

static void test_drop_queues_objects_that_kept_a_replica(void **state)
{
    (void)state;
    int had[N_OBJECTS];
    for (int i = 0; i < N_OBJECTS; i++) {
        char key[32];
        key_name(i, key, sizeof(key));
        assert_int_equal(replicas_of(key, segs[0], &had[i]), 2);
    }
    assert_int_equal(rstats().under_replicated, 0);
    size_t lost = drop_provider0();
    assert_true(lost > 0 && lost < N_OBJECTS); /* random placement over 3 providers, 2 replicas */
    assert_int_equal(rstats().under_replicated, lost);
    /* Exactly those are under-replicated: a grant hands out each once. */
    grant_t g;
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, lost);
    for (size_t i = 0; i < g.n; i++) {
        int k;
        assert_int_equal(sscanf(g.keys[i], "obj-%d", &k), 1);
        assert_true(had[k]);
        assert_int_equal(replicas_of(g.keys[i], NULL, NULL), 1);
    }
    grant_free(&g);
    check();
}

static void test_grant_and_commit_restore_the_count(void **state)
{
    (void)state;
    /* Providers 1 and 2 get a second, empty segment: a target must still be
     * on the other provider, not on the survivor's other segment. */
    egm_segment_params_t more[2] = {
        {.id = egm__id_random(), .size = 1 << 20, .name = "p1/1", .tcp_endpoint = "127.0.0.1:1"},
        {.id = egm__id_random(), .size = 1 << 20, .name = "p2/1", .tcp_endpoint = "127.0.0.1:1"}};
    assert_int_equal(egm__liveness_mount(st.liveness, providers[1], &more[0], 0), EGM_OK);
    assert_int_equal(egm__liveness_mount(st.liveness, providers[2], &more[1], 0), EGM_OK);
    size_t lost = drop_provider0();
    grant_t g;
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, lost);
    assert_int_equal(held_bytes(), lost * 1024); /* targets held: SIZE rounded to 64 */
    check();
    /* Granted keys are busy until their lease ends: not handed out twice. */
    grant_t again;
    grant(&again, N_OBJECTS);
    assert_int_equal(again.n, 0);
    for (size_t i = 0; i < g.n; i++) {
        const egm_repair_task_t *t = &g.tasks[i];
        assert_int_equal(t->size, SIZE);
        /* Distinct provider: not the survivor's segment nor its owner. */
        assert_ptr_not_equal(t->target, t->source);
        assert_false(egm__id_equal(t->target->desc.owner, t->source->desc.owner));
        int on_target;
        assert_int_equal(replicas_of(g.keys[i], t->target, &on_target), 1);
        assert_false(on_target);
        assert_int_equal(
            egm__repair_commit(st.objects, g.keys[i], strlen(g.keys[i]), t, 1, fake_now + 100),
            EGM_OK);
        assert_int_equal(replicas_of(g.keys[i], t->target, &on_target), 2);
        assert_true(on_target);
    }
    egm_repair_stats_t s = rstats();
    assert_int_equal(s.under_replicated, 0);
    assert_int_equal(s.repaired_total, lost);
    assert_int_equal(s.repaired_bytes_total, lost * SIZE);
    assert_int_equal(s.granted_total, lost);
    assert_int_equal(held_bytes(), 0);
    check();
    grant_free(&g);
    /* Now provider 1 goes: what it held is still on one of the other two. */
    assert_int_equal(egm__liveness_leave(st.liveness, providers[1]), EGM_OK); /* both segments */
    segs[1] = NULL;
    for (int i = 0; i < N_OBJECTS; i++) {
        char key[32];
        key_name(i, key, sizeof(key));
        assert_int_equal(replicas_of(key, NULL, NULL) >= 1, 1);
    }
    /* ... and with only provider 2 left, nothing can be repaired: queued still. */
    size_t queued = rstats().under_replicated;
    assert_int_equal(queued, N_OBJECTS); /* every object had a replica on provider 1 */
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, 0);
    assert_int_equal(rstats().under_replicated, queued);
    check();
}

static void test_commit_after_remove_or_upsert_is_discarded(void **state)
{
    (void)state;
    drop_provider0();
    grant_t g;
    grant(&g, 2);
    assert_int_equal(g.n, 2);

    /* Key 0: removed. The lease granted with the task serves no reader, so a
     * plain remove is not refused (HAS_LEASE is for readers, as without a
     * repair), but it holds the source's space for the worker's copy. */
    const char *k0 = g.keys[0];
    uint64_t held_before = held_bytes();
    assert_int_equal(egm__objects_remove(st.objects, k0, strlen(k0), 0, fake_now, NULL), EGM_OK);
    assert_true(held_bytes() >= held_before + SIZE);
    assert_int_not_equal(
        egm__repair_commit(st.objects, k0, strlen(k0), &g.tasks[0], 1, fake_now + 10), EGM_OK);
    check();

    /* Key 1: upserted (force remove + put of the same key, same size). */
    const char *k1 = g.keys[1];
    assert_int_equal(egm__objects_remove(st.objects, k1, strlen(k1), 1, fake_now, NULL), EGM_OK);
    assert_int_equal(
        egm__objects_put_start(st.objects, writer, k1, strlen(k1), SIZE, 1, fake_now, NULL),
        EGM_OK);
    assert_int_equal(egm__objects_put_end(st.objects, writer, k1, strlen(k1), fake_now), EGM_OK);
    assert_int_equal(egm__repair_commit(st.objects, k1, strlen(k1), &g.tasks[1], 1, fake_now + 10),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(replicas_of(k1, NULL, NULL), 1);
    /* The targets' space went back: the check finds every allocation a
     * replica or held space, and k1's new object is not under-replicated. */
    check();
    assert_int_equal(rstats().discarded_total, 2);
    assert_int_equal(rstats().repaired_total, 0);
    /* The removed objects' own space is held until the lease ends, then freed. */
    fake_now += LEASE;
    egm__master_state_tick(&st, fake_now);
    assert_int_equal(held_bytes(), 0);
    check();
    grant_free(&g);
}

/* A reader's lease, before or after the repair's grant, still makes a plain
 * remove answer HAS_LEASE; only the repair's own lease does not. A repair
 * waits for a live reader's lease to end, one lease TTL at most. */
static void test_readers_lease_still_refuses_a_plain_remove(void **state)
{
    (void)state;
    drop_provider0();
    grant_t g;
    grant(&g, 2);
    assert_int_equal(g.n, 2);
    char k0[64], k1[64];
    snprintf(k0, sizeof(k0), "%s", g.keys[0]);
    snprintf(k1, sizeof(k1), "%s", g.keys[1]);
    /* k0: read after the grant. */
    assert_int_equal(egm__objects_exist(st.objects, k0, strlen(k0), fake_now + 1, NULL), EGM_OK);
    assert_int_equal(egm__objects_remove(st.objects, k0, strlen(k0), 0, fake_now + 2, NULL),
                     EGM_ERR_HAS_LEASE);
    /* Both copies fail; every lease runs out. */
    for (size_t i = 0; i < g.n; i++)
        assert_int_not_equal(
            egm__repair_commit(st.objects, g.keys[i], strlen(g.keys[i]), &g.tasks[i], 0, fake_now),
            EGM_OK);
    grant_free(&g);
    fake_now += LEASE + 1001; /* past the leases and the failed copies' retry wait */
    egm__master_state_tick(&st, fake_now);
    /* k1, read: its repair waits for the reader's lease (a repair's lease
     * would lengthen it), for one lease TTL at most, then goes over it. */
    assert_int_equal(egm__objects_exist(st.objects, k1, strlen(k1), fake_now, NULL), EGM_OK);
    for (int round = 0; round < 3; round++) {
        grant(&g, N_OBJECTS);
        int has_k1 = 0;
        for (size_t i = 0; i < g.n; i++) {
            has_k1 |= strcmp(g.keys[i], k1) == 0;
            egm__repair_commit(st.objects, g.keys[i], strlen(g.keys[i]), &g.tasks[i], 0, fake_now);
        }
        grant_free(&g);
        assert_int_equal(has_k1, round == 2); /* rounds at 0, LEASE/2, LEASE + 1 */
        fake_now += round == 0 ? LEASE / 2 : LEASE / 2 + 1;
        /* The reader reads again: its lease stays live throughout. */
        assert_int_equal(egm__objects_exist(st.objects, k1, strlen(k1), fake_now, NULL), EGM_OK);
    }
    assert_int_equal(egm__objects_remove(st.objects, k1, strlen(k1), 0, fake_now, NULL),
                     EGM_ERR_HAS_LEASE);
    fake_now += LEASE + 1;
    egm__master_state_tick(&st, fake_now);
    check();
}

static void test_failed_copy_lease_end_and_lost_target(void **state)
{
    (void)state;
    drop_provider0();
    size_t queued = rstats().under_replicated;
    grant_t g;
    grant(&g, 3);
    assert_int_equal(g.n, 3);
    uint64_t before = used(g.tasks[0].target);

    /* A failed copy: the extent goes back, the key waits a little, then is granted again. */
    const char *k = g.keys[0];
    assert_int_equal(egm__repair_commit(st.objects, k, strlen(k), &g.tasks[0], 0, fake_now),
                     EGM_ERR_TRANSFER);
    assert_int_equal(used(g.tasks[0].target), before - 1024);
    assert_int_equal(rstats().failed_total, 1);
    assert_int_equal(rstats().under_replicated, queued);
    check();

    /* A commit after the lease's end: refused, the extent freed. */
    assert_int_equal(egm__repair_commit(st.objects, g.keys[1], strlen(g.keys[1]), &g.tasks[1], 1,
                                        fake_now + LEASE),
                     EGM_ERR_LEASE_EXPIRED);
    check();

    /* The third task: never committed. The tick frees its extent at the lease's end. */
    fake_now += LEASE;
    egm__master_state_tick(&st, fake_now);
    assert_int_equal(held_bytes(), 0);
    assert_int_equal(
        egm__repair_commit(st.objects, g.keys[2], strlen(g.keys[2]), &g.tasks[2], 1, fake_now),
        EGM_ERR_NOT_FOUND);
    check();
    grant_free(&g);

    /* Everything is granted again, and a target whose segment goes before the
     * commit is refused without touching the index. */
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, queued);
    egm_segment_t *gone = g.tasks[0].target;
    int p = gone == segs[1] ? 1 : 2;
    assert_int_equal(egm__liveness_unmount(st.liveness, providers[p], gone->desc.id, fake_now),
                     EGM_OK);
    segs[p] = NULL;
    for (size_t i = 0; i < g.n; i++) {
        egm_repair_task_t t = g.tasks[i];
        if (t.target == gone)
            t.target = NULL; /* as the handler resolves an unmounted id */
        if (t.source == gone)
            t.source = NULL;
        egm_status_t s =
            egm__repair_commit(st.objects, g.keys[i], strlen(g.keys[i]), &t, 1, fake_now + 1);
        if (t.target == NULL)
            assert_int_equal(s, EGM_ERR_SEGMENT_NOT_FOUND);
        else if (t.source == NULL)
            assert_int_not_equal(s, EGM_OK);
        check();
    }
    grant_free(&g);
    assert_int_equal(held_bytes(), 0);
}

/* The RPCs: a grant's reply describes every segment its tasks name, and a
 * commit of the same tasks answers a status per task. */
static void test_rpcs(void **state)
{
    (void)state;
    size_t lost = drop_provider0();
    Egm__RepairGrantRequest req = EGM__REPAIR_GRANT_REQUEST__INIT;
    Egm__Id me = EGM__ID__INIT;
    egm__id_to_pb(writer, &me);
    req.client = &me;
    req.max_bytes = 1; /* one task at least, then the bound stops it */
    uint8_t *buf;
    size_t len;
    egm_rpc_reply_t reply = {0};
    assert_int_equal(egm__pb_pack(&req.base, &buf, &len), EGM_OK);
    assert_int_equal(egm__master_handle(&st, EGM_RPC_REPAIR_GRANT, buf, len, &reply), EGM_OK);
    egm_free(buf);
    Egm__RepairGrantReply *gr = NULL;
    assert_int_equal(egm__pb_unpack(&egm__repair_grant_reply__descriptor, reply.buf, reply.len,
                                    (ProtobufCMessage **)&gr),
                     EGM_OK);
    egm_free(reply.buf);
    assert_int_equal(gr->status, EGM_OK);
    assert_int_equal(gr->n_tasks, 1);
    assert_int_equal(gr->lease_ms, LEASE);
    assert_int_equal(gr->n_segments, 2);

    Egm__RepairCommitRequest creq = EGM__REPAIR_COMMIT_REQUEST__INIT;
    protobuf_c_boolean copied[1] = {1};
    creq.client = &me;
    creq.n_tasks = gr->n_tasks;
    creq.tasks = gr->tasks;
    creq.n_copied = 1;
    creq.copied = copied;
    /* copied must match tasks */
    creq.n_copied = 0;
    assert_int_equal(egm__pb_pack(&creq.base, &buf, &len), EGM_OK);
    assert_int_equal(egm__master_handle(&st, EGM_RPC_REPAIR_COMMIT, buf, len, &reply),
                     EGM_ERR_INVALID_ARG);
    egm_free(buf);
    creq.n_copied = 1;
    assert_int_equal(egm__pb_pack(&creq.base, &buf, &len), EGM_OK);
    assert_int_equal(egm__master_handle(&st, EGM_RPC_REPAIR_COMMIT, buf, len, &reply), EGM_OK);
    egm_free(buf);
    Egm__RepairCommitReply *cr = NULL;
    assert_int_equal(egm__pb_unpack(&egm__repair_commit_reply__descriptor, reply.buf, reply.len,
                                    (ProtobufCMessage **)&cr),
                     EGM_OK);
    egm_free(reply.buf);
    assert_int_equal(cr->n_results, 1);
    assert_int_equal(cr->results[0], EGM_OK);
    assert_int_equal(replicas_of(gr->tasks[0]->key, NULL, NULL), 2);
    assert_int_equal(rstats().under_replicated, lost - 1);
    egm__pb_free(&cr->base);
    egm__pb_free(&gr->base);
    check();
}

/* Repairs never take the pool above the high watermark (so they never make
 * the tick evict): 11 objects of 64 KiB on p0 and p1 (preferred), the
 * watermark at 0.5; once p0 goes, p1 holds 704 KiB of the 2 MiB left, so
 * exactly 5 repairs fit under 1 MiB. */
static int setup_watermark(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000};
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = LEASE;
    sp.objects.eviction_high_watermark = 0.5;
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    st.now_ms = clock_ms;
    writer = egm__id_random();
    for (int i = 0; i < 3; i++) {
        providers[i] = egm__id_random();
        segs[i] = mount(providers[i], i);
    }
    const char *const preferred[] = {"p0", "p1"};
    egm_put_config_t cfg = {.replica_num = 2, .preferred_segments = preferred, .n_preferred = 2};
    for (int i = 0; i < 11; i++) {
        char key[32];
        key_name(i, key, sizeof(key));
        assert_int_equal(egm__objects_put_start_with(st.objects, writer, key, strlen(key), 64 << 10,
                                                     &cfg, fake_now, NULL),
                         EGM_OK);
        assert_int_equal(egm__objects_put_end(st.objects, writer, key, strlen(key), fake_now),
                         EGM_OK);
    }
    assert_int_equal(used(segs[0]), 11 * (64 << 10));
    assert_int_equal(used(segs[1]), 11 * (64 << 10));
    return 0;
}

static void test_repairs_stop_at_the_high_watermark(void **state)
{
    (void)state;
    assert_int_equal(drop_provider0(), 11);
    grant_t g;
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, 5);
    for (size_t i = 0; i < g.n; i++) {
        assert_ptr_equal(g.tasks[i].target, segs[2]);
        assert_int_equal(
            egm__repair_commit(st.objects, g.keys[i], strlen(g.keys[i]), &g.tasks[i], 1, fake_now),
            EGM_OK);
    }
    grant_free(&g);
    assert_int_equal(used(segs[1]) + used(segs[2]), 1 << 20);
    grant(&g, N_OBJECTS);
    assert_int_equal(g.n, 0);
    assert_int_equal(rstats().under_replicated, 6);
    check();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_drop_queues_objects_that_kept_a_replica, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_grant_and_commit_restore_the_count, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_after_remove_or_upsert_is_discarded, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_readers_lease_still_refuses_a_plain_remove, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_failed_copy_lease_end_and_lost_target, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_rpcs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_repairs_stop_at_the_high_watermark, setup_watermark,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
