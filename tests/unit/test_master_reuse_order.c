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
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
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
#include "master/slabs.h"
#include "rpc/command.h"
#include "rpc/proto_util.h"
#include "egmstore.pb-c.h"
#include "support/batch_answer.h"
#include "support/journal_standby.h"

#define SEG (16u << 10)
#define KEY_SIZE 4096u
#define SEEN_KEYS 72 /* keys of test_commit_seen_once's Commit */

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

/* A leader with a standby in sync (journal, follower, mirror), one segment
 * on host-a, and a writer's logged slab over the whole of it, which the
 * standby holds; K's entry (seq 1) written in the pool. */
typedef struct {
    egm_master_state_t lead, next;
    egm_journal_t *j;
    egm_test_standby_t sb; /* applies to m, at time standby_now */
    egm_mirror_t *m;
    uint64_t standby_now;
    egm_id_t writer, other;
    egm_put_config_t cfg;
    egm_slab_view_t s1;
} fixture_t;

/* The standby applies each batch to its mirror as it arrives. */
static egm_status_t mirror_applies(void *arg, uint64_t from, uint64_t to, const uint8_t *ops,
                                   size_t len)
{
    const fixture_t *fx = arg;
    return egm__mirror_apply(fx->m, 1, from == 0, from, to, ops, len, fx->standby_now);
}

static void fixture_init(fixture_t *fx)
{
    memset(fx, 0, sizeof(*fx));
    state_init(&fx->lead);
    state_init(&fx->next);
    assert_int_equal(egm__journal_create(&fx->j), EGM_OK);
    assert_int_equal(egm__mirror_create(&fx->m), EGM_OK);
    fx->sb.apply = mirror_applies;
    fx->sb.apply_arg = fx;
    egm_test_standby_follow(&fx->sb, fx->j, 1 << 20, 1);
    egm__objects_set_journal(fx->lead.objects, fx->j);
    egm__segment_table_set_journal(fx->lead.segments, fx->j);

    egm_id_t provider = egm__id_random();
    fx->writer = egm__id_random();
    fx->other = egm__id_random();
    egm_segment_params_t p = {.id = egm__id_random(),
                              .size = SEG,
                              .name = "P0/0",
                              .tcp_endpoint = "127.0.0.1:1",
                              .host_id = "host-a"};
    seg_id = p.id;
    memset(pool, 0, sizeof(pool));
    assert_int_equal(egm__liveness_mount(fx->lead.liveness, provider, &p, 0), EGM_OK);
    fx->cfg = (egm_put_config_t){.replica_num = 1, .writer_host_id = "host-a"};
    assert_int_equal(
        egm__objects_slab_grant(fx->lead.objects, fx->writer, SEG, SEG, 1, 0, &fx->cfg, 0, &fx->s1),
        EGM_OK);
    egm__journal_take_position(fx->j);
    egm_test_standby_take_all(&fx->sb);
    egm_slab_log_entry_t e = {
        .slab_id = fx->s1.id, .seq = 1, .offset = 0, .size = KEY_SIZE, .key = "K", .key_len = 1};
    assert_int_equal(
        egm__slab_log_encode(&e, pool + fx->s1.extents[0].offset + egm__slab_log_at(SEG, 1)),
        EGM_OK);
}

/* K was removed and the standby confirmed it: another writer is granted K's
 * range, answered before the standby holds the grant (early) or once it
 * does; its bytes land there; the leader dies with nothing more reaching
 * the standby, which takes over reading the slab logs from the pool. What
 * the new leader says of K; *recovered_p: objects it found in slab logs. */
static egm_status_t fixture_takeover(fixture_t *fx, int early, size_t *recovered_p)
{
    egm_slab_view_t s2;
    assert_int_equal(egm__objects_slab_grant(fx->lead.objects, fx->other, KEY_SIZE, KEY_SIZE, 1,
                                             early, &fx->cfg, 20000, &s2),
                     EGM_OK);
    assert_int_equal(s2.early, early);
    assert_true(s2.extents[0].offset == fx->s1.extents[0].offset);
    egm__journal_take_position(fx->j);
    if (!early) {
        fx->standby_now = 20000;
        egm_test_standby_take_all(&fx->sb);
    }
    memset(pool + s2.extents[0].offset, 0xab, KEY_SIZE);

    egm_pool_reader_t reader = {.fn = pool_read};
    size_t adopted = 0, skipped = 0, removed = 0;
    assert_int_equal(egm__mirror_install(fx->m, fx->next.liveness, fx->next.segments,
                                         fx->next.objects, &reader, 30000, &adopted, &skipped,
                                         recovered_p, &removed),
                     EGM_OK);
    egm_object_view_t view;
    return egm__objects_stat(fx->next.objects, "K", 1, &view);
}

static void fixture_cleanup(fixture_t *fx)
{
    egm__objects_set_journal(fx->lead.objects, NULL);
    egm__segment_table_set_journal(fx->lead.segments, NULL);
    egm_test_standby_leave(&fx->sb);
    egm__mirror_destroy(fx->m);
    egm__journal_destroy(fx->j);
    egm__master_state_cleanup(&fx->lead);
    egm__master_state_cleanup(&fx->next);
}

static void removed_key_stays_removed(int early)
{
    fixture_t fx;
    fixture_init(&fx);
    uint64_t size = KEY_SIZE, offset = 0, slab = fx.s1.id, seq = 1;
    const char *key = "K";
    size_t key_len = 1;
    egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                             .client = fx.writer,
                             .sizes = &size,
                             .slab_ids = &slab,
                             .offsets = &offset,
                             .log_seqs = &seq,
                             .config = &fx.cfg,
                             .n = 1,
                             .keys = &key,
                             .key_lens = &key_len,
                             .done = egm_test_record_answer};
    assert_int_equal(egm__objects_batch(fx.lead.objects, &b), EGM_OK);
    assert_int_equal(egm_test_answered, EGM_OK);
    egm__journal_take_position(fx.j);
    /* Before the Commit's request notes the entry seen (egm__objects_slab_seen),
     * another request removes K (its lease long over); the standby confirms. */
    assert_int_equal(egm__objects_remove(fx.lead.objects, "K", 1, 0, 20000, NULL), EGM_OK);
    egm__journal_take_position(fx.j);
    fx.standby_now = 20000;
    egm_test_standby_take_all(&fx.sb);

    size_t recovered = 0;
    egm_status_t got = fixture_takeover(&fx, early, &recovered);
    if (got != EGM_ERR_NOT_FOUND)
        fail_msg("the new leader brought removed K back (%s, %zu found in slab logs) over the "
                 "range granted %s",
                 egm_status_string(got), recovered, early ? "early" : "after the standby held it");
    fixture_cleanup(&fx);
}

static void test_removed_key_early_grant(void **state)
{
    (void)state;
    removed_key_stays_removed(1);
}

static void test_removed_key_waited_grant(void **state)
{
    (void)state;
    removed_key_stays_removed(0);
}

/* The standby as a thread: takes and acknowledges what the leader journals
 * while a request of the leader waits for it, until told to stop. */
typedef struct {
    fixture_t *fx;
    atomic_int stop;
} standby_thread_t;

static void *standby_run(void *arg)
{
    standby_thread_t *t = arg;
    while (!atomic_load(&t->stop))
        egm_test_standby_take(&t->fx->sb, 5);
    return NULL;
}

/* SLAB_SEEN ops of (slab, seq) among the batches the standby received. */
static int count_seen(const egm_test_standby_t *sb, uint64_t slab, uint64_t seq)
{
    int n = 0;
    assert_true(sb->batches <= EGM_TEST_STANDBY_BATCHES);
    for (size_t b = 0; b < sb->batches; b++) {
        egm_jop_t op;
        for (size_t at = 0; at < sb->len[b];) {
            assert_int_equal(egm__jdec_next(sb->ops[b], sb->len[b], &at, &op), EGM_OK);
            n += op.kind == EGM_JOP_SLAB_SEEN && op.slab_id == slab && op.seq == seq;
        }
    }
    return n;
}

/* The leader's clock in the handler's requests: after the slab's grant at
 * 0, before K's removal at 20000. */
static uint64_t handler_now(void)
{
    return 1000;
}

/* How K's Commit names its log entry (commit_seqs.h): written whole
 * (log_seqs), written on some extents only (torn_log_seqs: the write
 * failed), or a failed write not reported (what the client sent before
 * torn_log_seqs: the control, where the new leader does bring K back). */
typedef enum { ENTRY_WHOLE, ENTRY_TORN, ENTRY_UNREPORTED, ENTRY_MIXED } entry_t;

/* K committed through the Commit handler, then removed; another writer's
 * bytes land in K's range under an early grant; the leader dies. Only a
 * whole entry lets the Commit be answered before the standby holds it; a
 * torn one is noted seen all the same, so the new leader skips it.
 * ENTRY_MIXED: K whole and K2 (beside it) torn in one Commit, which then
 * waits. */
/* The leader's handlers run with the fixture's journal and clock. */
static void fixture_handles(fixture_t *fx)
{
    fx->lead.journal = fx->j;
    fx->lead.journal_wait_ms = 30000;
    fx->lead.now_ms = handler_now;
}

/* req through the Commit handler, while the standby takes what the leader
 * journals: its reply, of n results (egm__pb_free it). */
static Egm__KeysReply *handle_commit(fixture_t *fx, Egm__CommitRequest *req, size_t n)
{
    uint8_t *buf;
    size_t len;
    assert_int_equal(egm__pb_pack(&req->base, &buf, &len), EGM_OK);
    standby_thread_t t = {.fx = fx};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, standby_run, &t), 0);
    egm_rpc_reply_t reply = {0};
    egm_status_t status = egm__master_handle(&fx->lead, EGM_RPC_COMMIT, buf, len, &reply);
    atomic_store(&t.stop, 1);
    assert_int_equal(pthread_join(thread, NULL), 0);
    egm_free(buf);
    assert_int_equal(status, EGM_OK);
    Egm__KeysReply *r = NULL;
    assert_int_equal(
        egm__pb_unpack(&egm__keys_reply__descriptor, reply.buf, reply.len, (ProtobufCMessage **)&r),
        EGM_OK);
    egm_free(reply.buf);
    assert_int_equal(r->n_results, n);
    return r;
}

static void commit_named(entry_t entry)
{
    fixture_t fx;
    fixture_init(&fx);
    fixture_handles(&fx);

    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    const char *keys[] = {"K", "K2"};
    uint64_t sizes[] = {KEY_SIZE, KEY_SIZE}, offsets[] = {0, KEY_SIZE};
    uint64_t slabs[] = {fx.s1.id, fx.s1.id}, whole[] = {1, 0}, torn[] = {0, 2};
    size_t n = entry == ENTRY_MIXED ? 2 : 1;
    egm__id_to_pb(fx.writer, &client);
    req.client = &client;
    req.n_keys = req.n_sizes = req.n_slab_ids = req.n_offsets = n;
    req.keys = (char **)keys;
    req.sizes = sizes;
    req.slab_ids = slabs;
    req.offsets = offsets;
    if (entry == ENTRY_WHOLE || entry == ENTRY_MIXED) {
        req.n_log_seqs = n;
        req.log_seqs = whole;
    }
    if (entry == ENTRY_TORN) {
        req.n_torn_log_seqs = 1;
        req.torn_log_seqs = whole; /* seq 1, torn */
    } else if (entry == ENTRY_MIXED) {
        req.n_torn_log_seqs = 2;
        req.torn_log_seqs = torn;
    }
    Egm__KeysReply *r = handle_commit(&fx, &req, n);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(r->results[i]->status, EGM_OK);
    egm__pb_free(&r->base);
    assert_int_equal(atomic_load(&fx.lead.commits_described), entry == ENTRY_WHOLE);
    egm_test_standby_take_all(&fx.sb); /* what the handler journaled after its wait */
    /* Each entry named is journaled seen once (with its key's OBJECT, or at
     * its refusal), not again when the Commit notes it. */
    int want = entry == ENTRY_UNREPORTED ? 0 : 1;
    assert_int_equal(count_seen(&fx.sb, fx.s1.id, 1), want);
    assert_int_equal(count_seen(&fx.sb, fx.s1.id, 2), entry == ENTRY_MIXED);

    assert_int_equal(egm__objects_remove(fx.lead.objects, "K", 1, 0, 20000, NULL), EGM_OK);
    egm__journal_take_position(fx.j);
    fx.standby_now = 20000;
    egm_test_standby_take_all(&fx.sb);
    size_t recovered = 0;
    egm_status_t got = fixture_takeover(&fx, 1, &recovered);
    if (entry == ENTRY_UNREPORTED) {
        assert_int_equal(got, EGM_OK);
        assert_int_equal(recovered, 1);
    } else if (got != EGM_ERR_NOT_FOUND) {
        fail_msg("the new leader brought removed K back (%s, %zu found in slab logs; entry %s)",
                 egm_status_string(got), recovered,
                 entry == ENTRY_TORN    ? "torn"
                 : entry == ENTRY_MIXED ? "whole, beside a torn one"
                                        : "whole");
    }
    fx.lead.journal = NULL;
    fixture_cleanup(&fx);
}

/* The Commit of one key per log seq, in the fixture's slab: n keys named
 * keys[i], 64 bytes each at offsets[i], whole entries seqs[i]. */
static Egm__KeysReply *commit_seqs(fixture_t *fx, size_t n, const char *const *keys,
                                   const uint64_t *offsets, const uint64_t *seqs)
{
    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    uint64_t sizes[SEEN_KEYS], slabs[SEEN_KEYS];
    assert_true(n <= SEEN_KEYS);
    for (size_t i = 0; i < n; i++) {
        sizes[i] = 64;
        slabs[i] = fx->s1.id;
    }
    egm__id_to_pb(fx->writer, &client);
    req.client = &client;
    req.n_keys = req.n_sizes = req.n_slab_ids = req.n_offsets = req.n_log_seqs = n;
    req.keys = (char **)keys;
    req.sizes = sizes;
    req.slab_ids = slabs;
    req.offsets = (uint64_t *)offsets;
    req.log_seqs = (uint64_t *)seqs;
    return handle_commit(fx, &req, n);
}

/* Every log entry a Commit names is journaled seen exactly once: those of
 * keys committed (70: more than the handler notes on its stack), of a key
 * refused before its claim (past the slab's end: noted seen by the Commit
 * alone), and of one refused after it (its key exists: journaled before its
 * range is freed). */
static void test_commit_seen_once(void **state)
{
    (void)state;
    fixture_t fx;
    fixture_init(&fx);
    fixture_handles(&fx);
    char names[SEEN_KEYS][16];
    const char *keys[SEEN_KEYS];
    uint64_t offsets[SEEN_KEYS], seqs[SEEN_KEYS];
    keys[0] = "dup";
    offsets[0] = 64 * (SEEN_KEYS - 1);
    seqs[0] = 100;
    Egm__KeysReply *r = commit_seqs(&fx, 1, keys, offsets, seqs);
    assert_int_equal(r->results[0]->status, EGM_OK);
    egm__pb_free(&r->base);
    for (size_t i = 0; i < SEEN_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "k%zu", i);
        keys[i] = names[i];
        offsets[i] = 64 * i;
        seqs[i] = i + 1;
    }
    offsets[SEEN_KEYS - 2] = SEG; /* past the slab's end */
    keys[SEEN_KEYS - 1] = "dup";
    offsets[SEEN_KEYS - 1] = 64 * (SEEN_KEYS - 2);
    r = commit_seqs(&fx, SEEN_KEYS, keys, offsets, seqs);
    for (size_t i = 0; i < SEEN_KEYS - 2; i++)
        assert_int_equal(r->results[i]->status, EGM_OK);
    assert_int_not_equal(r->results[SEEN_KEYS - 2]->status, EGM_OK);
    assert_int_equal(r->results[SEEN_KEYS - 1]->status, EGM_ERR_EXISTS);
    egm__pb_free(&r->base);
    egm_test_standby_take_all(&fx.sb);
    for (uint64_t seq = 1; seq <= SEEN_KEYS; seq++)
        if (count_seen(&fx.sb, fx.s1.id, seq) != 1)
            fail_msg("log entry %llu journaled seen %d times", (unsigned long long)seq,
                     count_seen(&fx.sb, fx.s1.id, seq));
    assert_int_equal(count_seen(&fx.sb, fx.s1.id, 100), 1);
    fx.lead.journal = NULL;
    fixture_cleanup(&fx);
}

static void test_commit_whole_entry(void **state)
{
    (void)state;
    commit_named(ENTRY_WHOLE);
}

static void test_commit_torn_entry(void **state)
{
    (void)state;
    commit_named(ENTRY_TORN);
}

static void test_commit_unreported_entry(void **state)
{
    (void)state;
    commit_named(ENTRY_UNREPORTED);
}

static void test_commit_whole_and_torn(void **state)
{
    (void)state;
    commit_named(ENTRY_MIXED);
}

int main(void)
{
    egm__log_set_level(EGM_LOG_ERROR);
    uint64_t live = egm__alloc_live_count();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_removed_key_early_grant),
        cmocka_unit_test(test_removed_key_waited_grant),
        cmocka_unit_test(test_commit_whole_entry),
        cmocka_unit_test(test_commit_torn_entry),
        cmocka_unit_test(test_commit_unreported_entry),
        cmocka_unit_test(test_commit_whole_and_torn),
        cmocka_unit_test(test_commit_seen_once),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0 && egm__alloc_live_count() != live) {
        fprintf(stderr, "leak: %llu allocations left\n",
                (unsigned long long)(egm__alloc_live_count() - live));
        return 1;
    }
    return failed;
}
