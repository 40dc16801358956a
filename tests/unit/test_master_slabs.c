/* Client-side allocation in the master, without sockets: a slab granted
 * whole, objects committed from it (visible at once, freed alone), refusals
 * that change nothing (overlap, misaligned, past the end, another client's,
 * returned or expired slab), a key that exists giving its range back, the
 * lease's end returning uncommitted space, slabs over two segments, a segment
 * unmounted under an open slab, slabs with a lost extent named to the writer,
 * the size a grant gets, the cap on the
 * pieces a slab is cut into, when a slab's log entries let a Commit be
 * answered before the standbys confirm it, and when a grant is answered
 * before they hold it (and the leader's fence far enough). Every test ends
 * with the index's own consistency check (allocators = objects + held +
 * slab pieces). Time is an argument, so nothing sleeps. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/journal.h"
#include "master/master_int.h"
#include "master/repair.h"
#include "master/slabs.h"
#include "support/batch_answer.h"
#include "support/journal_standby.h"

#define LEASE 30000u /* put_start_discard_timeout: the slab lease */

static uint64_t live_at_start;
static egm_master_state_t st;
static egm_id_t provider, writer, other;

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000}; /* no expiry */
    egm__objects_params_default(&sp.objects);
    sp.objects.pending_timeout_ms = LEASE;
    sp.objects.eviction_high_watermark = 1.0; /* the tests fill segments to the brim */
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    provider = egm__id_random();
    writer = egm__id_random();
    other = egm__id_random();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (egm__objects_check(st.objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
    egm__master_state_cleanup(&st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

/* host: the provider's host id (NULL: none given). */
static egm_segment_t *mount_on(egm_id_t owner, uint64_t size, const char *host)
{
    static int counter;
    char name[32];
    snprintf(name, sizeof(name), "slab/%d", counter++);
    egm_segment_params_t p = {.id = egm__id_random(),
                              .size = size,
                              .name = name,
                              .tcp_endpoint = "127.0.0.1:1",
                              .host_id = host};
    assert_int_equal(egm__liveness_mount(st.liveness, owner, &p, 0), EGM_OK);
    return egm__segment_table_find(st.segments, p.id);
}

static egm_segment_t *mount_as(egm_id_t owner, uint64_t size)
{
    return mount_on(owner, size, NULL);
}

static egm_segment_t *mount(uint64_t size)
{
    return mount_as(provider, size);
}

static uint64_t used(const egm_segment_t *seg)
{
    egm_allocator_stats_t s;
    egm__allocator_stats(seg->allocator, &s);
    return s.used;
}

static egm_object_index_stats_t stats(void)
{
    egm_object_index_stats_t s;
    egm__objects_stats(st.objects, &s);
    return s;
}

static void check(void)
{
    if (egm__objects_check(st.objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
}

static egm_status_t grant(egm_id_t client, uint64_t size, uint64_t min_size, uint32_t replicas,
                          uint64_t now, egm_slab_view_t *slab)
{
    egm_put_config_t cfg = {.replica_num = replicas};
    return egm__objects_slab_grant(st.objects, client, size, min_size, 0, 0, &cfg, now, slab);
}

/* The slabs the last commit_as named as degraded. */
static uint64_t degraded[4];
static size_t n_degraded;

static egm_status_t commit_as(egm_id_t client, const char *key, uint64_t size, uint64_t slab,
                              uint64_t offset, uint64_t now)
{
    egm_put_config_t cfg = {.replica_num = 1};
    size_t len = strlen(key);
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = client,
                             .sizes = &size,
                             .slab_ids = &slab,
                             .offsets = &offset,
                             .config = &cfg,
                             .now_ms = now,
                             .n = 1,
                             .keys = &key,
                             .key_lens = &len,
                             .done = egm_test_record_answer,
                             .degraded_slabs = degraded,
                             .degraded_max = 4,
                             .n_degraded_p = &n_degraded};
    egm_test_answered = EGM_INPROGRESS;
    n_degraded = 99;
    assert_int_equal(egm__objects_batch(st.objects, &b), EGM_OK);
    return egm_test_answered;
}

static egm_status_t commit(const char *key, uint64_t size, uint64_t slab, uint64_t offset,
                           uint64_t now)
{
    return commit_as(writer, key, size, slab, offset, now);
}

static void test_commit_lifecycle(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_slab_view_t slab;
    egm_object_view_t obj;

    assert_int_equal(grant(writer, 64 << 10, 1024, 1, 0, &slab), EGM_OK);
    assert_int_not_equal(slab.id, 0);
    assert_int_equal(slab.size, 64 << 10);
    assert_int_equal(slab.lease_ms, LEASE);
    assert_int_equal(slab.n_extents, 1);
    assert_ptr_equal(slab.extents[0].segment, seg);
    uint64_t base = slab.extents[0].offset;
    assert_int_equal(used(seg), 64 << 10); /* the whole slab counts as used */
    assert_int_equal(stats().slabs, 1);
    assert_int_equal(stats().slab_bytes, 64 << 10);

    /* Committed objects are COMPLETE at once, where the writer put them. */
    assert_int_equal(commit("a", 100, slab.id, 0, 0), EGM_OK);
    assert_int_equal(commit("b", 1000, slab.id, 128, 0), EGM_OK);
    assert_int_equal(egm__objects_get_replicas(st.objects, "b", 1, 0, &obj), EGM_OK);
    assert_int_equal(obj.state, EGM_OBJECT_COMPLETE);
    assert_int_equal(obj.size, 1000);
    assert_int_equal(obj.n_replicas, 1);
    assert_int_equal(obj.replicas[0].offset, base + 128);
    assert_int_equal(stats().slab_bytes, (64 << 10) - 128 - 1024);
    assert_int_equal(stats().commits_total, 2);
    check();

    /* Refusals change nothing. */
    egm_object_index_stats_t before = stats();
    assert_int_equal(commit("c", 64, slab.id, 0, 0), EGM_ERR_INVALID_ARG);    /* "a" is there */
    assert_int_equal(commit("c", 64, slab.id, 1024, 0), EGM_ERR_INVALID_ARG); /* inside "b" */
    assert_int_equal(commit("c", 64, slab.id, 4100, 0), EGM_ERR_INVALID_ARG); /* misaligned */
    assert_int_equal(commit("c", 128, slab.id, (64 << 10) - 64, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(commit("c", 64, slab.id, UINT64_MAX - 63, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(commit("c", 0, slab.id, 4096, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(commit("c", 64, slab.id + 1, 4096, 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(commit_as(other, "c", 64, slab.id, 4096, 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(stats().slab_bytes, before.slab_bytes);
    assert_int_equal(stats().objects, 2);
    assert_int_equal(used(seg), 64 << 10);
    check();

    /* A key that exists: EXISTS, and the range it was written to is freed. */
    assert_int_equal(commit("a", 100, slab.id, 8192, 0), EGM_ERR_EXISTS);
    assert_int_equal(used(seg), (64 << 10) - 128);
    check();

    /* A committed object is freed alone; the slab keeps the rest. */
    assert_int_equal(egm__objects_remove(st.objects, "b", 1, 0, 20000, NULL), EGM_OK);
    assert_int_equal(used(seg), (64 << 10) - 128 - 1024);
    check();

    /* Returned: its uncommitted space goes, the objects stay; then refused. */
    assert_int_equal(egm__objects_slab_return(st.objects, other, slab.id, 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_OK);
    assert_int_equal(used(seg), 128);
    assert_int_equal(stats().slabs, 0);
    assert_int_equal(commit("d", 64, slab.id, 16384, 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__objects_get_replicas(st.objects, "a", 1, 0, &obj), EGM_OK);
    assert_int_equal(egm__objects_remove(st.objects, "a", 1, 0, 20000, NULL), EGM_OK);
    assert_int_equal(used(seg), 0);
}

static egm_status_t results[8];

static egm_status_t record_each(void *arg, size_t i, egm_status_t s, const egm_object_view_t *view)
{
    (void)arg;
    (void)view;
    results[i] = s;
    return EGM_OK;
}

/* One Commit (and one Remove) naming the same key several times: the first
 * commit takes the key, the later ones answer EXISTS and give their ranges
 * back; the batch looks a key up again only when an earlier key of its run
 * had the same hash, so this is the case that must still see the earlier
 * commit. */
static void test_commit_batch_repeats(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_slab_view_t slab;
    const char *keys[6] = {"x", "y", "x", "z", "y", "x"};
    size_t lens[6];
    uint64_t sizes[6], ids[6], offsets[6];
    egm_put_config_t cfg = {.replica_num = 1};

    assert_int_equal(grant(writer, 64 << 10, 1024, 1, 0, &slab), EGM_OK);
    for (size_t i = 0; i < 6; i++) {
        lens[i] = 1;
        sizes[i] = 100;
        ids[i] = slab.id;
        offsets[i] = i * 128;
    }
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = writer,
                             .sizes = sizes,
                             .slab_ids = ids,
                             .offsets = offsets,
                             .config = &cfg,
                             .now_ms = 0,
                             .n = 6,
                             .keys = keys,
                             .key_lens = lens,
                             .done = record_each};
    assert_int_equal(egm__objects_batch(st.objects, &b), EGM_OK);
    egm_status_t want[6] = {EGM_OK, EGM_OK, EGM_ERR_EXISTS, EGM_OK, EGM_ERR_EXISTS, EGM_ERR_EXISTS};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(results[i], want[i]);
    assert_int_equal(stats().objects, 3);
    assert_int_equal(used(seg), (64 << 10) - 3 * 128); /* the repeats' ranges went back */
    check();

    /* Remove of x, x, y: the second x is gone already. */
    egm_objects_batch_t r = {.op = EGM_OBJECTS_REMOVE,
                             .now_ms = 20000,
                             .n = 3,
                             .keys = keys,
                             .key_lens = lens,
                             .done = record_each};
    const char *rkeys[3] = {"x", "x", "y"};
    r.keys = rkeys;
    assert_int_equal(egm__objects_batch(st.objects, &r), EGM_OK);
    assert_int_equal(results[0], EGM_OK);
    assert_int_equal(results[1], EGM_ERR_NOT_FOUND);
    assert_int_equal(results[2], EGM_OK);
    assert_int_equal(stats().objects, 1);
    assert_int_equal(used(seg), (64 << 10) - 5 * 128);
    check();
}

static egm_status_t stop_after_first(void *arg, size_t i, egm_status_t s,
                                     const egm_object_view_t *view)
{
    (void)view;
    results[i] = s;
    return ++*(int *)arg == 1 ? EGM_ERR_INTERNAL : EGM_OK;
}

/* A Commit's ranges are claimed before its keys are taken; a batch stopped
 * by its done() after one key gives the other keys' ranges back to the pool
 * (the allocators hold no range that no object, slab or held extent owns). */
static void test_commit_batch_stopped(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_slab_view_t slab;
    const char *keys[4] = {"k0", "k1", "k2", "k3"};
    size_t lens[4] = {2, 2, 2, 2};
    uint64_t sizes[4] = {100, 100, 100, 100}, ids[4], offsets[4] = {0, 128, 256, 384};
    egm_put_config_t cfg = {.replica_num = 1};
    int calls = 0;

    assert_int_equal(grant(writer, 64 << 10, 1024, 1, 0, &slab), EGM_OK);
    for (size_t i = 0; i < 4; i++)
        ids[i] = slab.id;
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = writer,
                             .sizes = sizes,
                             .slab_ids = ids,
                             .offsets = offsets,
                             .config = &cfg,
                             .n = 4,
                             .keys = keys,
                             .key_lens = lens,
                             .done = stop_after_first,
                             .arg = &calls};
    assert_int_equal(egm__objects_batch(st.objects, &b), EGM_ERR_INTERNAL);
    assert_int_equal(calls, 1);
    assert_int_equal(stats().objects, 1);
    assert_int_equal(stats().slab_bytes, (64 << 10) - 4 * 128);
    assert_int_equal(used(seg), (64 << 10) - 3 * 128);
    check();
}

/* Commits in any order cut the slab into pieces; what was never committed
 * returns whole at the lease's end, and a commit after it is refused. */
static void test_out_of_order_and_expiry(void **state)
{
    (void)state;
    egm_segment_t *seg = mount(1 << 20);
    egm_slab_view_t slab;

    assert_int_equal(grant(writer, 16 << 10, 64, 1, 0, &slab), EGM_OK);
    assert_int_equal(commit("k3", 1000, slab.id, 3072, 0), EGM_OK);
    assert_int_equal(commit("k1", 1000, slab.id, 1024, 0), EGM_OK);
    assert_int_equal(commit("k0", 1, slab.id, 0, 0), EGM_OK);
    assert_int_equal(commit("k9", 64, slab.id, (16 << 10) - 64, 0), EGM_OK); /* the last bytes */
    check();
    assert_int_equal(stats().slab_bytes, (16 << 10) - 2 * 1024 - 64 - 64);

    egm__master_state_tick(&st, LEASE - 1); /* the lease has not ended */
    assert_int_equal(stats().slabs, 1);
    assert_int_equal(egm__liveness_ping(st.liveness, provider, LEASE), EGM_OK);
    egm__master_state_tick(&st, LEASE);
    assert_int_equal(stats().slabs, 0);
    assert_int_equal(stats().slab_expired_total, 1);
    assert_int_equal(used(seg), 2 * 1024 + 64 + 64); /* the four objects */
    assert_int_equal(commit("k5", 64, slab.id, 8192, LEASE), EGM_ERR_NOT_FOUND);
    check();
}

/* replica_num 2: one extent on each of two segments, every object at the same
 * offset in both; a segment unmounted under the slab leaves one. */
static void test_two_extents_and_unmount(void **state)
{
    (void)state;
    egm_segment_t *s0 = mount(1 << 20);
    egm_segment_t *s1 = mount_as(other, 1 << 20); /* replicas go to distinct providers */
    egm_slab_view_t slab;
    egm_object_view_t obj;

    assert_int_equal(grant(writer, 8192, 64, 2, 0, &slab), EGM_OK);
    assert_int_equal(slab.n_extents, 2);
    assert_ptr_not_equal(slab.extents[0].segment, slab.extents[1].segment);
    assert_int_equal(commit("x", 500, slab.id, 512, 0), EGM_OK);
    assert_int_equal(n_degraded, 0); /* whole */
    assert_int_equal(egm__objects_get_replicas(st.objects, "x", 1, 0, &obj), EGM_OK);
    assert_int_equal(obj.n_replicas, 2);
    for (int r = 0; r < 2; r++) {
        int e = obj.replicas[r].segment == slab.extents[0].segment ? 0 : 1;
        assert_int_equal(obj.replicas[r].offset, slab.extents[e].offset + 512);
    }
    assert_int_equal(used(s0), 8192);
    assert_int_equal(used(s1), 8192);
    check();

    egm_segment_t *gone = slab.extents[0].segment;
    egm_segment_t *kept = slab.extents[1].segment;
    assert_int_equal(egm__liveness_unmount(st.liveness, gone->desc.owner, gone->desc.id, 0),
                     EGM_OK);
    check();
    egm_repair_stats_t rs;
    egm__repair_queue_stats(egm__objects_repair_queue(st.objects), &rs);
    assert_int_equal(rs.under_replicated, 1); /* "x" lost a replica */
    assert_int_equal(commit("y", 64, slab.id, 0, 0), EGM_OK);
    assert_int_equal(n_degraded, 1); /* the writer is told to place nothing more there */
    assert_true(degraded[0] == slab.id);
    assert_int_equal(egm__objects_get_replicas(st.objects, "y", 1, 0, &obj), EGM_OK);
    assert_int_equal(obj.n_replicas, 1);
    assert_ptr_equal(obj.replicas[0].segment, kept);
    /* "y" was placed with two (the slab's extents) and has one: queued for
     * re-replication as "x" is, not left with one copy for good. */
    egm__repair_queue_stats(egm__objects_repair_queue(st.objects), &rs);
    assert_int_equal(rs.under_replicated, 2);
    check();
    assert_int_equal(egm__objects_slab_return(st.objects, writer, slab.id, 0), EGM_OK);
    assert_int_equal(used(kept), 512 + 64); /* "x" and "y" */
    check();
}

/* A Commit names each slab of its keys that has an extent on a provider
 * presumed gone, once, and no healthy one; within degraded_max. */
static void test_degraded_slabs_named(void **state)
{
    (void)state;
    egm_segment_t *s0 = mount(1 << 20);
    egm_segment_t *s1 = mount_as(other, 1 << 20);
    egm_slab_view_t a, b, c;
    egm_object_view_t obj;

    assert_int_equal(grant(writer, 8192, 64, 2, 0, &a), EGM_OK);
    assert_int_equal(a.n_extents, 2);
    assert_int_equal(grant(writer, 8192, 64, 2, 0, &c), EGM_OK);
    assert_int_equal(c.n_extents, 2);
    atomic_store(&s0->unreachable, 1); /* its provider's connections closed */
    assert_int_equal(grant(writer, 8192, 64, 1, 0, &b), EGM_OK);
    assert_int_equal(b.n_extents, 1);
    assert_ptr_equal(b.extents[0].segment, s1); /* not on a provider presumed gone */

    const char *keys[4] = {"a1", "b1", "a2", "b2"};
    size_t lens[4] = {2, 2, 2, 2};
    uint64_t sizes[4] = {64, 64, 64, 64}, ids[4] = {a.id, b.id, a.id, b.id};
    uint64_t offsets[4] = {0, 0, 64, 64}, named[4] = {0};
    size_t n_named = 99;
    egm_put_config_t cfg = {.replica_num = 2};
    egm_objects_batch_t batch = {.op = EGM_OBJECTS_COMMIT,
                                 .client = writer,
                                 .sizes = sizes,
                                 .slab_ids = ids,
                                 .offsets = offsets,
                                 .config = &cfg,
                                 .now_ms = 0,
                                 .n = 4,
                                 .keys = keys,
                                 .key_lens = lens,
                                 .done = record_each,
                                 .degraded_slabs = named,
                                 .degraded_max = 4,
                                 .n_degraded_p = &n_named};
    assert_int_equal(egm__objects_batch(st.objects, &batch), EGM_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(results[i], EGM_OK);
    assert_int_equal(n_named, 1); /* a, once (two runs of its keys); b is whole */
    assert_true(named[0] == a.id);
    /* "a1" keeps only its reachable replica, and is queued for repair */
    assert_int_equal(egm__objects_get_replicas(st.objects, "a1", 2, 0, &obj), EGM_OK);
    assert_int_equal(obj.n_replicas, 1);
    assert_ptr_equal(obj.replicas[0].segment, s1);
    check();
    /* Room for one of two degraded slabs: the later one (the writer's open
     * slab comes last); none: nothing written. */
    const char *more[2] = {"a3", "c1"};
    uint64_t more_ids[2] = {a.id, c.id}, more_offsets[2] = {128, 0};
    batch.keys = more;
    batch.n = 2;
    batch.slab_ids = more_ids;
    batch.offsets = more_offsets;
    batch.degraded_max = 1;
    assert_int_equal(egm__objects_batch(st.objects, &batch), EGM_OK);
    assert_int_equal(results[0], EGM_OK);
    assert_int_equal(results[1], EGM_OK);
    assert_int_equal(n_named, 1);
    assert_true(named[0] == c.id);
    const char *last[1] = {"a4"};
    uint64_t last_id[1] = {a.id}, last_offset[1] = {192};
    batch.keys = last;
    batch.n = 1;
    batch.slab_ids = last_id;
    batch.offsets = last_offset;
    batch.degraded_max = 0;
    named[0] = 0;
    assert_int_equal(egm__objects_batch(st.objects, &batch), EGM_OK);
    assert_int_equal(results[0], EGM_OK);
    assert_int_equal(n_named, 0);
    assert_true(named[0] == 0);
    atomic_store(&s0->unreachable, 0);
    check();
}

/* A grant gets what it asks up to a sixteenth of the capacity; only its
 * minimum when the rest does not fit without evicting; eviction only for the
 * minimum; NO_SPACE when nothing may go. */
static void test_grant_sizes(void **state)
{
    (void)state;
    egm_slab_view_t slab, small, big;

    assert_int_equal(grant(writer, 4096, 64, 1, 0, &slab), EGM_ERR_NO_SPACE); /* no segment */
    assert_int_equal(grant(writer, 4096, 0, 1, 0, &slab), EGM_ERR_INVALID_ARG);
    egm_segment_t *seg = mount(1 << 20);
    assert_int_equal(grant(writer, 100 << 20, 1000, 1, 0, &slab), EGM_OK);
    assert_int_equal(slab.size, (1 << 20) / 16);
    assert_int_equal(grant(writer, 10, 100, 1, 0, &small), EGM_OK); /* at least the minimum */
    assert_int_equal(small.size, 128);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, small.id, 0), EGM_OK);
    /* A committed object leaves 32 KiB free: a grant wanting 64 KiB gets its
     * minimum, without evicting. */
    uint64_t rest = (1 << 20) - (1 << 20) / 16 - (32 << 10);
    assert_int_equal(grant(writer, rest, rest, 1, 0, &big), EGM_OK);
    assert_int_equal(big.size, rest);
    assert_int_equal(commit("big", rest, big.id, 0, 0), EGM_OK);
    assert_int_equal(grant(writer, 1 << 20, 64, 1, 0, &small), EGM_OK);
    assert_int_equal(small.size, 64);
    assert_int_equal(egm__objects_exist(st.objects, "big", 3, 0, NULL), EGM_OK);
    /* 64 KiB more needs eviction: within eviction_min_residency_ms of its
     * commit nothing may go (NO_SPACE); later "big" is evicted for it. */
    assert_int_equal(grant(writer, 64 << 10, 64 << 10, 1, 0, &big), EGM_ERR_NO_SPACE);
    if (grant(writer, 64 << 10, 64 << 10, 1, 15000, &big) != EGM_OK)
        fail_msg("grant: %s", egm_last_error());
    assert_int_equal(big.size, 64 << 10);
    assert_int_equal(egm__objects_exist(st.objects, "big", 3, 15000, NULL), EGM_ERR_NOT_FOUND);
    assert_true(used(seg) <= (1 << 20));
    check();
}

/* Claims that each cut a piece in two stop at EGM_SLAB_PIECES_MAX pieces
 * (refused, nothing changed); a claim that cuts nothing more still works. */
static void test_pieces_capped(void **state)
{
    (void)state;
    mount(16 << 20);
    egm_slab_view_t slab;
    char key[32];

    assert_int_equal(grant(writer, 1 << 20, 1 << 20, 1, 0, &slab), EGM_OK);
    for (unsigned k = 0; k + 1 < EGM_SLAB_PIECES_MAX; k++) {
        snprintf(key, sizeof(key), "p/%u", k);
        assert_int_equal(commit(key, 64, slab.id, 256 * (uint64_t)k + 128, 0), EGM_OK);
    }
    egm_object_index_stats_t before = stats();
    assert_int_equal(
        commit("p/over", 64, slab.id, 256 * (uint64_t)(EGM_SLAB_PIECES_MAX - 1) + 128, 0),
        EGM_ERR_INVALID_ARG);
    assert_int_equal(stats().slab_bytes, before.slab_bytes);
    assert_int_equal(stats().objects, before.objects);
    assert_int_equal(commit("p/edge", 64, slab.id, 0, 0), EGM_OK); /* the first piece's head */
    check();
}

/* A journal with the standby sb in sync (that acknowledged nothing), told the
 * index's changes; journal_gone undoes it. */
static egm_journal_t *journal_in_sync(egm_test_standby_t *sb)
{
    egm_journal_t *j;
    assert_int_equal(egm__journal_create(&j), EGM_OK);
    egm_test_standby_follow(sb, j, 1, 1); /* one op a batch: acknowledged up to any op */
    egm__objects_set_journal(st.objects, j);
    return j;
}

static void journal_gone(egm_test_standby_t *sb)
{
    egm__objects_set_journal(st.objects, NULL);
    egm_journal_t *j = sb->j;
    egm_test_standby_leave(sb);
    egm__journal_destroy(j);
}

/* A slab's log entries noted (egm__objects_slab_seen): without a standby
 * every key with an entry may be answered at once but the slab's first; with
 * a standby in sync, no Commit in a slab is until the standby acknowledged the
 * slab's first entry, however many came after it (two writers' threads);
 * a key without an entry, or a slab unknown, never is. */
static void test_log_seen_waits_for_first(void **state)
{
    (void)state;
    uint64_t wait_pos;
    mount(1 << 20);
    egm_slab_view_t s1, s2;
    assert_int_equal(grant(writer, 64 << 10, 4096, 1, 0, &s1), EGM_OK);
    uint64_t ids[2] = {s1.id, s1.id}, seqs[2] = {1, 2};
    /* No journal: only the slab's first waits (nothing to wait for, but the
     * rule is the same). */
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs, NULL, &wait_pos), 0);
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs + 1, NULL, &wait_pos),
                     1);
    uint64_t none = 0, unknown = 12345;
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, &none, NULL, &wait_pos), 0);
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, &unknown, seqs, NULL, &wait_pos),
                     0);

    /* A standby in sync that has not acknowledged the first entry. */
    egm_test_standby_t sb = {0};
    egm_journal_t *j = journal_in_sync(&sb);
    assert_int_equal(grant(writer, 64 << 10, 4096, 1, 0, &s2), EGM_OK);
    ids[0] = ids[1] = s2.id;
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs, NULL, &wait_pos), 0);
    uint64_t first = egm__journal_take_position(j);
    assert_true(first > 0);
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs + 1, NULL, &wait_pos),
                     0);
    uint64_t third = 3;
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, &third, NULL, &wait_pos),
                     0);
    egm__journal_take_position(j);
    egm_test_standby_ack_to(&sb, first); /* the standby has the first entry */
    uint64_t fourth = 4;
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, &fourth, NULL, &wait_pos),
                     1);
    egm__journal_take_position(j);
    /* A slab granted for a writer that keeps its log (SlabGrant `log`): the
     * standbys read that log from the grant on (its reply waited for them),
     * so its first entry needs no acknowledgement either. */
    egm_put_config_t cfg = {.replica_num = 1};
    egm_slab_view_t s3;
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, 64 << 10, 4096, 1, 0, &cfg, 0, &s3), EGM_OK);
    egm__journal_take_position(j);
    ids[0] = s3.id;
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs, NULL, &wait_pos), 1);
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, &none, NULL, &wait_pos), 0);
    egm__journal_take_position(j);
    journal_gone(&sb);
}

/* The standby acknowledges everything journaled so far. */
static void ack_all(egm_test_standby_t *sb)
{
    uint64_t end, confirmed;
    egm__journal_take_position(sb->j);
    egm_test_standby_take_all(sb);
    assert_int_equal(egm__journal_marks(sb->j, &end, &confirmed), 1);
    assert_true(confirmed == end);
}

/* A grant for the writer on host-a, where the early grants' tests mount. */
static egm_slab_view_t early_grant(uint64_t size, int log, int early_ok)
{
    egm_put_config_t cfg = {.replica_num = 1, .writer_host_id = "host-a"};
    egm_slab_view_t v;
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, size, size, log, early_ok, &cfg, 0, &v),
        EGM_OK);
    return v;
}

/* A leader answers a grant early only while its fence is more than the
 * writer's placing bound plus its copies' allowance away (1000 ms): never
 * when it does not lead (fence 0), nor at the bound itself. */
static void test_early_fence(void **state)
{
    (void)state;
    uint64_t now = 50000, bound = EGM_SLAB_EARLY_PLACE_MS + EGM_SLAB_EARLY_COPY_MS;
    assert_int_equal(bound, 1000);
    assert_int_equal(egm__slab_early_fence_ok(now + bound + 1, now), 1);
    assert_int_equal(egm__slab_early_fence_ok(now + 60000, now), 1);
    assert_int_equal(egm__slab_early_fence_ok(now + bound, now), 0);
    assert_int_equal(egm__slab_early_fence_ok(now + EGM_SLAB_EARLY_PLACE_MS, now), 0);
    assert_int_equal(egm__slab_early_fence_ok(now - 1, now), 0); /* passed */
    assert_int_equal(egm__slab_early_fence_ok(0, now), 0);       /* not leading */
}

/* A grant answered before the standbys hold it (docs/ha.md "Grants the
 * standbys do not hold yet"): only with a standby in sync, asked for, for a
 * writer that keeps the slab's log on the host of its extents, and for at
 * most EGM_SLAB_EARLY_MAX_BYTES;
 * never over space whose free the standby has not confirmed (a returned
 * slab's, a removed object's) until it has. A Commit into it waits for its
 * grant (wait_pos) until the standby has that, then for nothing. */
static void test_early_grants(void **state)
{
    (void)state;
    uint64_t wait_pos;
    mount_on(provider, 1 << 20, "host-a");
    egm_slab_view_t a = early_grant(64 << 10, 1, 1);
    assert_int_equal(a.early, 0); /* no journal: nothing would wait */
    assert_int_equal(egm__objects_slab_return(st.objects, writer, a.id, 0), EGM_OK);

    egm_test_standby_t sb = {0};
    egm_journal_t *j = journal_in_sync(&sb);
    ack_all(&sb);
    a = early_grant(64 << 10, 1, 0); /* not asked for */
    assert_int_equal(a.early, 0);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, a.id, 0), EGM_OK);
    ack_all(&sb);
    a = early_grant(64 << 10, 0, 1); /* no log kept */
    assert_int_equal(a.early, 0);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, a.id, 0), EGM_OK);
    ack_all(&sb);
    /* A writer on another host: its copies go over the network. */
    egm_put_config_t away = {.replica_num = 1, .writer_host_id = "host-b"};
    assert_int_equal(
        egm__objects_slab_grant(st.objects, writer, 64 << 10, 64 << 10, 1, 1, &away, 0, &a),
        EGM_OK);
    assert_int_equal(a.early, 0);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, a.id, 0), EGM_OK);
    ack_all(&sb);
    assert_int_equal(stats().slab_grants_early_total, 0);

    a = early_grant(64 << 10, 1, 1);
    assert_int_equal(a.early, 1);
    assert_int_equal(stats().slab_grants_early_total, 1);
    uint64_t grant_pos = egm__journal_take_position(j);
    assert_true(grant_pos > 0);
    uint64_t ids[1] = {a.id}, seqs[2] = {1, 2};
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs, NULL, &wait_pos), 1);
    assert_true(wait_pos == grant_pos);
    egm__journal_take_position(j);
    egm_test_standby_ack_to(&sb, grant_pos); /* the standby holds the grant */
    assert_int_equal(egm__objects_slab_seen(st.objects, writer, 1, ids, seqs + 1, NULL, &wait_pos),
                     1);
    assert_true(wait_pos == 0);

    /* Its space freed (returned) and not confirmed: a grant of it waits... */
    ack_all(&sb);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, a.id, 0), EGM_OK);
    egm_slab_view_t b = early_grant(64 << 10, 1, 1);
    assert_true(b.extents[0].offset == a.extents[0].offset);
    assert_int_equal(b.early, 0);
    /* ... until the standby confirmed the free. */
    assert_int_equal(egm__objects_slab_return(st.objects, writer, b.id, 0), EGM_OK);
    ack_all(&sb);
    egm_slab_view_t c = early_grant(64 << 10, 1, 1);
    assert_true(c.extents[0].offset == a.extents[0].offset);
    assert_int_equal(c.early, 1);

    /* A removed object's space likewise. */
    assert_int_equal(commit("early/k", 4096, c.id, 0, 0), EGM_OK);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, c.id, 0), EGM_OK);
    ack_all(&sb);
    assert_int_equal(egm__objects_remove(st.objects, "early/k", 7, 0, 20000, NULL), EGM_OK);
    egm_slab_view_t d = early_grant(4096, 1, 1);
    assert_true(d.extents[0].offset == c.extents[0].offset);
    assert_int_equal(d.early, 0);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, d.id, 0), EGM_OK);
    ack_all(&sb);
    d = early_grant(4096, 1, 1);
    assert_int_equal(d.early, 1);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, d.id, 0), EGM_OK);

    /* More than EGM_SLAB_EARLY_MAX_BYTES: its copies could take too long. */
    mount_on(provider, EGM_SLAB_EARLY_MAX_BYTES * 2, "host-a");
    ack_all(&sb);
    egm_slab_view_t big = early_grant(EGM_SLAB_EARLY_MAX_BYTES + 4096, 1, 1);
    assert_int_equal(big.early, 0);
    assert_int_equal(egm__objects_slab_return(st.objects, writer, big.id, 0), EGM_OK);
    assert_int_equal(stats().slab_grants_early_total, 3);
    egm__journal_take_position(j);
    journal_gone(&sb);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_commit_lifecycle, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_batch_repeats, setup, teardown),
        cmocka_unit_test_setup_teardown(test_commit_batch_stopped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_out_of_order_and_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_extents_and_unmount, setup, teardown),
        cmocka_unit_test_setup_teardown(test_degraded_slabs_named, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grant_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pieces_capped, setup, teardown),
        cmocka_unit_test_setup_teardown(test_log_seen_waits_for_first, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_fence, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_grants, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
