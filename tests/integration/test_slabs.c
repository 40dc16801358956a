/* Integration: client-side allocation (docs/master.md "Client-side
 * allocation", docs/consistency.md) with a real master
 * (put_start_discard_timeout_sec 1: the slabs' lease) and provider.
 *   - Puts go through one SlabGrant and one Commit each, no PutStart or
 *     PutEnd; another client reads every byte; the master's accounting
 *     (allocated = objects + open slabs) holds; a client's close returns its
 *     slab.
 *   - A writer killed with its slab open: nothing it did not commit shows, its
 *     committed objects stay, and the slab's space returns at the lease's end.
 *   - A master restart: the writer drops its slabs (none is used with the new
 *     master), its next puts get a new slab, and every byte read back is the
 *     right one.
 *   - A batch into a full pool gets one slab for the whole call, evicting for
 *     it, not one object's room per SlabGrant.
 *   - A slab placed with fewer replicas than asked (one provider for
 *     replica_num 2) serves only the call that got it: once a second provider
 *     is up, the next put has both replicas.
 *   - A slab with an extent on a provider that died takes no more objects
 *     once a Commit names it degraded: the puts after it get a new slab on
 *     live providers, with both replicas (skipped, and says so, should the
 *     machine stall over 2 s between two puts: the slab is then not used);
 *     one whose only extent is on a provider that died is returned at the
 *     writer's next call, not held by the master until its lease ends. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/inspect.h"
#include "common/clock.h"
#include "common/process.h"
#include "rpc/client.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "support/model.h"
#include "support/testutil.h"

#define LEN 4096

static egm_test_cluster_t cluster;
static unsigned master_http;
static const char *const master_flags[] = {"--put-start-discard-timeout-sec", "1",
                                           "--eviction-min-residency-ms", "0", NULL};

static int setup(void **state)
{
    (void)state;
    if (egm_test_start_master_http(&cluster, master_flags, &master_http) != 0 ||
        egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static long long metric(const char *name)
{
    long long v = egm_model_master_metric(master_http, name);
    if (v < 0)
        fail_msg("master metric %s: not read", name);
    return v;
}

static long long rpcs(const char *type)
{
    long long n = egm_model_master_rpc_count(master_http, type);
    assert_true(n >= 0);
    return n;
}

static void put_key(egm_client_t *c, const char *key, unsigned seed)
{
    assert_int_equal(egm_test_put_seeded(c, key, LEN, seed), EGM_OK);
}

/* A get of key: its status; OK only with seed's LEN bytes. */
static egm_status_t get_key(egm_client_t *c, const char *key, unsigned seed)
{
    return egm_test_get_seeded(c, key, LEN, seed);
}

/* Polls until metric name equals want (at most 20 s: the tick runs every
 * second or so); fails otherwise. */
static void wait_metric(const char *name, long long want)
{
    uint64_t deadline = egm__now_ms() + 20000;
    long long v;
    while ((v = metric(name)) != want && egm__now_ms() < deadline)
        usleep(50 * 1000);
    if (v != want)
        fail_msg("%s: %lld, waited for %lld", name, v, want);
}

static void test_puts_commit_into_a_slab(void **state)
{
    (void)state;
    enum { KEYS = 20 };
    char key[32];
    egm_client_t *writer = egm_test_client(&cluster, "shm", NULL);
    egm_client_t *reader = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(writer);
    assert_non_null(reader);
    long long grants = rpcs("SlabGrant"), commits = rpcs("Commit");
    long long starts = rpcs("PutStart"), ends = rpcs("PutEnd");

    for (unsigned i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "slab/%u", i);
        put_key(writer, key, i);
    }
    assert_int_equal(rpcs("SlabGrant") - grants, 1);
    assert_int_equal(rpcs("Commit") - commits, KEYS);
    assert_int_equal(rpcs("PutStart") - starts, 0);
    assert_int_equal(rpcs("PutEnd") - ends, 0);
    for (unsigned i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "slab/%u", i);
        assert_int_equal(get_key(reader, key, i), EGM_OK);
    }
    /* A key that exists: refused as PutStart would, the first value stays. */
    unsigned char data[LEN];
    egm_test_fill(data, LEN, 99);
    assert_int_equal(egm_put(writer, "slab/0", data, LEN, NULL), EGM_ERR_EXISTS);
    assert_int_equal(get_key(reader, "slab/0", 0), EGM_OK);

    /* One slab open (a sixteenth of the 16 MiB pool), partly committed. */
    assert_int_equal(metric("egm_master_slabs"), 1);
    long long slab = metric("egm_master_slab_bytes");
    assert_true(slab > 0 && slab < (1 << 20));
    assert_int_equal(egm_model_check_master(master_http, KEYS, (uint64_t)KEYS * LEN), 0);

    egm_client_destroy(writer); /* returns the slab */
    assert_int_equal(metric("egm_master_slabs"), 0);
    assert_int_equal(metric("egm_master_slab_bytes"), 0);
    assert_int_equal(metric("egm_master_allocated_bytes"), KEYS * LEN);
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(reader, 1, &removed), EGM_OK);
    assert_int_equal(removed, KEYS);
    egm_client_destroy(reader);
}

static void test_killed_writer_slab_returns(void **state)
{
    (void)state;
    enum { KEYS = 5 };
    char key[32];
    long long expired = metric("egm_master_slabs_expired_total");
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) { /* the writer: commits KEYS puts, then dies with its slab open */
        egm_client_t *c = egm_test_client(&cluster, "shm", NULL);
        for (unsigned i = 0; c != NULL && i < KEYS; i++) {
            unsigned char data[LEN];
            snprintf(key, sizeof(key), "dead/%u", i);
            egm_test_fill(data, LEN, 100 + i);
            if (egm_put(c, key, data, LEN, NULL) != EGM_OK)
                _exit(2);
        }
        kill(getpid(), SIGKILL);
        _exit(3);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

    egm_client_t *reader = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(reader);
    for (unsigned i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "dead/%u", i);
        assert_int_equal(get_key(reader, key, 100 + i), EGM_OK);
    }
    /* Its slab returns at the lease's end (1 s), the objects stay. */
    wait_metric("egm_master_slabs", 0);
    assert_int_equal(metric("egm_master_slab_bytes"), 0);
    assert_int_equal(metric("egm_master_slabs_expired_total"), expired + 1);
    assert_int_equal(metric("egm_master_allocated_bytes"), KEYS * LEN);
    for (unsigned i = 0; i < KEYS; i++) {
        snprintf(key, sizeof(key), "dead/%u", i);
        assert_int_equal(get_key(reader, key, 100 + i), EGM_OK);
    }
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(reader, 1, &removed), EGM_OK);
    egm_client_destroy(reader);
}

static void test_master_restart_drops_slabs(void **state)
{
    (void)state;
    int code = 0;
    const char *pairs[] = {"ping_interval_ms=200", NULL};
    egm_client_t *writer = egm_test_client(&cluster, "shm", pairs);
    assert_non_null(writer);
    put_key(writer, "before", 1);
    assert_int_equal(metric("egm_master_slabs"), 1);

    unsigned port = cluster.master_port;
    assert_int_equal(egm__process_signal(&cluster.master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.master, 10000, &code), EGM_OK);
    assert_int_equal(egm_test_start_master_http_on(&cluster, port, master_flags, &master_http), 0);
    /* The provider remounts after its fence; puts then succeed, in a new
     * slab of the new master (the first may fail: the old connection). */
    uint64_t deadline = egm__now_ms() + 30000;
    egm_status_t st = EGM_ERR_INTERNAL;
    unsigned char data[LEN];
    egm_test_fill(data, LEN, 2);
    while (egm__now_ms() < deadline && (st = egm_put(writer, "after", data, LEN, NULL)) != EGM_OK)
        usleep(100 * 1000);
    assert_int_equal(st, EGM_OK);
    /* Until the provider remounted, the new master had no room: every try
     * asked it for a slab. Every Commit it got was of a slab it granted. */
    assert_int_equal(rpcs("Commit"), 1);
    assert_true(rpcs("SlabGrant") >= 1);
    assert_int_equal(metric("egm_master_rpc_failures_total{type=\"Commit\"}"), 0);
    egm_client_t *reader = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(reader);
    assert_int_equal(get_key(reader, "after", 2), EGM_OK);
    assert_int_equal(get_key(reader, "before", 1), EGM_ERR_NOT_FOUND); /* the index was lost */
    long long grants = rpcs("SlabGrant");
    put_key(writer, "after2", 3); /* in the new master's slab */
    assert_int_equal(rpcs("SlabGrant"), grants);
    assert_int_equal(rpcs("Commit"), 2);
    assert_int_equal(get_key(reader, "after2", 3), EGM_OK);
    egm_client_destroy(writer);
    egm_client_destroy(reader);
}

/* A batch into a pool with no free range that long: one SlabGrant for the
 * whole call (the master evicts for it as PutStarts would), not one per key. */
static void test_full_pool_one_grant_per_call(void **state)
{
    (void)state;
    enum { FILL = 200, KEYS = 64, SIZE = 64 << 10 };
    char key[32];
    const char *master_placed[] = {"slab_bytes=0", NULL};
    egm_client_t *filler = egm_test_client(&cluster, "shm", master_placed);
    egm_client_t *writer = egm_test_client(&cluster, "shm", NULL);
    assert_non_null(filler);
    assert_non_null(writer);
    for (unsigned i = 0; i < FILL; i++) { /* 12.5 of the 16 MiB: below the watermark */
        snprintf(key, sizeof(key), "fill/%u", i);
        assert_int_equal(egm_test_put_seeded(filler, key, SIZE, i), EGM_OK);
    }
    static char names[KEYS][32];
    const char *keys[KEYS];
    const void *srcs[KEYS];
    size_t lens[KEYS];
    egm_status_t results[KEYS];
    static unsigned char data[KEYS][SIZE];
    for (unsigned i = 0; i < KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "batch/%u", i);
        keys[i] = names[i];
        egm_test_fill(data[i], SIZE, 1000 + i);
        srcs[i] = data[i];
        lens[i] = SIZE;
    }
    assert_int_equal(egm_register_buffer(writer, data, sizeof(data)), EGM_OK);
    long long grants = rpcs("SlabGrant");
    assert_int_equal(egm_batch_put_from(writer, KEYS, keys, srcs, lens, NULL, results), EGM_OK);
    for (unsigned i = 0; i < KEYS; i++)
        assert_int_equal(results[i], EGM_OK);
    assert_int_equal(rpcs("SlabGrant") - grants, 1);
    assert_true(metric("egm_master_evictions_total") > 0); /* 4 MiB did not fit */
    for (unsigned i = 0; i < KEYS; i++)
        assert_int_equal(egm_test_get_seeded(filler, keys[i], SIZE, 1000 + i), EGM_OK);
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(filler, 1, &removed), EGM_OK);
    assert_int_equal(egm_unregister_buffer(writer, data), EGM_OK);
    egm_client_destroy(writer);
    egm_client_destroy(filler);
}

/* How many replicas the master lists for key (StatKey: no lease). */
static size_t replicas_of(egm_client_t *client, const char *key)
{
    Egm__StatKeyReply *reply = NULL;
    assert_int_equal(egm__client_stat(client, key, &reply), EGM_OK);
    assert_int_equal(reply->status, EGM_OK);
    size_t n = reply->n_replicas;
    egm__rpc_msg_free(&reply->base);
    return n;
}

/* A writer over shm with `replica` (a "replica_num=N" pair) and a reader
 * over tcp. */
static void open_pair(const char *replica, egm_client_t **writer_p, egm_client_t **reader_p)
{
    const char *pairs[] = {replica, NULL};
    *writer_p = egm_test_client(&cluster, "shm", pairs);
    *reader_p = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(*writer_p);
    assert_non_null(*reader_p);
}

/* replica_num 2 with one provider: each put gets the one replica there is
 * (as Mooncake's does), and asks the master again, so that when a second
 * provider comes the next put gets both. A short slab kept for later calls
 * would give every object of its size one copy (found by test_ha_chaos). */
static void test_short_slab_serves_one_call(void **state)
{
    (void)state;
    enum { SHORT = 3 };
    char key[32];
    egm_client_t *writer, *reader;
    open_pair("replica_num=2", &writer, &reader);
    long long grants = rpcs("SlabGrant");
    for (unsigned i = 0; i < SHORT; i++) {
        snprintf(key, sizeof(key), "short/%u", i);
        put_key(writer, key, i);
        assert_int_equal(replicas_of(reader, key), 1);
    }
    assert_int_equal(rpcs("SlabGrant") - grants, SHORT);
    wait_metric("egm_master_slabs", 0); /* each returned after its call */

    assert_true(egm_test_start_provider(&cluster, "16MiB", NULL) >= 0);
    grants = rpcs("SlabGrant");
    for (unsigned i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "full/%u", i);
        put_key(writer, key, 100 + i);
        assert_int_equal(replicas_of(reader, key), 2);
    }
    assert_int_equal(rpcs("SlabGrant") - grants, 1); /* a full slab is kept */
    for (unsigned i = 0; i < SHORT; i++) {
        snprintf(key, sizeof(key), "short/%u", i);
        assert_int_equal(get_key(reader, key, i), EGM_OK);
    }
    for (unsigned i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "full/%u", i);
        assert_int_equal(get_key(reader, key, 100 + i), EGM_OK);
    }
    egm_client_destroy(writer);
    egm_client_destroy(reader);
}

/* The master keeps a provider whose connections closed presumed gone (no
 * replica committed there) and does not drop it for a minute, so that no
 * ping of the writer retires its segment: only the Commit's answer can tell
 * the writer. Slabs live a minute, and a writer may use one for up to 2 s
 * (the largest location_cache_ms) after the master last answered for it. */
static int setup_slow_drop(void **state)
{
    (void)state;
    static const char *const flags[] = {"--put-start-discard-timeout-sec",
                                        "60",
                                        "--client-disconnect-grace-ms",
                                        "60000",
                                        "--location-cache-ms",
                                        "2000",
                                        NULL};
    if (egm_test_start_master_http(&cluster, flags, &master_http) != 0)
        return -1;
    for (int i = 0; i < 3; i++)
        if (egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
            return -1;
    return 0;
}

/* Which of the cluster's providers holds a replica of key (-1: none). */
static int provider_of(egm_client_t *client, const char *key)
{
    Egm__StatKeyReply *reply = NULL;
    assert_int_equal(egm__client_stat(client, key, &reply), EGM_OK);
    assert_int_equal(reply->status, EGM_OK);
    assert_true(reply->n_replicas > 0);
    egm_id_t held = egm__id_from_pb(reply->replicas[0]->segment);
    egm__rpc_msg_free(&reply->base);
    for (int p = 0; p < cluster.n_providers; p++) {
        char needle[32];
        egm_id_t ids[4];
        snprintf(needle, sizeof(needle), ":%d/", (int)cluster.providers[p].pid);
        size_t n = egm_model_segments_matching(client, needle, ids, 4);
        for (size_t i = 0; i < n && i < 4; i++)
            if (egm__id_equal(ids[i], held))
                return p;
    }
    return -1;
}

/* SIGKILLs the provider holding a replica of key, and waits until the master
 * presumes it gone (its connections closed). */
static void kill_holder(egm_client_t *reader, const char *key)
{
    int victim = provider_of(reader, key);
    assert_true(victim >= 0);
    assert_int_equal(egm__process_signal(&cluster.providers[victim], SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[victim], 10000, NULL), EGM_OK);
    wait_metric("egm_master_segments_unreachable", 1);
}

/* After the first put since kill_holder: when it got a new slab (the old
 * one's time ran out first, a stall of over 2 s), nothing went into the old
 * one and nothing here tests what happens to it: the test is skipped. */
static void skip_if_granted(const char *test, long long grants, egm_client_t *writer,
                            egm_client_t *reader)
{
    if (rpcs("SlabGrant") == grants)
        return;
    egm_client_destroy(writer);
    egm_client_destroy(reader);
    egm_test_skip_note(test, "the put took a new slab (the old one's time ran out first: a stall "
                             "of over 2 s), so nothing went into the slab that lost an extent");
    skip();
}

/* A writer's slab over two providers, one of which is SIGKILLed: at most one
 * put (the one whose Commit is told the slab lost an extent) is committed
 * with one replica; the next put asks for a new slab, which lands on the two
 * live providers. Before, every put went on into the old slab, one copy each,
 * until the provider was dropped and the writer's ping learnt of it. */
static void test_degraded_slab_retired(void **state)
{
    (void)state;
    enum { AFTER = 4 };
    char key[32];
    egm_client_t *writer, *reader;
    open_pair("replica_num=2", &writer, &reader);
    put_key(writer, "deg/first", 1);
    assert_int_equal(replicas_of(reader, "deg/first"), 2);
    kill_holder(reader, "deg/first");

    long long grants = rpcs("SlabGrant");
    put_key(writer, "deg/0", 10);
    skip_if_granted(__func__, grants, writer, reader);
    /* Placed in the old slab (one replica, until the repair worker's next ask
     * restores the other), and the Commit's answer named the slab. */
    size_t single = 0;
    for (unsigned i = 1; i < AFTER; i++) {
        snprintf(key, sizeof(key), "deg/%u", i);
        put_key(writer, key, 10 + i);
        single += replicas_of(reader, key) == 1;
    }
    /* One new slab on the live providers, then kept: every later put has
     * both replicas. */
    assert_int_equal(rpcs("SlabGrant") - grants, 1);
    assert_int_equal(single, 0);
    for (unsigned i = 0; i < AFTER; i++) {
        snprintf(key, sizeof(key), "deg/%u", i);
        assert_int_equal(get_key(reader, key, 10 + i), EGM_OK);
    }
    assert_int_equal(get_key(reader, "deg/first", 1), EGM_OK);
    egm_client_destroy(writer);
    egm_client_destroy(reader);
}

/* A writer's one-extent slab (replica_num 1) whose provider is SIGKILLed:
 * the put after it is not committed (its only extent is on a provider
 * presumed gone: NOT_FOUND), the Commit's answer names the slab, and the
 * writer returns it at its next call, so that the master holds only the new
 * slab, not the old one until its lease (a minute here) ends. */
static void test_lost_slab_returned(void **state)
{
    (void)state;
    egm_client_t *writer, *reader;
    open_pair("replica_num=1", &writer, &reader);
    put_key(writer, "lost/first", 1);
    assert_int_equal(metric("egm_master_slabs"), 1);
    kill_holder(reader, "lost/first");

    long long grants = rpcs("SlabGrant");
    egm_status_t s = egm_test_put_seeded(writer, "lost/0", LEN, 10);
    skip_if_granted(__func__, grants, writer, reader);
    assert_int_equal(s, EGM_ERR_NOT_FOUND); /* its one extent is on the dead provider */
    put_key(writer, "lost/1", 11);          /* a new slab, the old one returned with the ask */
    assert_int_equal(rpcs("SlabGrant") - grants, 1);
    assert_int_equal(metric("egm_master_slabs"), 1);
    assert_int_equal(get_key(reader, "lost/1", 11), EGM_OK);
    egm_client_destroy(writer);
    egm_client_destroy(reader);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_puts_commit_into_a_slab, setup, teardown),
        cmocka_unit_test_setup_teardown(test_killed_writer_slab_returns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_master_restart_drops_slabs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_full_pool_one_grant_per_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_short_slab_serves_one_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_degraded_slab_retired, setup_slow_drop, teardown),
        cmocka_unit_test_setup_teardown(test_lost_slab_returned, setup_slow_drop, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
