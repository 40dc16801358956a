/* Space freed and given again, seen by a new leader (docs/ha.md "Grants the
 * standbys do not hold yet"), without sockets: a writer commits key K from a
 * logged slab with its log entry in the pool; K is removed (by another
 * request, before the Commit's own request noted the entry seen); the standby
 * confirms what was journaled; K's range is granted to another writer, whose
 * bytes land there; the leader dies before the standby holds that grant. The
 * standby, installed as the new leader reading the slab logs from the pool,
 * must not bring K back over the new writer's bytes: the entry's SLAB_SEEN
 * is journaled with K's OBJECT, before K can be removed. Both with the grant
 * answered before the standby held it and with one it confirmed first. Time
 * is an argument, so nothing sleeps. */
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
#include "master/commit_seqs.h"
#include "master/journal.h"
#include "master/master_int.h"
#include "master/mirror.h"
#include "master/slabs.h"
#include "support/batch_answer.h"

#define SEG (16u << 10)
#define KEY_SIZE 4096u

static uint8_t pool[SEG]; /* the segment's bytes, as the new leader reads them */
static egm_id_t seg_id;

static egm_status_t pool_read(void *arg, const egm_segment_desc_t *segment, uint64_t offset,
                              void *buf, size_t len)
{
    (void)arg;
    if (!egm__id_equal(segment->id, seg_id) || offset > SEG || len > SEG - offset)
        return egm__set_error(EGM_ERR_IO, "not this test's segment");
    memcpy(buf, pool + offset, len);
    return EGM_OK;
}

static void state_init(egm_master_state_t *st)
{
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000};
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = 10000;
    sp.objects.pending_timeout_ms = 30000;
    sp.objects.eviction_high_watermark = 1.0;
    assert_int_equal(egm__master_state_init(st, &sp), EGM_OK);
}

/* The standby receives, applies and acknowledges everything journaled. */
static void standby_takes_all(egm_journal_t *j, egm_journal_follower_t *f, egm_mirror_t *m,
                              uint64_t now)
{
    for (;;) {
        uint8_t *ops;
        size_t len;
        uint64_t from, to;
        egm_status_t s = egm__journal_next(j, f, 0, 1 << 20, &ops, &len, &from, &to);
        if (s == EGM_ERR_TIMEOUT)
            return;
        assert_int_equal(s, EGM_OK);
        assert_int_equal(egm__mirror_apply(m, 1, from == 0, from, to, ops, len, now), EGM_OK);
        egm_free(ops);
        egm__journal_acked(j, f, to);
    }
}

/* How K's Commit names its log entry: written whole (log_seqs), written on
 * some extents only (torn_log_seqs: the write failed), or a failed write the
 * client does not report (as before torn_log_seqs: the control, where the
 * new leader does bring K back). */
typedef enum { ENTRY_WHOLE, ENTRY_TORN, ENTRY_UNREPORTED } entry_t;

static void removed_key_stays_removed(int early, entry_t entry)
{
    egm_master_state_t lead, next;
    state_init(&lead);
    state_init(&next);
    egm_journal_t *j;
    egm_journal_follower_t *f;
    uint64_t pos;
    assert_int_equal(egm__journal_create(&j), EGM_OK);
    assert_int_equal(egm__journal_follow(j, &f, &pos), EGM_OK);
    egm__journal_set_in_sync(j, f);
    egm__objects_set_journal(lead.objects, j);
    egm__segment_table_set_journal(lead.segments, j);
    egm_mirror_t *m;
    assert_int_equal(egm__mirror_create(&m), EGM_OK);

    egm_id_t provider = egm__id_random(), writer = egm__id_random(), other = egm__id_random();
    egm_segment_params_t p = {.id = egm__id_random(),
                              .size = SEG,
                              .name = "P0/0",
                              .tcp_endpoint = "127.0.0.1:1",
                              .host_id = "host-a"};
    seg_id = p.id;
    memset(pool, 0, sizeof(pool));
    assert_int_equal(egm__liveness_mount(lead.liveness, provider, &p, 0), EGM_OK);

    /* The writer's slab is the whole segment, logged; the standby holds it. */
    egm_put_config_t cfg = {.replica_num = 1, .writer_host_id = "host-a"};
    egm_slab_view_t s1, s2;
    assert_int_equal(egm__objects_slab_grant(lead.objects, writer, SEG, SEG, 1, 0, &cfg, 0, &s1),
                     EGM_OK);
    egm__journal_take_position(j);
    standby_takes_all(j, f, m, 0);
    /* K at the slab's start, its entry (seq 1) written in the pool. */
    egm_slab_log_entry_t e = {
        .slab_id = s1.id, .seq = 1, .offset = 0, .size = KEY_SIZE, .key = "K", .key_len = 1};
    assert_int_equal(
        egm__slab_log_encode(&e, pool + s1.extents[0].offset + egm__slab_log_at(SEG, 1)), EGM_OK);
    uint64_t size = KEY_SIZE, offset = 0, slab = s1.id, seq = 1, *seen = NULL;
    /* What the master notes seen, as the Commit handler derives it. */
    if (entry != ENTRY_UNREPORTED)
        assert_int_equal(
            egm__commit_seen_seqs(1, entry == ENTRY_WHOLE ? &seq : NULL, entry == ENTRY_WHOLE,
                                  entry == ENTRY_TORN ? &seq : NULL, entry == ENTRY_TORN, &seen),
            EGM_OK);
    const char *key = "K";
    size_t key_len = 1;
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = writer,
                             .sizes = &size,
                             .slab_ids = &slab,
                             .offsets = &offset,
                             .log_seqs = seen,
                             .config = &cfg,
                             .n = 1,
                             .keys = &key,
                             .key_lens = &key_len,
                             .done = egm_test_record_answer};
    assert_int_equal(egm__objects_batch(lead.objects, &b), EGM_OK);
    assert_int_equal(egm_test_answered, EGM_OK);
    egm__journal_take_position(j);
    /* Before the Commit's request notes the entry seen (egm__objects_slab_seen),
     * another request removes K (its lease long over); the standby confirms. */
    assert_int_equal(egm__objects_remove(lead.objects, "K", 1, 0, 20000, NULL), EGM_OK);
    egm__journal_take_position(j);
    standby_takes_all(j, f, m, 20000);

    /* Another writer is granted K's range: answered before the standby holds
     * the grant, or once it does. Its bytes land there; then the leader dies
     * with nothing more reaching the standby. */
    assert_int_equal(egm__objects_slab_grant(lead.objects, other, KEY_SIZE, KEY_SIZE, 1, early,
                                             &cfg, 20000, &s2),
                     EGM_OK);
    assert_int_equal(s2.early, early);
    assert_true(s2.extents[0].offset == s1.extents[0].offset);
    egm__journal_take_position(j);
    if (!early)
        standby_takes_all(j, f, m, 20000);
    memset(pool + s2.extents[0].offset, 0xab, KEY_SIZE);

    egm_pool_reader_t reader = {.fn = pool_read};
    size_t adopted = 0, skipped = 0, recovered = 0;
    assert_int_equal(egm__mirror_install(m, next.liveness, next.segments, next.objects, &reader,
                                         30000, &adopted, &skipped, &recovered),
                     EGM_OK);
    egm_object_view_t view;
    egm_status_t got = egm__objects_stat(next.objects, "K", 1, &view);
    if (entry == ENTRY_UNREPORTED) {
        /* The control: an entry the master never heard of is adopted. */
        assert_int_equal(got, EGM_OK);
        assert_int_equal(recovered, 1);
    } else if (got != EGM_ERR_NOT_FOUND) {
        fail_msg("the new leader brought removed K back (%s, %zu found in slab logs; entry %s) "
                 "over the range granted %s",
                 egm_status_string(got), recovered, entry == ENTRY_TORN ? "torn" : "whole",
                 early ? "early" : "after the standby held it");
    }
    egm_free(seen);

    egm__mirror_destroy(m);
    egm__objects_set_journal(lead.objects, NULL);
    egm__segment_table_set_journal(lead.segments, NULL);
    egm__journal_unfollow(j, f);
    egm__journal_destroy(j);
    egm__master_state_cleanup(&lead);
    egm__master_state_cleanup(&next);
}

static void test_removed_key_early_grant(void **state)
{
    (void)state;
    removed_key_stays_removed(1, ENTRY_WHOLE);
}

static void test_removed_key_waited_grant(void **state)
{
    (void)state;
    removed_key_stays_removed(0, ENTRY_WHOLE);
}

/* An entry whose write failed on some extent, named in the Commit's
 * torn_log_seqs: noted seen like a whole one (before, the client sent 0 and
 * the new leader adopted it from the extent it had reached). */
static void test_removed_key_torn_entry(void **state)
{
    (void)state;
    removed_key_stays_removed(1, ENTRY_TORN);
    removed_key_stays_removed(0, ENTRY_TORN);
    removed_key_stays_removed(0, ENTRY_UNREPORTED);
}

int main(void)
{
    egm__log_set_level(EGM_LOG_ERROR);
    uint64_t live = egm__alloc_live_count();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_removed_key_early_grant),
        cmocka_unit_test(test_removed_key_waited_grant),
        cmocka_unit_test(test_removed_key_torn_entry),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0 && egm__alloc_live_count() != live) {
        fprintf(stderr, "leak: %llu allocations left\n",
                (unsigned long long)(egm__alloc_live_count() - live));
        return 1;
    }
    return failed;
}
