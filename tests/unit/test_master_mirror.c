/* State handover between masters (docs/ha.md "State handover"), without
 * sockets: a leader's index built through the normal calls (puts with pins
 * and 2-3 replicas, slab grants and commits, a remove under a lease that
 * holds the space, pending puts left unfinished, a segment unmounted) is
 * sent as a snapshot (egm__objects_snapshot plus the segments) and then as
 * journal batches (a follower of the leader's journal) to a standby's mirror,
 * which a new leader installs into a fresh segment table, index and
 * liveness. The new leader must have the same keys with the same size, pins
 * and replica placements (removed keys gone), pass its own check, use
 * exactly the space the old one used (objects, held, pending and slab
 * ranges) until those ranges' time is up and then hand it out again, and
 * refuse a plain remove of an adopted object (adoption grants a lease). The
 * mirror refuses batches of an older epoch, out of order, or corrupted; and
 * egm__objects_adopt skips (and counts) replicas that overlap. Taking over
 * reads open slabs' logs through a reader past the seqs the mirror knows,
 * up to the first entry that does not decode, from another extent when one
 * fails, and adopts the objects they describe whose key it does not hold
 * (test_slab_logs_read). Time is an
 * argument, so nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/slab_log.h"
#include "master/journal.h"
#include "master/master_int.h"
#include "master/mirror.h"
#include "master/repair.h"
#include "master/slabs.h"
#include "support/batch_answer.h"
#include "support/journal_standby.h"

#define LEASE 10000u   /* lease_ttl_ms */
#define PENDING 30000u /* pending_timeout_ms: pending puts and slabs */
#define SEG (64u << 10)
#define BLOCKS (SEG / EGM_OBJECT_ALIGN)
#define EPOCH 7

static uint64_t live_at_start;
static egm_master_state_t lead, fresh;
static egm_journal_t *journal;
static egm_segment_t *lsegs[3];
static egm_id_t owners[3], writer;

/* The leader's state as sent: the snapshot and the stream's batches (at
 * most 300 bytes each), which the standby keeps. */
static egm_jbuf_t snap;
static uint64_t snap_pos;
static egm_test_standby_t standby;

/* Per leader segment: blocks the leader uses (objects, held, pending, slabs)
 * and, of those, the ones no object lies on. */
static uint8_t in_use[3][BLOCKS], held[3][BLOCKS];

static const char *const complete_keys[] = {"a", "b", "d", "s2", "c", "s3"};
static const char *const absent_keys[] = {"g", "s1", "r0", "r1", "p0", "p1"};
#define N_COMPLETE (sizeof(complete_keys) / sizeof(*complete_keys))
#define N_ABSENT (sizeof(absent_keys) / sizeof(*absent_keys))

static void state_init(egm_master_state_t *st)
{
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000}; /* no expiry */
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = LEASE;
    sp.objects.pending_timeout_ms = PENDING;
    sp.objects.eviction_high_watermark = 1.0; /* the tests fill segments to the brim */
    assert_int_equal(egm__master_state_init(st, &sp), EGM_OK);
}

static void check(egm_master_state_t *st)
{
    if (egm__objects_check(st->objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
}

static egm_segment_t *mount(egm_master_state_t *st, egm_id_t owner, const char *name, uint64_t size)
{
    egm_segment_params_t p = {
        .id = egm__id_random(), .size = size, .name = name, .tcp_endpoint = "127.0.0.1:1"};
    assert_int_equal(egm__liveness_mount(st->liveness, owner, &p, 0), EGM_OK);
    return egm__segment_table_find(st->segments, p.id);
}

static int seg_index(egm_id_t id)
{
    for (int i = 0; i < 3; i++)
        if (lsegs[i] != NULL && egm__id_equal(lsegs[i]->desc.id, id))
            return i;
    return -1;
}

static void mark(uint8_t map[3][BLOCKS], const egm_segment_t *seg, uint64_t offset, uint64_t len,
                 uint8_t v)
{
    int s = seg_index(seg->desc.id);
    assert_true(s >= 0);
    for (uint64_t b = offset / EGM_OBJECT_ALIGN;
         b < (offset + len + EGM_OBJECT_ALIGN - 1) / EGM_OBJECT_ALIGN; b++) {
        assert_true(b < BLOCKS);
        map[s][b] = v;
    }
}

static void put(const char *key, uint64_t size, uint32_t replicas, int soft, int hard, int end,
                uint64_t now, egm_object_view_t *view_p)
{
    egm_put_config_t cfg = {.replica_num = replicas, .soft_pin = soft, .hard_pin = hard};
    assert_int_equal(egm__objects_put_start_with(lead.objects, writer, key, strlen(key), size, &cfg,
                                                 now, view_p),
                     EGM_OK);
    assert_int_equal(view_p->n_replicas, replicas);
    if (end)
        assert_int_equal(egm__objects_put_end(lead.objects, writer, key, strlen(key), now), EGM_OK);
}

static void commit(const char *key, uint64_t size, uint64_t slab, uint64_t offset, uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 1};
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
    assert_int_equal(egm__objects_batch(lead.objects, &b), EGM_OK);
    assert_int_equal(egm_test_answered, EGM_OK);
}

static void grant(uint64_t size, uint32_t replicas, uint64_t now, egm_slab_view_t *slab)
{
    egm_put_config_t cfg = {.replica_num = replicas};
    assert_int_equal(egm__objects_slab_grant(lead.objects, writer, size, 64, 0, 0, &cfg, now, slab),
                     EGM_OK);
    assert_int_equal(slab->n_extents, replicas);
}

/* Removed (forced) under a lease: its space is held until the lease ends. */
static void remove_leased(const char *key, uint64_t now)
{
    egm_object_view_t v;
    assert_int_equal(egm__objects_get_replicas(lead.objects, key, strlen(key), now, &v), EGM_OK);
    assert_int_equal(egm__objects_remove(lead.objects, key, strlen(key), 0, now, NULL),
                     EGM_ERR_HAS_LEASE);
    assert_int_equal(egm__objects_remove(lead.objects, key, strlen(key), 1, now, NULL), EGM_OK);
}

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    memset(in_use, 0, sizeof(in_use));
    memset(held, 0, sizeof(held));
    state_init(&lead);
    state_init(&fresh);
    assert_int_equal(egm__journal_create(&journal), EGM_OK);
    egm__objects_set_journal(lead.objects, journal);
    egm__segment_table_set_journal(lead.segments, journal);
    writer = egm__id_random();
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof(name), "L%d/0", i);
        owners[i] = egm__id_random();
        lsegs[i] = mount(&lead, owners[i], name, SEG);
    }

    /* Before the snapshot (no follower: nothing journalled). */
    uint64_t t = 1000;
    egm_object_view_t v;
    egm_slab_view_t slab;
    put("a", 1000, 2, 1, 0, 1, t, &v);
    put("b", 3000, 1, 0, 1, 1, t, &v);
    put("d", 200, 3, 0, 0, 1, t, &v);
    grant(4096, 1, t, &slab);
    assert_true(slab.size >= 4096);
    for (uint32_t e = 0; e < slab.n_extents; e++)
        mark(in_use, slab.extents[e].segment, slab.extents[e].offset, slab.size, 1);
    commit("s1", 500, slab.id, 0, t);
    commit("s2", 700, slab.id, 512, t);
    /* s1 is removed after the snapshot: its space is then free. */
    mark(in_use, slab.extents[0].segment, slab.extents[0].offset, 512, 0);
    put("r0", 640, 2, 0, 0, 1, t, &v);
    for (uint32_t r = 0; r < v.n_replicas; r++)
        mark(in_use, v.replicas[r].segment, v.replicas[r].offset, 640, 1);
    remove_leased("r0", t);
    put("p0", 300, 2, 0, 0, 0, t, &v);
    for (uint32_t r = 0; r < v.n_replicas; r++)
        mark(in_use, v.replicas[r].segment, v.replicas[r].offset, 300, 1);
    put("g", 100, 1, 0, 0, 1, t, &v);
    assert_int_equal(egm__objects_remove(lead.objects, "g", 1, 0, t, NULL), EGM_OK);

    /* The snapshot, then the follower (nothing changes in between). */
    for (size_t i = 0; i < egm__segment_table_count(lead.segments); i++)
        egm__jenc_segment(&snap, egm__segment_table_at(lead.segments, i));
    egm__objects_snapshot(lead.objects, &snap, t);
    assert_false(snap.failed);
    snap_pos = egm_test_standby_follow(&standby, journal, 300, 1);

    /* After it: the stream. */
    t = 2000;
    put("c", 5000, 2, 0, 0, 1, t, &v);
    assert_int_equal(egm__objects_remove(lead.objects, "s1", 2, 0, t, NULL), EGM_OK);
    put("r1", 128, 1, 0, 0, 1, t, &v);
    for (uint32_t r = 0; r < v.n_replicas; r++)
        mark(in_use, v.replicas[r].segment, v.replicas[r].offset, 128, 1);
    remove_leased("r1", t);
    grant(2048, 2, t, &slab);
    for (uint32_t e = 0; e < slab.n_extents; e++)
        mark(in_use, slab.extents[e].segment, slab.extents[e].offset, slab.size, 1);
    commit("s3", 100, slab.id, 0, t);
    put("p1", 999, 1, 0, 0, 0, t, &v);
    for (uint32_t r = 0; r < v.n_replicas; r++)
        mark(in_use, v.replicas[r].segment, v.replicas[r].offset, 999, 1);
    /* Segment 2 goes: its replicas and ranges with it ("d" keeps 2 of 3). */
    assert_int_equal(egm__liveness_unmount(lead.liveness, owners[2], lsegs[2]->desc.id, t), EGM_OK);
    lsegs[2] = NULL;
    egm_test_standby_take_all(&standby);
    assert_true(standby.batches >= 2 && standby.batches <= EGM_TEST_STANDBY_BATCHES);
    check(&lead);

    /* held = in use where no live object lies. */
    memcpy(held, in_use, sizeof(held));
    for (size_t k = 0; k < N_COMPLETE; k++) {
        if (egm__objects_stat(lead.objects, complete_keys[k], strlen(complete_keys[k]), &v) !=
            EGM_OK)
            continue;
        for (uint32_t r = 0; r < v.n_replicas; r++) {
            mark(in_use, v.replicas[r].segment, v.replicas[r].offset, v.size, 1);
            mark(held, v.replicas[r].segment, v.replicas[r].offset, v.size, 0);
        }
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    check(&fresh);
    egm__objects_set_journal(lead.objects, NULL);
    egm__segment_table_set_journal(lead.segments, NULL);
    if (standby.f != NULL)
        egm_test_standby_leave(&standby);
    egm__journal_destroy(journal);
    journal = NULL;
    egm__jbuf_free(&snap);
    egm__master_state_cleanup(&lead);
    egm__master_state_cleanup(&fresh);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static void apply_all(egm_mirror_t *m, uint64_t now)
{
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, snap_pos, snap_pos, snap.buf, snap.len, now),
                     EGM_OK);
    for (size_t i = 0; i < standby.batches; i++)
        assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[i], standby.to[i],
                                           standby.ops[i], standby.len[i], now),
                         EGM_OK);
}

static uint64_t used(const egm_segment_t *seg)
{
    egm_allocator_stats_t s;
    egm__allocator_stats(seg->allocator, &s);
    return s.used;
}

static egm_segment_t *fresh_seg(int i)
{
    return egm__segment_table_find(fresh.segments, lsegs[i]->desc.id);
}

/* Fills the new leader with 64-byte pending puts until NO_SPACE; marks the
 * blocks they got in got[][] (asserting each was free there before).
 * Returns how many were placed. */
static size_t fill(const char *prefix, uint64_t now, uint8_t got[3][BLOCKS],
                   uint8_t forbidden[3][BLOCKS])
{
    size_t placed = 0;
    for (size_t i = 0; i < 4 * 3 * BLOCKS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "%s-%zu", prefix, i);
        egm_object_view_t v;
        egm_status_t s =
            egm__objects_put_start(fresh.objects, writer, key, strlen(key), 64, 1, now, &v);
        if (s == EGM_ERR_NO_SPACE)
            return placed;
        assert_int_equal(s, EGM_OK);
        int seg = seg_index(v.replicas[0].segment->desc.id);
        assert_true(seg >= 0);
        uint64_t b = v.replicas[0].offset / EGM_OBJECT_ALIGN;
        if (forbidden != NULL && forbidden[seg][b])
            fail_msg("%s placed at [%llu, +64) of segment %d, which the old leader used", key,
                     (unsigned long long)v.replicas[0].offset, seg);
        assert_int_equal(got[seg][b], 0);
        got[seg][b] = 1;
        placed++;
    }
    fail_msg("the new leader never ran out of space");
    return placed;
}

static void test_handover(void **state)
{
    (void)state;
    egm_mirror_t *m;
    assert_int_equal(egm__mirror_create(&m), EGM_OK);
    apply_all(m, 2000);
    egm_mirror_stats_t ms;
    egm__mirror_stats(m, &ms);
    assert_int_equal(ms.epoch, EPOCH);
    assert_int_equal(ms.position, standby.to[standby.batches - 1]);
    assert_int_equal(ms.segments, 2);
    assert_int_equal(ms.batches_total, standby.batches + 1);

    /* Elected at t=3000. */
    uint64_t t = 3000;
    size_t adopted, skipped, recovered, removed;
    assert_int_equal(egm__mirror_install(m, fresh.liveness, fresh.segments, fresh.objects, NULL, t,
                                         &adopted, &skipped, &recovered, &removed),
                     EGM_OK);
    assert_int_equal(recovered, 0);
    assert_int_equal(skipped, 0);
    egm__mirror_stats(m, &ms);
    assert_int_equal(ms.objects, 0); /* emptied */
    egm__mirror_destroy(m);
    check(&fresh);
    assert_int_equal(egm__segment_table_count(fresh.segments), 2);
    assert_null(egm__segment_table_find(fresh.segments, egm__id_random()));

    /* The same objects, at the same places. */
    size_t present = 0;
    for (size_t k = 0; k < N_COMPLETE; k++) {
        const char *key = complete_keys[k];
        egm_object_view_t lv, nv;
        egm_status_t ls = egm__objects_stat(lead.objects, key, strlen(key), &lv);
        egm_status_t ns = egm__objects_stat(fresh.objects, key, strlen(key), &nv);
        assert_int_equal(ns, ls);
        if (ls != EGM_OK)
            continue;
        present++;
        assert_int_equal(nv.state, EGM_OBJECT_COMPLETE);
        assert_int_equal(nv.size, lv.size);
        assert_true(egm__id_equal(nv.writer, lv.writer));
        assert_int_equal(nv.soft_pin, lv.soft_pin);
        assert_int_equal(nv.hard_pin, lv.hard_pin);
        assert_int_equal(nv.n_replicas, lv.n_replicas);
        for (uint32_t r = 0; r < lv.n_replicas; r++) {
            int found = 0;
            for (uint32_t q = 0; q < nv.n_replicas; q++)
                found |= egm__id_equal(nv.replicas[q].segment->desc.id,
                                       lv.replicas[r].segment->desc.id) &&
                         nv.replicas[q].offset == lv.replicas[r].offset;
            if (!found)
                fail_msg("%s: replica at [%llu] of segment %s not adopted", key,
                         (unsigned long long)lv.replicas[r].offset,
                         lv.replicas[r].segment->desc.name);
        }
        const egm_object_t *lo = egm__objects_find(lead.objects, key, strlen(key));
        const egm_object_t *no = egm__objects_find(fresh.objects, key, strlen(key));
        assert_int_equal(no->n_replicas, lo->n_replicas); /* placed */
        assert_int_equal(no->n_live, lo->n_live);
    }
    assert_int_equal(adopted, present);
    assert_true(present >= 4); /* a, c, d, s3 keep a replica whatever the placement */
    const egm_object_t *d = egm__objects_find(fresh.objects, "d", 1);
    assert_int_equal(d->n_replicas, 3);
    assert_int_equal(d->n_live, 2);
    assert_int_equal(egm__objects_find(fresh.objects, "a", 1)->soft_pin, 1);
    for (size_t k = 0; k < N_ABSENT; k++)
        assert_int_equal(egm__objects_stat(fresh.objects, absent_keys[k], strlen(absent_keys[k]),
                                           &(egm_object_view_t){0}),
                         EGM_ERR_NOT_FOUND);
    /* Objects that lost a replica with segment 2 are queued for repair (the
     * leader's queue also has its pending puts that lost one). */
    size_t under = 0;
    for (size_t k = 0; k < N_COMPLETE; k++) {
        const egm_object_t *o =
            egm__objects_find(lead.objects, complete_keys[k], strlen(complete_keys[k]));
        under += o != NULL && o->n_live < o->n_replicas;
    }
    egm_repair_stats_t nr;
    egm__repair_queue_stats(egm__objects_repair_queue(fresh.objects), &nr);
    assert_true(under >= 1);
    assert_int_equal(nr.under_replicated, under);

    /* Exactly the space the leader used, segment by segment. */
    for (int i = 0; i < 2; i++)
        assert_int_equal(used(fresh_seg(i)), used(lsegs[i]));
    size_t busy = 0, held_blocks = 0;
    for (int i = 0; i < 2; i++)
        for (size_t b = 0; b < BLOCKS; b++) {
            busy += in_use[i][b];
            held_blocks += held[i][b];
        }
    egm_object_index_stats_t ns;
    egm__objects_stats(fresh.objects, &ns);
    assert_int_equal(ns.held_bytes, held_blocks * EGM_OBJECT_ALIGN);
    assert_true(held_blocks > 0);

    /* Adoption granted a lease: no plain remove. */
    assert_int_equal(egm__objects_remove(fresh.objects, "a", 1, 0, t, NULL), EGM_ERR_HAS_LEASE);

    /* Before the ranges' time: new puts get only what the old leader left free. */
    static uint8_t got[3][BLOCKS];
    memset(got, 0, sizeof(got));
    size_t placed = fill("early", t, got, in_use);
    assert_int_equal(placed, 2 * BLOCKS - busy);
    egm__objects_stats(fresh.objects, &ns);
    assert_int_equal(ns.evictions_total, 0);
    check(&fresh);

    /* After it (and the adopted leases): the held ranges are handed out again. */
    t = 3000 + 2 * PENDING;
    memset(got, 0, sizeof(got));
    placed = fill("late", t, got, NULL);
    assert_true(placed >= held_blocks);
    for (int i = 0; i < 2; i++)
        for (size_t b = 0; b < BLOCKS; b++)
            if (held[i][b] && !got[i][b])
                fail_msg("block %zu of segment %d (held at the handover) not reused", b, i);
    egm__objects_stats(fresh.objects, &ns);
    assert_int_equal(ns.held_bytes, 0);
}

static void test_refusals(void **state)
{
    (void)state;
    egm_mirror_t *m;
    egm_mirror_stats_t ms;
    assert_int_equal(egm__mirror_create(&m), EGM_OK);
    /* Nothing before a snapshot. */
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[0], standby.to[0], standby.ops[0],
                                       standby.len[0], 2000),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, snap_pos, snap_pos, snap.buf, snap.len, 2000),
                     EGM_OK);
    egm__mirror_stats(m, &ms);
    uint64_t objects_after_snap = ms.objects;
    assert_true(objects_after_snap >= 5);
    /* An older epoch, with or without reset. */
    assert_int_equal(egm__mirror_apply(m, EPOCH - 1, 0, standby.from[0], standby.to[0],
                                       standby.ops[0], standby.len[0], 2000),
                     EGM_ERR_PERMISSION);
    assert_int_equal(
        egm__mirror_apply(m, EPOCH - 1, 1, snap_pos, snap_pos, snap.buf, snap.len, 2000),
        EGM_ERR_PERMISSION);
    /* Out of order: the second batch before the first; a newer epoch without reset. */
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[1], standby.to[1], standby.ops[1],
                                       standby.len[1], 2000),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__mirror_apply(m, EPOCH + 1, 0, standby.from[0], standby.to[0],
                                       standby.ops[0], standby.len[0], 2000),
                     EGM_ERR_INVALID_ARG);
    egm__mirror_stats(m, &ms);
    assert_int_equal(ms.objects, objects_after_snap);
    assert_int_equal(ms.position, snap_pos);
    assert_int_equal(ms.batches_total, 1);
    /* In order: taken. */
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[0], standby.to[0], standby.ops[0],
                                       standby.len[0], 2000),
                     EGM_OK);
    /* The same batch again does not follow. */
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[0], standby.to[0], standby.ops[0],
                                       standby.len[0], 2000),
                     EGM_ERR_INVALID_ARG);

    /* Corrupted: cut short, or an unknown kind in the last op. */
    uint8_t *bad = egm_malloc(standby.len[1], "test.mirror");
    assert_non_null(bad);
    memcpy(bad, standby.ops[1], standby.len[1]);
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[1], standby.to[1], bad,
                                       standby.len[1] - 1, 2000),
                     EGM_ERR_INVALID_ARG);
    /* After a refused op the mirror must start over: even the good batch is refused. */
    assert_int_equal(egm__mirror_apply(m, EPOCH, 0, standby.from[1], standby.to[1], standby.ops[1],
                                       standby.len[1], 2000),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, snap_pos, snap_pos, snap.buf, snap.len, 2000),
                     EGM_OK);
    bad[0] = 0x09;
    assert_int_equal(
        egm__mirror_apply(m, EPOCH, 0, standby.from[0], standby.to[0], bad, standby.len[1], 2000),
        EGM_ERR_INVALID_ARG);
    egm_free(bad);
    /* A SEGMENT op whose descriptor is no SegmentDesc. */
    static const uint8_t bad_desc[] = {EGM_JOP_SEGMENT, 3, 0, 0, 0, 0xff, 0xff, 0xff};
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, 0, 0, bad_desc, sizeof(bad_desc), 2000),
                     EGM_ERR_INVALID_ARG);
    /* A newer epoch with reset starts over. */
    assert_int_equal(
        egm__mirror_apply(m, EPOCH + 1, 1, snap_pos, snap_pos, snap.buf, snap.len, 2000), EGM_OK);
    egm__mirror_stats(m, &ms);
    assert_int_equal(ms.epoch, EPOCH + 1);
    assert_int_equal(ms.objects, objects_after_snap);
    egm__mirror_destroy(m);
}

/* egm__objects_adopt directly: overlapping replicas, a range under an object,
 * a key given twice. */
static void test_adopt_overlaps(void **state)
{
    (void)state;
    egm_id_t o1 = egm__id_random(), o2 = egm__id_random();
    egm_segment_t *s = mount(&fresh, o1, "A/0", SEG), *s2 = mount(&fresh, o2, "B/0", SEG);
    egm_adopt_object_t objs[6] = {
        {.key = "x", .key_len = 1, .size = 1000, .placed = 1, .n_replicas = 1},
        /* overlaps x: skipped, and with no replica left, dropped */
        {.key = "y", .key_len = 1, .size = 100, .placed = 1, .n_replicas = 1},
        /* one replica overlaps x, the other is fine: adopted with one of two */
        {.key = "z", .key_len = 1, .size = 64, .placed = 2, .n_replicas = 2},
        /* the same key twice: the second is not taken and its space stays free */
        {.key = "dup", .key_len = 3, .size = 64, .placed = 1, .n_replicas = 1},
        {.key = "dup", .key_len = 3, .size = 64, .placed = 1, .n_replicas = 1},
        /* two replicas on one segment: the second is skipped */
        {.key = "w", .key_len = 1, .size = 64, .placed = 2, .n_replicas = 2},
    };
    objs[0].segment[0] = s, objs[0].offset[0] = 0;
    objs[1].segment[0] = s, objs[1].offset[0] = 512;
    objs[2].segment[0] = s, objs[2].offset[0] = 960;
    objs[2].segment[1] = s2, objs[2].offset[1] = 0;
    objs[3].segment[0] = s, objs[3].offset[0] = 8192;
    objs[4].segment[0] = s, objs[4].offset[0] = 16384;
    objs[5].segment[0] = s2, objs[5].offset[0] = 1024;
    objs[5].segment[1] = s2, objs[5].offset[1] = 2048;
    for (int i = 0; i < 6; i++)
        objs[i].writer = egm__id_random();
    /* A range over x and past it: held where x is not. */
    egm_adopt_range_t ranges[] = {{.segment = s, .offset = 0, .length = 4096, .until_ms = 5000}};
    size_t adopted, skipped;
    assert_int_equal(
        egm__objects_adopt(fresh.objects, objs, 6, ranges, 1, 1000, &adopted, &skipped), EGM_OK);
    assert_int_equal(adopted, 4); /* x, z, dup, w */
    /* y's replica and y itself, z's replica on s, dup's second egm_test_record_answer, w's second
     * replica */
    assert_int_equal(skipped, 5);
    egm_object_view_t v;
    assert_int_equal(egm__objects_stat(fresh.objects, "y", 1, &v), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__objects_stat(fresh.objects, "x", 1, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    assert_ptr_equal(v.replicas[0].segment, s);
    assert_int_equal(v.replicas[0].offset, 0);
    assert_int_equal(egm__objects_stat(fresh.objects, "z", 1, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    assert_ptr_equal(v.replicas[0].segment, s2);
    assert_int_equal(egm__objects_find(fresh.objects, "z", 1)->n_replicas, 2);
    assert_int_equal(egm__objects_stat(fresh.objects, "dup", 3, &v), EGM_OK);
    assert_int_equal(v.replicas[0].offset, 8192);
    egm_repair_stats_t rs;
    egm__repair_queue_stats(egm__objects_repair_queue(fresh.objects), &rs);
    assert_int_equal(egm__objects_stat(fresh.objects, "w", 1, &v), EGM_OK);
    assert_int_equal(v.n_replicas, 1);
    assert_int_equal(v.replicas[0].offset, 1024);
    assert_int_equal(rs.under_replicated, 2); /* z, w */
    egm_object_index_stats_t st;
    egm__objects_stats(fresh.objects, &st);
    assert_int_equal(st.held_bytes, 4096 - 1024);
    /* x (1024) + the held rest of the range + dup (64); not dup's second place. */
    assert_int_equal(used(s), 4096 + 64);
    assert_int_equal(used(s2), 64 + 64);
    check(&fresh);
    /* The held range is released after its time. */
    assert_int_equal(egm__objects_release_held(fresh.objects, 5000) > 0, 1);
    assert_int_equal(used(s), 1024 + 64);
}

/* Records the leader never sends, which a corrupt batch may: a replica at a
 * misaligned offset (skipped; it does not cut the range around it), ranges
 * that merge into an end between two blocks (held up to the block's end). */
static void test_adopt_misaligned(void **state)
{
    (void)state;
    egm_segment_t *s = mount(&fresh, egm__id_random(), "M/0", SEG);
    egm_adopt_object_t obj = {.key = "m", .key_len = 1, .size = 64, .placed = 1, .n_replicas = 1};
    obj.segment[0] = s;
    obj.offset[0] = 100;
    egm_adopt_range_t ranges[] = {{.segment = s, .offset = 0, .length = 4096, .until_ms = 5000},
                                  {.segment = s, .offset = 4000, .length = 100, .until_ms = 5000}};
    size_t adopted, skipped;
    assert_int_equal(
        egm__objects_adopt(fresh.objects, &obj, 1, ranges, 2, 1000, &adopted, &skipped), EGM_OK);
    assert_int_equal(adopted, 0);
    assert_int_equal(skipped, 2); /* m's replica, and m */
    egm_object_index_stats_t st;
    egm__objects_stats(fresh.objects, &st);
    assert_int_equal(st.held_bytes, used(s));
    assert_int_equal(used(s), 4160); /* [0, 4000 + 128) in whole blocks */
    check(&fresh);
    assert_true(egm__objects_release_held(fresh.objects, 5000) > 0);
    assert_int_equal(used(s), 0);
}

/* ---- slab logs read at takeover ---------------------------------------------- */

/* The pool as a fake reader sees it: two segments' bytes; reads of segment
 * `failing` fail. */
#define POOL_SEG (64u << 10)
static struct {
    egm_id_t ids[2];
    uint8_t mem[2][POOL_SEG];
    int failing; /* -1: none */
    int reads;
} pool;

static egm_status_t pool_read(void *arg, const egm_segment_desc_t *segment, uint64_t offset,
                              void *buf, size_t len)
{
    (void)arg;
    pool.reads++;
    for (int i = 0; i < 2; i++)
        if (egm__id_equal(segment->id, pool.ids[i])) {
            if (i == pool.failing || offset > POOL_SEG || len > POOL_SEG - offset)
                return egm__set_error(EGM_ERR_IO, "fake pool: read refused");
            memcpy(buf, pool.mem[i] + offset, len);
            return EGM_OK;
        }
    return egm__set_error(EGM_ERR_NOT_FOUND, "fake pool: no such segment");
}

#define SLAB_BASE (32u << 10) /* the slab's extent in each segment */
#define SLAB_SIZE (16u << 10)

/* Entry e of the slab at base, written into both extents. */
static void log_write_at(uint64_t base, const egm_slab_log_entry_t *e)
{
    uint64_t at = egm__slab_log_at(SLAB_SIZE, e->seq);
    assert_true(at > 0);
    for (int i = 0; i < 2; i++)
        assert_int_equal(egm__slab_log_encode(e, pool.mem[i] + base + at), EGM_OK);
}

/* A put's entry seq (soft-pinned) of the slab at base. */
static void log_entry_at(uint64_t base, uint64_t id, uint64_t seq, const char *key, uint64_t offset,
                         uint64_t size)
{
    log_write_at(base, &(egm_slab_log_entry_t){.slab_id = id,
                                               .seq = seq,
                                               .offset = offset,
                                               .size = size,
                                               .soft_pin = 1,
                                               .key = key,
                                               .key_len = strlen(key)});
}

/* Two states, the first with two segments of the fake pool mounted (reads
 * of segment `failing` fail). */
static void pool_states(egm_master_state_t *src, egm_master_state_t *dst, int failing,
                        egm_segment_t **s0_p, egm_segment_t **s1_p)
{
    state_init(src);
    state_init(dst);
    *s0_p = mount(src, owners[0], "P0/0", POOL_SEG);
    *s1_p = mount(src, owners[1], "P1/0", POOL_SEG);
    memset(&pool, 0, sizeof(pool));
    pool.ids[0] = (*s0_p)->desc.id;
    pool.ids[1] = (*s1_p)->desc.id;
    pool.failing = failing;
}

static void log_entry(uint64_t id, uint64_t seq, const char *key, uint64_t offset, uint64_t size)
{
    log_entry_at(SLAB_BASE, id, seq, key, offset, size);
}

/* A mirror holding two segments, an object "held" and a slab over both
 * segments whose entries 1-2 and 4 are known; its log in the pool: entries
 * 1-2 (known), 3 (new: k3), 4 (known), 5 (of a key the mirror holds), 6 (k3
 * again), 7 (its object past its own entry), 8 (new: k8), 9 torn, 10 (new,
 * past the torn one: never read). Taking over adopts k3 and k8 where the
 * log says, with the slab's writer and the entry's pin; with the first
 * extent's reads failing, the same from the second. */
static void slab_logs_case(int failing)
{
    egm_master_state_t src, dst;
    egm_segment_t *s0, *s1;
    pool_states(&src, &dst, failing, &s0, &s1);
    egm_object_view_t v;
    assert_int_equal(egm__objects_put_start(src.objects, writer, "held", 4, 100, 1, 0, &v), EGM_OK);
    assert_int_equal(egm__objects_put_end(src.objects, writer, "held", 4, 0), EGM_OK);
    assert_true(v.replicas[0].offset + 100 <= SLAB_BASE);
    egm_id_t slab_owner = egm__id_random();
    egm_slab_t slab = {
        .id = 0x5eed,
        .owner = slab_owner,
        .size = SLAB_SIZE,
        .n_extents = 2,
        .extents = {{.segment = s0, .base = SLAB_BASE}, {.segment = s1, .base = SLAB_BASE}}};
    assert_int_equal(egm__seq_set_add(&slab.seen, 1), EGM_OK);
    assert_int_equal(egm__seq_set_add(&slab.seen, 2), EGM_OK);
    egm_jbuf_t b = {0};
    egm__jenc_segment(&b, s0);
    egm__jenc_segment(&b, s1);
    egm__jenc_object(&b, egm__objects_find(src.objects, "held", 4));
    egm__jenc_reserve(&b, s0->desc.id, SLAB_BASE, SLAB_SIZE, 30000);
    egm__jenc_reserve(&b, s1->desc.id, SLAB_BASE, SLAB_SIZE, 30000);
    egm__jenc_slab(&b, &slab, 30000);
    egm__jenc_slab_seen(&b, slab.id, 4);
    /* A slab whose log no entry is known of (its writer kept none, or its
     * first is unconfirmed, which its writer was not answered for): not read. */
    egm_slab_t unlogged = slab;
    unlogged.id = 0x5eee;
    unlogged.seen = (egm_seq_set_t){0};
    unlogged.extents[0].base = unlogged.extents[1].base = SLAB_BASE - SLAB_SIZE;
    egm__jenc_slab(&b, &unlogged, 30000);
    log_entry_at(SLAB_BASE - SLAB_SIZE, unlogged.id, 1, "unlogged", 0, 100);
    /* One granted for a writer that keeps its log (SlabGrant `log`): read
     * though no entry is known. */
    egm_slab_t told = unlogged;
    told.id = 0x5eef;
    told.logged = 1;
    told.extents[0].base = told.extents[1].base = SLAB_BASE + SLAB_SIZE;
    egm__jenc_slab(&b, &told, 30000);
    log_entry_at(SLAB_BASE + SLAB_SIZE, told.id, 1, "told", 0, 100);
    egm__jenc_slab_seen(&b, 0x0bad, 5); /* another slab, unknown: nothing */
    assert_false(b.failed);
    egm_mirror_t *m;
    assert_int_equal(egm__mirror_create(&m), EGM_OK);
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, 0, b.len, b.buf, b.len, 1000), EGM_OK);
    egm_mirror_stats_t ms;
    egm__mirror_stats(m, &ms);
    assert_int_equal(ms.slabs, 3);

    log_entry(slab.id, 1, "k1", 0, 100);
    log_entry(slab.id, 2, "k2", 128, 100);
    log_entry(slab.id, 3, "k3", 256, 300);
    log_entry(slab.id, 4, "k4", 640, 100);
    log_entry(slab.id, 5, "held", 768, 100);
    log_entry(slab.id, 6, "k3", 896, 100);
    log_entry(slab.id, 7, "k7", egm__slab_log_at(SLAB_SIZE, 7) - 64, 100);
    log_entry(slab.id, 8, "k8", 1024, 4000);
    log_entry(slab.id, 9, "k9", 8192, 100);
    pool.mem[0][SLAB_BASE + egm__slab_log_at(SLAB_SIZE, 9) + 30] ^= 1; /* torn */
    pool.mem[1][SLAB_BASE + egm__slab_log_at(SLAB_SIZE, 9) + 30] ^= 1;
    log_entry(slab.id, 10, "k10", 9000 / 64 * 64, 100);

    egm_pool_reader_t reader = {.fn = pool_read};
    size_t adopted = 0, skipped = 0, recovered = 0, removed = 0;
    assert_int_equal(egm__mirror_install(m, dst.liveness, dst.segments, dst.objects, &reader, 2000,
                                         &adopted, &skipped, &recovered, &removed),
                     EGM_OK);
    assert_int_equal(recovered, 3);
    assert_int_equal(adopted, 4); /* held, k3, k8, told */
    assert_int_equal(skipped, 0);
    check(&dst);
    static const char *const absent[] = {"k1", "k2", "k4", "k7", "k9", "k10", "unlogged"};
    for (size_t i = 0; i < sizeof(absent) / sizeof(*absent); i++)
        if (egm__objects_stat(dst.objects, absent[i], strlen(absent[i]), &v) != EGM_ERR_NOT_FOUND)
            fail_msg("%s adopted from the log", absent[i]);
    assert_int_equal(egm__objects_stat(dst.objects, "held", 4, &v), EGM_OK);
    assert_int_not_equal(v.replicas[0].offset, SLAB_BASE + 768); /* the mirror's, not the log's */
    const struct {
        const char *key;
        uint64_t offset, size;
        uint64_t base;
    } want[] = {{"k3", 256, 300, SLAB_BASE},
                {"k8", 1024, 4000, SLAB_BASE},
                {"told", 0, 100, SLAB_BASE + SLAB_SIZE}};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(egm__objects_stat(dst.objects, want[i].key, strlen(want[i].key), &v),
                         EGM_OK);
        assert_int_equal(v.state, EGM_OBJECT_COMPLETE);
        assert_int_equal(v.size, want[i].size);
        assert_true(egm__id_equal(v.writer, slab_owner));
        assert_int_equal(v.soft_pin, 1);
        assert_int_equal(v.n_replicas, 2);
        for (uint32_t r = 0; r < 2; r++)
            assert_int_equal(v.replicas[r].offset, want[i].base + want[i].offset);
    }
    assert_true(pool.reads >= 1);
    egm__mirror_destroy(m);
    egm__jbuf_free(&b);
    egm__seq_set_free(&slab.seen);
    egm__master_state_cleanup(&src);
    egm__master_state_cleanup(&dst);
}

/* A removal (kind: REMOVE or VOID) at seq of the slab at base, in both
 * extents: of key's object at place (segment, offset), put with entry
 * put_seq of slab put_slab (0, 0: none). */
static void log_removal_at(uint64_t base, uint64_t id, uint64_t seq, uint8_t kind, const char *key,
                           egm_id_t segment, uint64_t offset, uint64_t put_slab, uint64_t put_seq)
{
    log_write_at(base, &(egm_slab_log_entry_t){.kind = kind,
                                               .slab_id = id,
                                               .seq = seq,
                                               .offset = offset,
                                               .segment = segment,
                                               .put_slab_id = put_slab,
                                               .put_seq = put_seq,
                                               .key = key,
                                               .key_len = strlen(key)});
}

/* Removals the pool describes (docs/ha.md "Removes the pool describes"):
 * the mirror holds "old", "outside" and "noted" (2 replicas each, put
 * before the slab); the slab's log in the pool says: 1 REMOVE old at its
 * place (its second replica's), 2 PUT old again in the slab, 3 PUT gone, 4
 * REMOVE gone (its entry 3), 5 REMOVE outside at a place it does not lie
 * (noted's), 6 PUT kept, 7 VOID kept (says nothing), 8 REMOVE noted at its
 * place (seen: the standby has what followed it), 9 REMOVE reput naming a
 * put entry of another slab at the place where entry 10 then puts reput
 * again (a Remove that found another object of the key, or none: the place
 * was taken again). Taking over: old from entry 2, not the mirror's; gone
 * absent; outside, noted, kept and reput there. With `apply` 0 the
 * removals are void entries: old is then the mirror's and gone is adopted
 * (the control: what a new leader does without them). */
static void slab_removals_case(int apply)
{
    egm_master_state_t src, dst;
    egm_segment_t *s0, *s1;
    pool_states(&src, &dst, -1, &s0, &s1);
    static const char *const keys[] = {"old", "outside", "noted"};
    egm_object_view_t v[3];
    for (int i = 0; i < 3; i++) {
        size_t len = strlen(keys[i]);
        assert_int_equal(
            egm__objects_put_start(src.objects, writer, keys[i], len, 100, 2, 0, &v[i]), EGM_OK);
        assert_int_equal(egm__objects_put_end(src.objects, writer, keys[i], len, 0), EGM_OK);
        assert_int_equal(v[i].n_replicas, 2);
        assert_true(v[i].replicas[0].offset + 100 <= SLAB_BASE);
    }
    egm_slab_t slab = {
        .id = 0x7eed,
        .owner = egm__id_random(),
        .size = SLAB_SIZE,
        .n_extents = 2,
        .logged = 1,
        .extents = {{.segment = s0, .base = SLAB_BASE}, {.segment = s1, .base = SLAB_BASE}}};
    egm_jbuf_t b = {0};
    egm__jenc_segment(&b, s0);
    egm__jenc_segment(&b, s1);
    for (int i = 0; i < 3; i++)
        egm__jenc_object(&b, egm__objects_find(src.objects, keys[i], strlen(keys[i])));
    egm__jenc_slab(&b, &slab, 30000);
    egm__jenc_slab_seen(&b, slab.id, 8);
    assert_false(b.failed);
    egm_mirror_t *m;
    assert_int_equal(egm__mirror_create(&m), EGM_OK);
    assert_int_equal(egm__mirror_apply(m, EPOCH, 1, 0, b.len, b.buf, b.len, 1000), EGM_OK);
    uint8_t removal = apply ? EGM_SLAB_LOG_REMOVE : EGM_SLAB_LOG_VOID;
    const egm_replica_view_t *old = &v[0].replicas[1], *noted = &v[2].replicas[0];
    uint64_t id = slab.id;
    log_removal_at(SLAB_BASE, id, 1, removal, "old", old->segment->desc.id, old->offset, 0, 0);
    log_entry_at(SLAB_BASE, id, 2, "old", 0, 200);
    log_entry_at(SLAB_BASE, id, 3, "gone", 256, 100);
    log_removal_at(SLAB_BASE, id, 4, removal, "gone", s1->desc.id, SLAB_BASE + 256, id, 3);
    log_removal_at(SLAB_BASE, id, 5, removal, "outside", noted->segment->desc.id, noted->offset, 0,
                   0);
    log_entry_at(SLAB_BASE, id, 6, "kept", 512, 100);
    log_removal_at(SLAB_BASE, id, 7, EGM_SLAB_LOG_VOID, "kept", s0->desc.id, SLAB_BASE + 512, id,
                   6);
    log_removal_at(SLAB_BASE, id, 8, removal, "noted", noted->segment->desc.id, noted->offset, 0,
                   0);
    log_removal_at(SLAB_BASE, id, 9, removal, "reput", s0->desc.id, SLAB_BASE + 1024, 0x1111, 5);
    log_entry_at(SLAB_BASE, id, 10, "reput", 1024, 100);

    egm_pool_reader_t reader = {.fn = pool_read};
    size_t adopted = 0, skipped = 0, recovered = 0, removed = 0;
    assert_int_equal(egm__mirror_install(m, dst.liveness, dst.segments, dst.objects, &reader, 2000,
                                         &adopted, &skipped, &recovered, &removed),
                     EGM_OK);
    check(&dst);
    egm_object_view_t got;
    assert_int_equal(egm__objects_stat(dst.objects, "old", 3, &got), EGM_OK);
    /* applied: entry 2's object (200 bytes, at the slab's start); else the mirror's */
    assert_int_equal(got.size, apply ? 200 : 100);
    assert_int_equal(got.replicas[0].offset, apply ? SLAB_BASE : v[0].replicas[0].offset);
    assert_int_equal(egm__objects_stat(dst.objects, "gone", 4, &got),
                     apply ? EGM_ERR_NOT_FOUND : EGM_OK);
    assert_int_equal(egm__objects_stat(dst.objects, "outside", 7, &got), EGM_OK);
    assert_int_equal(got.replicas[0].offset, v[1].replicas[0].offset);
    assert_int_equal(egm__objects_stat(dst.objects, "noted", 5, &got), EGM_OK);
    assert_int_equal(egm__objects_stat(dst.objects, "kept", 4, &got), EGM_OK);
    assert_int_equal(got.replicas[0].offset, SLAB_BASE + 512);
    assert_int_equal(egm__objects_stat(dst.objects, "reput", 5, &got), EGM_OK);
    assert_int_equal(got.replicas[0].offset, SLAB_BASE + 1024);
    assert_int_equal(recovered, 3);           /* old, kept and reput, or gone, kept and reput */
    assert_int_equal(removed, apply ? 1 : 0); /* the mirror's old */
    assert_int_equal(adopted, apply ? 5 : 6);
    egm__mirror_destroy(m);
    egm__jbuf_free(&b);
    egm__master_state_cleanup(&src);
    egm__master_state_cleanup(&dst);
}

/* Before a slab-log case: fresh ids, errors only; the allocations live. */
static uint64_t log_case_begin(void)
{
    egm__log_set_level(EGM_LOG_ERROR);
    writer = egm__id_random();
    owners[0] = egm__id_random();
    owners[1] = egm__id_random();
    return egm__alloc_live_count();
}

static void test_slab_log_removals(void **state)
{
    (void)state;
    uint64_t live = log_case_begin();
    slab_removals_case(1);
    slab_removals_case(0);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_slab_logs_read(void **state)
{
    (void)state;
    uint64_t live = log_case_begin();
    slab_logs_case(-1);
    slab_logs_case(0); /* the first extent's provider does not answer */
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handover, setup, teardown),
        cmocka_unit_test(test_slab_logs_read),
        cmocka_unit_test(test_slab_log_removals),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_overlaps, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_misaligned, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
