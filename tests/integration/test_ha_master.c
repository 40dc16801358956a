/* Masters with enable_ha on a real etcd, as processes: of two, one leads and
 * the other stands by (/health says which, and a standby refuses RPCs);
 * clients and providers given master_server_addr etcd://... find the leader;
 * after the leader is SIGKILLed the standby takes over with a higher epoch,
 * the provider remounts on it and the same client's puts and gets succeed
 * again without being recreated (the time from the kill to the first
 * successful put and get is printed). Nothing committed is lost: the objects
 * put under the old leader (before and after the standby caught up) read
 * back byte for byte from the new one, and an object removed under the old
 * one stays removed (docs/ha.md "State handover"). A restarted old leader
 * comes back as a standby, gets the new leader's state and takes over in
 * turn with the same objects. A leader cut off from etcd exits, and
 * acknowledges no change its standby did not confirm. Puts over shared
 * memory are acknowledged without the standby (their slab logs describe
 * them): with the standby stopped they are answered, and after the leader's
 * death the standby finds them in the pool and serves them (docs/ha.md
 * "Commits the pool describes"). A leader killed while a writer's first
 * Commit into a slab granted early waits for the stopped standby: the
 * object is exact if the put succeeded (exact or absent if it failed), and
 * that writer's and another's next puts read back exactly. A writer puts
 * nothing more in a slab granted early once place_within_ms passed with no
 * Commit there answered: it asks for a new slab. An etcd of three
 * members loses one without a master noticing. */
#include <setjmp.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <egmstore/egmstore.h>
#include "common/clock.h"
#include "ha/etcd.h"
#include "master/slabs.h"
#include "support/cluster.h"
#include "support/etcd.h"
#include "support/http_get.h"

#define WAIT_MS 30000

/* What a test started, stopped by teardown whether the test passed or not (a
 * process left running would hold ctest's output pipe open). */
static egm_test_etcd_t etcd_members[3];
static int n_etcd;
static egm_test_cluster_t ma, mb, ma2; /* masters A and B, and A restarted */
static egm_client_t *client, *streamer;

/* The masters' lease TTL: EGM_TEST_HA_TTL (default 4 s: under a loaded TSan run a 2 s lease can
 * lapse on its own, which would be a failover the test did not cause), at least ttl_floor_s. */
static int ttl_floor_s;          /* a test's least TTL (0: none); teardown resets it */
static const char *early_grants; /* --ha-early-grants (NULL: "true"); teardown resets it */

static const char *ttl_text(void)
{
    static char floor_text[16];
    const char *t = getenv("EGM_TEST_HA_TTL");
    if (t == NULL || t[0] == '\0')
        t = "4";
    if (atoi(t) >= ttl_floor_s)
        return t;
    snprintf(floor_text, sizeof(floor_text), "%d", ttl_floor_s);
    return floor_text;
}

static int setup(void **state)
{
    (void)state;
    egm_test_cluster_init(&ma);
    egm_test_cluster_init(&mb);
    egm_test_cluster_init(&ma2);
    client = streamer = NULL;
    n_etcd = 0;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_client_destroy(client);
    egm_client_destroy(streamer);
    client = streamer = NULL;
    ttl_floor_s = 0;
    early_grants = NULL;
    egm_test_cluster_stop(&ma);
    egm_test_cluster_stop(&ma2);
    egm_test_cluster_stop(&mb);
    for (int i = 0; i < n_etcd; i++)
        egm_test_etcd_stop(&etcd_members[i]);
    n_etcd = 0;
    return 0;
}

static void start_etcd(int members)
{
    char endpoints[256];
    if (members == 1)
        assert_int_equal(egm_test_etcd_start(&etcd_members[0]), 0);
    else
        assert_int_equal(
            egm_test_etcd_cluster_start(etcd_members, members, endpoints, sizeof(endpoints)), 0);
    n_etcd = members;
}

/* "leader", "standby" or "" (no answer): the role in a master's /health. */
static void role_of(unsigned http_port, char *role, size_t len, long long *epoch_p)
{
    char body[4096];
    role[0] = '\0'; /* when no answer */
    if (egm_test_http_get(http_port, "/health", body, sizeof(body)) != 200)
        return;
    egm_test_health_role(body, role, len, epoch_p);
}

/* A number field of a master's /health (-1 when absent or no answer). */
static long long health_number(unsigned http_port, const char *field)
{
    char body[4096];
    if (egm_test_http_get(http_port, "/health", body, sizeof(body)) != 200)
        return -1;
    return egm_test_health_number(body, field);
}

/* Waits until the leader on http_port counts `n` standbys in sync. */
static void wait_in_sync(unsigned http_port, long long n)
{
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50))
        if (health_number(http_port, "standbys_in_sync") == n)
            return;
    fail_msg("the leader on http port %u did not count %lld standbys in sync within %d ms",
             http_port, n, WAIT_MS);
}

#define HA_KEYS 64 /* objects put in a batch under each leader */

/* Puts HA_KEYS objects "<prefix>-<i>" of 4 KiB + i bytes, seeded by i. */
static void put_keys(const char *prefix)
{
    char key[64];
    for (int i = 0; i < HA_KEYS; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096 + (size_t)i, (unsigned)i), EGM_OK);
    }
}

/* Every key of put_keys reads back exactly, but `removed` (-1: none) is gone. */
static void check_keys(const char *prefix, int removed)
{
    char key[64];
    for (int i = 0; i < HA_KEYS; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        egm_status_t want = i == removed ? EGM_ERR_NOT_FOUND : EGM_OK;
        egm_status_t got = egm_test_get_seeded(client, key, 4096 + (size_t)i, (unsigned)i);
        if (got != want)
            fail_msg("%s after failover: %s, expected %s", key, egm_status_string(got),
                     egm_status_string(want));
    }
}

/* Puts n objects "<prefix>-<i>" of 4 KiB + 512 * i bytes over the client,
 * seeded by i (each in a slab of its client, over shm). */
static void put_sized(const char *prefix, int n)
{
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096 + 512 * (size_t)i, (unsigned)i),
                         EGM_OK);
    }
}

/* Every object of put_sized reads back exactly from a new leader (retried
 * while the client finds it). */
static void check_sized(const char *prefix, int n)
{
    char key[64];
    for (int i = 0; i < n; i++) {
        snprintf(key, sizeof(key), "%s-%d", prefix, i);
        egm_status_t got = EGM_ERR_UNREACHABLE;
        for (uint64_t until = egm__now_ms() + WAIT_MS;
             got == EGM_ERR_UNREACHABLE && egm__now_ms() < until; egm__sleep_ms(50))
            got = egm_test_get_seeded(client, key, 4096 + 512 * (size_t)i, (unsigned)i);
        if (got != EGM_OK)
            fail_msg("%s: %s at the new leader", key, egm_status_string(got));
    }
}

/* Waits until the master on http port `want` leads; the other (if any) stands by. */
static long long wait_leads(unsigned want, unsigned other)
{
    char role[32], orole[32];
    long long epoch = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50)) {
        role_of(want, role, sizeof(role), &epoch);
        if (strcmp(role, "leader") != 0)
            continue;
        if (other != 0) {
            role_of(other, orole, sizeof(orole), NULL);
            assert_string_equal(orole, "standby");
        }
        return epoch;
    }
    fail_msg("the master on http port %u did not lead within %d ms", want, WAIT_MS);
    return 0;
}

/* Starts master A on endpoints, waits until it leads, then B, which stands
 * by: the tests know which to kill. Answers A's epoch. */
#define HA_FLAGS(endpoints, cache_ms)                                                              \
    {                                                                                              \
        "--enable-ha", "true", "--etcd-endpoints", (endpoints), "--ha-lease-ttl", ttl_text(),      \
            "--ha-early-grants", early_grants != NULL ? early_grants : "true",                     \
            (cache_ms) != NULL ? "--location-cache-ms" : NULL, (cache_ms), NULL                    \
    }

static long long start_pair(const char *endpoints, egm_test_cluster_t *a, unsigned *http_a,
                            egm_test_cluster_t *b, unsigned *http_b, const char *cache_ms)
{
    const char *ha[] = HA_FLAGS(endpoints, cache_ms);
    assert_int_equal(egm_test_start_master_http(a, ha, http_a), 0);
    long long epoch = wait_leads(*http_a, 0);
    assert_int_equal(egm_test_start_master_http(b, ha, http_b), 0);
    assert_int_equal(wait_leads(*http_a, *http_b), epoch);
    return epoch;
}

/* etcd, A leading and B in sync, and a provider following the leader
 * through etcd (ma.master_addr becomes etcd://...). Answers A's epoch. */
static long long pair_in_sync(unsigned *http_a, unsigned *http_b)
{
    start_etcd(1);
    long long epoch_a = start_pair(etcd_members[0].endpoint, &ma, http_a, &mb, http_b, NULL);
    wait_in_sync(*http_a, 1);
    memcpy(ma.master_addr, "etcd://", 7);
    memcpy(ma.master_addr + 7, etcd_members[0].endpoint, strlen(etcd_members[0].endpoint) + 1);
    assert_true(egm_test_start_provider(&ma, "64MiB", NULL) >= 0);
    return epoch_a;
}

static void test_failover(void **state)
{
    (void)state;
    start_etcd(1);
    /* EGM_TEST_HA_CACHE_MS: the masters' location_cache_ms (default: theirs), to measure
     * failover under another bound. */
    const char *cache_ms = getenv("EGM_TEST_HA_CACHE_MS");
    const char *ha[] = HA_FLAGS(etcd_members[0].endpoint, cache_ms);
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = start_pair(etcd_members[0].endpoint, &ma, &http_a, &mb, &http_b, cache_ms);

    /* A standby answers no RPC: a client pointed at it cannot start. */
    egm_client_t *direct = egm_test_client(&mb, "tcp", NULL);
    assert_null(direct);

    /* Provider and client follow the leader through etcd. */
    assert_true(strlen(etcd_members[0].endpoint) + 8 <= sizeof(ma.master_addr));
    memcpy(ma.master_addr, "etcd://", 7);
    memcpy(ma.master_addr + 7, etcd_members[0].endpoint, strlen(etcd_members[0].endpoint) + 1);
    assert_true(egm_test_start_provider(&ma, "64MiB", NULL) >= 0);
    client = egm_test_client(&ma, "tcp", NULL);
    assert_non_null(client);
    assert_int_equal(egm_test_put_seeded(client, "before", 65536, 1), EGM_OK);
    /* Objects put before B holds A's state come over in its snapshot; those put after, in
     * A's journal, each answered only once B has it. */
    put_keys("snap");
    wait_in_sync(http_a, 1);
    put_keys("journal");
    assert_int_equal(egm_remove(client, "journal-7", 1), EGM_OK);

    /* `egmstore ls` lists both masters with their roles (members renew every TTL / 3). */
    char out[8192], want_a[128], want_b[128];
    snprintf(want_a, sizeof(want_a), "127.0.0.1:%u", ma.master_port);
    snprintf(want_b, sizeof(want_b), "127.0.0.1:%u", mb.master_port);
    const char *ls[] = {"ls", NULL};
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(100)) {
        assert_int_equal(egm_test_cli(&ma, ls, NULL, 0, out, sizeof(out)), 0);
        if (strstr(out, want_b) != NULL)
            break;
    }
    const char *la = strstr(out, want_a), *lb = strstr(out, want_b);
    if (la == NULL || lb == NULL)
        fail_msg("ls does not list both masters:\n%s", out);
    assert_true(strncmp(la + strcspn(la, " "), " ", 1) == 0);
    assert_non_null(strstr(la, "leader"));
    assert_true(strstr(la, "leader") < strchr(la, '\n'));
    assert_true(strstr(lb, "standby") != NULL && strstr(lb, "standby") < strchr(lb, '\n'));
    assert_int_equal(egm_test_get_seeded(client, "before", 65536, 1), EGM_OK);

    /* The leader dies. */
    uint64_t killed = egm__now_ms();
    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    egm_status_t s = EGM_ERR_UNREACHABLE;
    while (s != EGM_OK && egm__now_ms() - killed < WAIT_MS) {
        s = egm_test_put_seeded(client, "after", 65536, 2);
        if (s != EGM_OK)
            egm__sleep_ms(20);
    }
    assert_int_equal(s, EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "after", 65536, 2), EGM_OK);
    uint64_t resumed = egm__now_ms();
    fprintf(stderr,
            "ha failover: first put and get %llu ms after the leader's SIGKILL "
            "(ha_lease_ttl %s s, location_cache_ms %s)\n",
            (unsigned long long)(resumed - killed), ttl_text(),
            cache_ms != NULL ? cache_ms : "1000");
    long long epoch_b = wait_leads(http_b, 0);
    assert_true(epoch_b > epoch_a);
    /* The client's metrics count the outage and say how long it lasted (from its first failed
     * ping: at most the kill-to-put time above). */
    char metrics[65536];
    double last = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; last <= 0 && egm__now_ms() < until;
         egm__sleep_ms(50)) {
        egm_client_metrics(client, metrics, sizeof(metrics));
        const char *l = strstr(metrics, "\negm_client_master_last_outage_seconds ");
        last = l != NULL ? atof(l + strlen("\negm_client_master_last_outage_seconds ")) : 0;
    }
    assert_true(last > 0 && last * 1000 <= (double)(egm__now_ms() - killed));
    assert_non_null(strstr(metrics, "\negm_client_master_outages_total 1\n"));
    /* Nothing committed under A is lost, and what A removed stays removed. */
    assert_int_equal(egm_test_get_seeded(client, "before", 65536, 1), EGM_OK);
    check_keys("snap", -1);
    check_keys("journal", 7);

    /* The old leader, restarted, stands by, gets B's state, and takes over from B in turn. */
    int code;
    egm__process_wait(&ma.master, 5000, &code);
    unsigned http_a2 = 0;
    assert_int_equal(egm_test_start_master_http(&ma2, ha, &http_a2), 0);
    assert_int_equal(wait_leads(http_b, http_a2), epoch_b);
    wait_in_sync(http_b, 1);
    put_keys("second");
    assert_int_equal(egm__process_signal(&mb.master, SIGKILL), EGM_OK);
    long long epoch_a2 = wait_leads(http_a2, 0);
    assert_true(epoch_a2 > epoch_b);
    s = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS; s != EGM_OK && egm__now_ms() < until;) {
        s = egm_test_get_seeded(client, "before", 65536, 1);
        if (s != EGM_OK)
            egm__sleep_ms(20);
    }
    assert_int_equal(s, EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "after", 65536, 2), EGM_OK);
    check_keys("snap", -1);
    check_keys("journal", 7);
    check_keys("second", -1);
}

/* A leader that cannot reach etcd (stopped with SIGSTOP) stops at its
 * fence and its process exits with status 1; once etcd is back the standby
 * (or anyone) leads with a higher epoch. */
static void test_cut_off_leader_exits(void **state)
{
    (void)state;
    start_etcd(1);
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = start_pair(etcd_members[0].endpoint, &ma, &http_a, &mb, &http_b, NULL);
    wait_in_sync(http_a, 1); /* else B would wait before taking over without A's state */
    assert_int_equal(egm__process_signal(&etcd_members[0].proc, SIGSTOP), EGM_OK);
    int code = -1;
    assert_int_equal(egm__process_wait(&ma.master, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 1);
    assert_int_equal(egm__process_signal(&etcd_members[0].proc, SIGCONT), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
}

/* Nothing a leader acknowledged is missing at the next one, when the leader
 * loses its lease while a change waits for its standby: with the standby and
 * etcd stopped (SIGSTOP), a put to the leader waits for the standby; the
 * leader then drops it, cannot write the in-sync set without etcd, and
 * loses its lease; the standby, still listed, takes over once both resume.
 * Whatever the put returned, OK means readable at the new leader. (The
 * standby, resumed, may still apply the batch left in its socket: then the
 * object is there even though the put reported UNREACHABLE, which is
 * allowed; and for the same reason an acknowledgement sent without waiting
 * for the standby would pass here: what fails is a change acknowledged but
 * never sent, e.g. one the journal does not carry.) */
static void test_unconfirmed_change_not_acknowledged(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    /* The client waits longer than the leader takes to let go (its wait for
     * the standby, its etcd calls, its fence). */
    const char *pairs[] = {"rpc_timeout_ms=60000", NULL};
    client = egm_test_client(&ma, "tcp", pairs);
    assert_non_null(client);
    assert_int_equal(egm_test_put_seeded(client, "warm", 4096, 1), EGM_OK); /* holds a slab */

    assert_int_equal(egm__process_signal(&mb.master, SIGSTOP), EGM_OK);
    assert_int_equal(egm__process_signal(&etcd_members[0].proc, SIGSTOP), EGM_OK);
    egm_status_t put = egm_test_put_seeded(client, "unconfirmed", 4096, 2);
    int code = -1;
    assert_int_equal(egm__process_wait(&ma.master, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 1);
    assert_int_equal(egm__process_signal(&etcd_members[0].proc, SIGCONT), EGM_OK);
    assert_int_equal(egm__process_signal(&mb.master, SIGCONT), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    /* Until the client has found B (the answers before that say nothing). */
    egm_status_t got = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         got != EGM_OK && got != EGM_ERR_NOT_FOUND && egm__now_ms() < until; egm__sleep_ms(100))
        got = egm_test_get_seeded(client, "unconfirmed", 4096, 2);
    printf("put while the standby and etcd were stopped: %s; get at the new leader: %s\n",
           egm_status_string(put), egm_status_string(got));
    if (put == EGM_OK && got != EGM_OK)
        fail_msg("the put was acknowledged but the new leader answers %s for its object",
                 egm_status_string(got));
    assert_true(got == EGM_OK || got == EGM_ERR_NOT_FOUND);
}

/* Commits described by their slab logs (shm puts) are answered without the
 * standby, and a slab granted before the standby held the grant serves
 * puts that survive: while it is stopped (SIGSTOP) puts still succeed; the leader is
 * then killed and the standby, let go, takes over: it never received those
 * commits (the leader's sender was waiting for its batch before them:
 * fill_in_flight), reads them all from the slabs' logs and serves every one byte for
 * byte, while an object removed before (confirmed) stays removed. Without
 * the logs read, those puts answer NOT_FOUND at the new leader. */
#define DESCRIBED_KEYS 48
#define STREAMED_KEYS 16

/* The client's put phases (docs/egm-pool.md) after `puts` single puts, each
 * into a slab with a log: placing and logging took time, and the phases,
 * which follow one another in a single put, add up to no more than the
 * calls (a phase counted twice would). */
static void check_put_phases(egm_client_t *c, int puts)
{
    static char text[65536];
    assert_true(egm_client_metrics(c, text, sizeof(text)) < sizeof(text));
    assert_int_equal(egm_test_metric_in(text, "egm_client_put_calls_total"), puts);
    double call = egm_test_metric_in(text, "egm_client_put_call_seconds_total"), parts = 0;
    static const char *const phases[] = {"rpc", "transfer", "place", "log"};
    for (size_t i = 0; i < sizeof(phases) / sizeof(phases[0]); i++) {
        char name[64];
        snprintf(name, sizeof(name), "egm_client_put_%s_seconds_total", phases[i]);
        double s = egm_test_metric_in(text, name);
        if (!(s > 0))
            fail_msg("%s: %g after %d puts", name, s, puts);
        parts += s;
    }
    if (parts > call * 1.001)
        fail_msg("put phases %g s, more than the calls' %g s", parts, call);
    /* a get has no place or log phase */
    assert_null(strstr(text, "egm_client_get_place"));
    assert_null(strstr(text, "egm_client_get_log"));
}

/* Until the leader's in-sync standby confirmed every change, with no request
 * waiting (its sender takes described changes on its own). */
static void wait_confirmed(unsigned http_leader)
{
    double lag = -1;
    for (uint64_t until = egm__now_ms() + WAIT_MS; lag != 0 && egm__now_ms() < until;
         egm__sleep_ms(20))
        lag = egm_test_metric(http_leader, "egm_master_ha_journal_lag_bytes");
    if (lag != 0)
        fail_msg("the standby did not confirm the leader's changes within %d ms (%.0f bytes left)",
                 WAIT_MS, lag);
}

/* Stops a master (SIGSTOP) and waits until it is stopped. */
static void stop_master(egm_test_cluster_t *m)
{
    assert_int_equal(egm_test_process_stop(&m->master), 0);
}

/* Kills the leader A (SIGKILL), lets the stopped standby B go, and waits
 * until B leads past epoch_a and the client reads `key` (put with `seed`)
 * through it. */
static void fail_over_to_b(unsigned http_b, long long epoch_a, const char *key, uint64_t size,
                           unsigned seed)
{
    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_signal(&mb.master, SIGCONT), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    egm_status_t got = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         got != EGM_OK && got != EGM_ERR_NOT_FOUND && egm__now_ms() < until; egm__sleep_ms(50))
        got = egm_test_get_seeded(client, key, size, seed);
    assert_int_equal(got, EGM_OK);
}

#define SENT_BY_THREAD "egm_master_ha_journal_batches_total{sender=\"thread\"}"
#define SENT_BY_REQUEST "egm_master_ha_journal_batches_total{sender=\"request\"}"

/* A test that leaves the filler's batch unanswered (fill_in_flight) needs
 * this TTL: half a lease without an answer drops B from the in-sync set
 * (5 s), and a dropped B would not take over. */
#define FILLER_TTL_S 10

/* The leader's batches to B by sender, at one moment. */
typedef struct {
    double by_thread, by_request;
} sent_t;

/* With every change before confirmed: stops the standby B, puts "filler"
 * through `writer` and waits until the leader's sender thread took it in a
 * batch. The thread then waits for that batch's answer, which does not
 * come, and what the leader journals next, with no request waiting for it,
 * stays in its journal whatever the timing: B, let go after the leader's
 * death, learns it only from the slabs' logs. Answers the batches sent by
 * then (nothing_sent_since checks that no more went). */
static sent_t fill_in_flight(unsigned http_a, egm_client_t *writer)
{
    stop_master(&mb);
    sent_t sent = {.by_thread = egm_test_metric(http_a, SENT_BY_THREAD),
                   .by_request = egm_test_metric(http_a, SENT_BY_REQUEST)};
    double before = sent.by_thread;
    assert_int_equal(egm_test_put_seeded(writer, "filler", 4096, 500), EGM_OK);
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         sent.by_thread == before && egm__now_ms() < until; egm__sleep_ms(1))
        sent.by_thread = egm_test_metric(http_a, SENT_BY_THREAD);
    if (sent.by_thread == before)
        fail_msg("the leader's sender did not send the filler's ops within %d ms", WAIT_MS);
    return sent;
}

/* B is still in the leader's in-sync set, and the leader sent it no batch
 * since fill_in_flight, by its thread or by a request. */
static void nothing_sent_since(unsigned http_a, sent_t sent)
{
    assert_int_equal(health_number(http_a, "standbys_in_sync"), 1);
    assert_true(egm_test_metric(http_a, SENT_BY_THREAD) == sent.by_thread);
    assert_true(egm_test_metric(http_a, SENT_BY_REQUEST) == sent.by_request);
}

static void test_described_commits_survive(void **state)
{
    (void)state;
    ttl_floor_s = FILLER_TTL_S;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL);
    assert_non_null(client);
    /* Keys longer than a log entry holds (200 bytes) get none: the slab they
     * take is granted (B confirms it) but its log is still empty when B
     * stops, so the first Commit answered without B is the slab's first
     * entry, which only the grant's `log` lets B read. */
    char warm[256], removed[256];
    snprintf(warm, sizeof(warm), "warm-%0240d", 1);
    snprintf(removed, sizeof(removed), "removed-%0240d", 2);
    assert_int_equal(egm_test_put_seeded(client, warm, 4096, 1), EGM_OK); /* holds a slab */
    assert_int_equal(egm_test_put_seeded(client, removed, 4096, 2), EGM_OK);
    assert_int_equal(egm_remove(client, removed, 1), EGM_OK); /* confirmed by B */

    /* Described Commits wake nobody: the leader's sender takes their ops on
     * its own, and B confirms them with no request waiting. Put by another
     * client, in a slab of its own: the warm slab's log stays empty. */
    streamer = egm_test_client(&ma, "shm", NULL);
    assert_non_null(streamer);
    char key[64];
    for (int i = 0; i < STREAMED_KEYS; i++) {
        snprintf(key, sizeof(key), "streamed-%d", i);
        assert_int_equal(egm_test_put_seeded(streamer, key, 512 + (size_t)i, (unsigned)i), EGM_OK);
    }
    /* Its slab (4 MiB of the 64 MiB pool, nothing freed unconfirmed in it)
     * was granted before B held the grant: its first Commit waited for B to
     * hold the grant unless B had it by then (that one is not counted: it
     * waited), and the new leader below serves its keys. */
    assert_true(egm_test_metric(http_a, "egm_master_ha_commits_described_total") >=
                STREAMED_KEYS - 1);
    assert_true(egm_test_metric(http_a, "egm_master_slab_grants_early_total") >= 1);
    wait_confirmed(http_a);
    assert_int_equal(health_number(http_a, "standbys_in_sync"), 1); /* the lag counts B */
    check_put_phases(streamer, STREAMED_KEYS);

    /* The filler goes into the streamer's slab: the warm slab's log stays
     * empty until the described puts below (the streamer stays until the
     * teardown). */
    sent_t sent = fill_in_flight(http_a, streamer);
    for (int i = 0; i < DESCRIBED_KEYS; i++) {
        snprintf(key, sizeof(key), "described-%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 1000 + 97 * (size_t)i, (unsigned)i),
                         EGM_OK);
    }
    /* The leader says it answered them without its standby. */
    double described = egm_test_metric(http_a, "egm_master_ha_commits_described_total");
    fprintf(stderr,
            "described commits: %.0f answered without waiting (%d puts with the standby "
            "stopped)\n",
            described, DESCRIBED_KEYS);
    assert_true(described >= STREAMED_KEYS + DESCRIBED_KEYS); /* filler: 1, streamed: 15+ */
    nothing_sent_since(http_a, sent);
    uint64_t killed = egm__now_ms();
    fail_over_to_b(http_b, epoch_a, warm, 4096, 1);
    egm_status_t got;
    fprintf(stderr, "described commits: the new leader served %llu ms after the kill\n",
            (unsigned long long)(egm__now_ms() - killed));
    /* B read them all from the warm slab's log, which was empty when B
     * stopped (only the grant's `log` says to read it), and the filler from
     * the streamer's unless its batch, written while B was stopped, reached
     * B when it went on (48 then, else 49). */
    double taken = egm_test_metric(http_b, "egm_master_ha_takeover_puts_total");
    fprintf(stderr, "described commits: the new leader took %.0f objects from put entries\n",
            taken);
    if (taken != DESCRIBED_KEYS && taken != DESCRIBED_KEYS + 1)
        fail_msg("the new leader took %.0f objects from put entries, not %d (or %d)", taken,
                 DESCRIBED_KEYS, DESCRIBED_KEYS + 1);
    assert_int_equal(egm_test_get_seeded(client, "filler", 4096, 500), EGM_OK);
    for (int i = 0; i < DESCRIBED_KEYS; i++) {
        snprintf(key, sizeof(key), "described-%d", i);
        got = egm_test_get_seeded(client, key, 1000 + 97 * (size_t)i, (unsigned)i);
        if (got != EGM_OK)
            fail_msg("%s, acknowledged while the standby was stopped: %s at the new leader", key,
                     egm_status_string(got));
    }
    for (int i = 0; i < STREAMED_KEYS; i++) {
        snprintf(key, sizeof(key), "streamed-%d", i);
        assert_int_equal(egm_test_get_seeded(client, key, 512 + (size_t)i, (unsigned)i), EGM_OK);
    }
    assert_int_equal(egm_test_get_seeded(client, removed, 4096, 2), EGM_ERR_NOT_FOUND);
    /* They are the new leader's own: a new put beside them, and their removal. */
    assert_int_equal(egm_test_put_seeded(client, "after", 4096, 3), EGM_OK);
    assert_int_equal(egm_remove(client, "described-0", 1), EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "described-0", 1000, 0), EGM_ERR_NOT_FOUND);
}

/* Removes described by removal entries in the slab that held each object
 * (docs/ha.md "Removes the pool describes") are answered without the
 * standby: with it stopped (SIGSTOP), plain removes of the client's own
 * objects, single and batched, return at once and it stays in the in-sync
 * set (a remove that waited would have it dropped after half a lease); a key
 * removed and put again reads its new bytes. The leader is killed and the
 * standby, let go, takes over: it never received those removes (the
 * leader's sender was waiting for its batch before them: fill_in_flight),
 * takes all 13 from the slab's log, and neither serves a removed object nor
 * loses the one put after the removal. Without the entries applied, the
 * removed objects come back at the new leader, and the key put again reads
 * its old bytes (its new entry loses to the mirror's object). */
#define REMOVED_KEYS 12

static void test_described_removes_survive(void **state)
{
    (void)state;
    ttl_floor_s = FILLER_TTL_S;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL);
    assert_non_null(client);
    char key[64];
    for (int i = 0; i < REMOVED_KEYS; i++) {
        snprintf(key, sizeof(key), "gone-%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096, (unsigned)i), EGM_OK);
        snprintf(key, sizeof(key), "stays-%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096, 100u + (unsigned)i), EGM_OK);
    }
    assert_int_equal(egm_test_put_seeded(client, "again", 4096, 1), EGM_OK);
    wait_confirmed(http_a); /* B holds every object put so far */

    sent_t sent = fill_in_flight(http_a, client);
    for (int i = 0; i < REMOVED_KEYS / 2; i++) {
        snprintf(key, sizeof(key), "gone-%d", i);
        assert_int_equal(egm_remove(client, key, 0), EGM_OK);
    }
    char names[REMOVED_KEYS / 2][64];
    const char *batch[REMOVED_KEYS / 2];
    egm_status_t results[REMOVED_KEYS / 2];
    for (int i = 0; i < REMOVED_KEYS / 2; i++) {
        snprintf(names[i], sizeof(names[i]), "gone-%d", REMOVED_KEYS / 2 + i);
        batch[i] = names[i];
    }
    assert_int_equal(egm_batch_remove(client, REMOVED_KEYS / 2, batch, 0, results), EGM_OK);
    for (int i = 0; i < REMOVED_KEYS / 2; i++)
        assert_int_equal(results[i], EGM_OK);
    assert_int_equal(egm_remove(client, "again", 0), EGM_OK);
    assert_int_equal(egm_test_put_seeded(client, "again", 4096, 2), EGM_OK);
    double described = egm_test_metric(http_a, "egm_master_ha_removes_described_total");
    fprintf(stderr,
            "described removes: %.0f answered without waiting (%d removes with the "
            "standby stopped)\n",
            described, REMOVED_KEYS / 2 + 2);
    if (described != REMOVED_KEYS / 2 + 2)
        fail_msg("%.0f of %d removes were answered without the standby", described,
                 REMOVED_KEYS / 2 + 2);
    nothing_sent_since(http_a, sent);

    fail_over_to_b(http_b, epoch_a, "stays-0", 4096, 100);
    /* B read every removal in the logs: the 12 objects and the first "again". */
    double taken = egm_test_metric(http_b, "egm_master_ha_takeover_removals_total");
    fprintf(stderr, "described removes: the new leader took %.0f objects by removal entries\n",
            taken);
    if (taken != REMOVED_KEYS + 1)
        fail_msg("the new leader took %.0f objects by removal entries, not %d", taken,
                 REMOVED_KEYS + 1);
    egm_status_t got;
    assert_int_equal(egm_test_get_seeded(client, "filler", 4096, 500), EGM_OK);
    for (int i = 0; i < REMOVED_KEYS; i++) {
        snprintf(key, sizeof(key), "gone-%d", i);
        got = egm_test_get_seeded(client, key, 4096, (unsigned)i);
        if (got != EGM_ERR_NOT_FOUND)
            fail_msg("%s, removed while the standby was stopped: %s at the new leader", key,
                     egm_status_string(got));
        snprintf(key, sizeof(key), "stays-%d", i);
        assert_int_equal(egm_test_get_seeded(client, key, 4096, 100u + (unsigned)i), EGM_OK);
    }
    got = egm_test_get_seeded(client, "again", 4096, 2);
    if (got != EGM_OK)
        fail_msg("\"again\", removed and put again while the standby was stopped: %s for its new "
                 "bytes at the new leader (old bytes: %s)",
                 egm_status_string(got),
                 egm_status_string(egm_test_get_seeded(client, "again", 4096, 1)));
}

/* A Remove that goes unanswered leaves no removal entry a later leader
 * applies: the client overwrites the entries it wrote with void ones
 * (client/slabs.h egm__wslabs_removed). The leader and the standby are
 * stopped (SIGSTOP) while the client's removes, batched then single, wait:
 * they time out (the batch writes its two entries; by the single one no
 * Commit has confirmed the slab for longer than its bound, so it writes
 * none). The leader is then killed without ever reading them, and the
 * standby, which holds every object, takes over and reads the slab's log:
 * the objects stay, byte for byte, and it took none by a removal entry.
 * Without the void writes the new leader applies the batch's entries and
 * those two objects are gone. */
static void test_unanswered_remove_voided(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    /* The removes time out long before the slab's lease ends. */
    const char *pairs[] = {"rpc_timeout_ms=3000", NULL};
    client = egm_test_client(&ma, "shm", pairs);
    assert_non_null(client);
    assert_int_equal(egm_test_put_seeded(client, "warm", 4096, 9), EGM_OK);
    char key[64];
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "kept-%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096, (unsigned)i), EGM_OK);
    }
    wait_confirmed(http_a); /* B holds every object */

    /* B too, until A is killed: a leader taking over before the void
     * writes would read the entries (the outcome of an unanswered Remove is
     * unknown). */
    stop_master(&ma);
    stop_master(&mb);
    const char *batch[] = {"kept-0", "kept-1"};
    egm_status_t results[2];
    egm_status_t batched = egm_batch_remove(client, 2, batch, 0, results);
    egm_status_t single = egm_remove(client, "kept-2", 0);
    fprintf(stderr, "removes while the leader was stopped: a batch %s (%s, %s), a single %s\n",
            egm_status_string(batched), egm_status_string(results[0]),
            egm_status_string(results[1]), egm_status_string(single));
    assert_true(batched != EGM_OK || (results[0] != EGM_OK && results[1] != EGM_OK));
    assert_int_not_equal(single, EGM_OK);

    fail_over_to_b(http_b, epoch_a, "warm", 4096, 9);
    for (int i = 0; i < 3; i++) {
        snprintf(key, sizeof(key), "kept-%d", i);
        egm_status_t got = egm_test_get_seeded(client, key, 4096, (unsigned)i);
        if (got != EGM_OK)
            fail_msg("%s, whose remove went unanswered: %s at the new leader", key,
                     egm_status_string(got));
    }
    assert_int_equal(egm_test_metric(http_b, "egm_master_ha_takeover_removals_total"), 0);
}

/* With ha_early_grants false every SlabGrant waits for the standby: none is
 * answered early where test_described_commits_survive's first one is (a
 * fresh pool, nothing freed), and the objects put in such slabs are served
 * by the next leader after the leader's SIGKILL. */
static void test_grants_wait_when_set(void **state)
{
    (void)state;
    early_grants = "false";
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL);
    assert_non_null(client);
    put_sized("waited", 16);
    double grants = egm_test_metric(http_a, "egm_master_slab_grants_total");
    double early = egm_test_metric(http_a, "egm_master_slab_grants_early_total");
    fprintf(stderr, "ha_early_grants false: %.0f SlabGrants, %.0f answered early\n", grants, early);
    assert_true(grants >= 1);
    if (early != 0)
        fail_msg("%.0f SlabGrants were answered early with ha_early_grants false", early);
    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    check_sized("waited", 16);
}

/* Lets a process stopped with SIGSTOP go on after `ms`. */
typedef struct {
    egm_process_t *proc;
    unsigned ms;
} resume_t;

static void *resume_later(void *arg)
{
    resume_t *r = arg;
    egm__sleep_ms(r->ms);
    egm__process_signal(r->proc, SIGCONT);
    return NULL;
}

/* A put on its own thread. */
typedef struct {
    egm_client_t *client;
    const char *key;
    size_t len;
    unsigned seed;
    egm_status_t status;
} putter_t;

static void *put_main(void *arg)
{
    putter_t *p = arg;
    p->status = egm_test_put_seeded(p->client, p->key, p->len, p->seed);
    return NULL;
}

/* With the standby stopped, the client's first put (key, 8192 bytes, seed) on
 * a thread of its own, until the leader at http_a answered its slab's grant
 * early and committed the object: its Commit then waits for the standby to
 * hold the grant. */
static void first_put_waits(unsigned http_a, putter_t *p, pthread_t *t)
{
    stop_master(&mb);
    assert_int_equal(pthread_create(t, NULL, put_main, p), 0);
    double early = 0, commits = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         (early < 1 || commits < 1) && egm__now_ms() < until; egm__sleep_ms(5)) {
        early = egm_test_metric(http_a, "egm_master_slab_grants_early_total");
        commits = egm_test_metric(http_a, "egm_master_commits_total");
    }
    if (early < 1 || commits < 1)
        fail_msg("the leader answered %.0f grants early (its fence was near?) and committed %.0f "
                 "objects within %d ms: the test saw nothing",
                 early, commits, WAIT_MS);
}

/* A grant answered early but so late that the writer's bound to start its
 * copies (place_within_ms of sending the request, less its slack) ran out:
 * the writer copies nothing into that slab and places the key again, with a
 * grant that waits for the standby (docs/ha.md "Grants the standbys do not
 * hold yet"). The leader is stopped (SIGSTOP, waited for) before the
 * writer's first put, and let go 800 ms later: the answer cannot come
 * sooner. Its fence stays more than a second away (a 4 s lease), so it
 * answers early. */
static void test_late_grant_placed_again(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL); /* no slab yet: its first put asks */
    assert_non_null(client);
    /* Stopped before the request leaves (its RPC threads poll: a request
     * sent while the stop is on its way could be answered at once). */
    stop_master(&ma);
    resume_t r = {.proc = &ma.master, .ms = 800}; /* more than place_within_ms (600) */
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, resume_later, &r), 0);
    egm_status_t put = egm_test_put_seeded(client, "late", 8192, 5);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(put, EGM_OK);
    double grants = egm_test_metric(http_a, "egm_master_slab_grants_total");
    double early = egm_test_metric(http_a, "egm_master_slab_grants_early_total");
    fprintf(stderr, "late grant: %.0f SlabGrants, %.0f answered early\n", grants, early);
    if (early < 1)
        fail_msg("the leader answered no grant early (its fence was near?): the test saw nothing");
    if (grants - early < 1)
        fail_msg("the writer kept a grant answered after its bound: no grant that waits followed");
    assert_int_equal(egm_test_get_seeded(client, "late", 8192, 5), EGM_OK);
    /* The next put goes into the waited grant's slab: no grant more. */
    assert_int_equal(egm_test_put_seeded(client, "after-late", 4096, 6), EGM_OK);
    assert_true(egm_test_metric(http_a, "egm_master_slab_grants_total") == grants);
    assert_int_equal(egm_test_get_seeded(client, "after-late", 4096, 6), EGM_OK);
}

#define REUSED_KEYS 32

/* A slab granted early (docs/ha.md "Grants the standbys do not hold yet")
 * that the standby did not confirm: with the standby stopped, the writer's
 * first put asks for a slab, is answered early, copies, and its Commit waits
 * for the standby to hold the grant; the leader is killed meanwhile and the
 * standby, let go, leads. The put's object reads back exactly if the put
 * succeeded, and is exact or not found if it failed. Another writer's
 * objects, and the first writer's next ones, read back exactly. (On the VM
 * the standby, let go, still applied the grant and the Commit's ops that the
 * leader had written to its socket: the put failed, its object is there,
 * and the slab stays the first writer's. Where they are lost instead, the
 * new leader hands the space out again, and the first writer must not copy
 * into its old slab: its copies there stop within place_within_ms of its
 * request, long before a new leader can lead.) */
static void test_unconfirmed_early_slab_failover(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL); /* no slab yet: its first put asks */
    assert_non_null(client);
    putter_t p = {.client = client, .key = "early", .len = 8192, .seed = 5};
    pthread_t t;
    /* Killed while the Commit waits (half a lease, then the leader would take
     * the standby out of the in-sync set: well before). */
    first_put_waits(http_a, &p, &t);
    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_signal(&mb.master, SIGCONT), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    assert_int_equal(pthread_join(t, NULL), 0);
    egm_status_t got = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         got != EGM_OK && got != EGM_ERR_NOT_FOUND && egm__now_ms() < until; egm__sleep_ms(50))
        got = egm_test_get_seeded(client, "early", 8192, 5);
    fprintf(stderr, "put into the unconfirmed early slab: %s; get at the new leader: %s\n",
            egm_status_string(p.status), egm_status_string(got));
    if (p.status == EGM_OK && got != EGM_OK)
        fail_msg("the put was acknowledged but the new leader answers %s", egm_status_string(got));
    /* A put that failed may still have its object whole (the standby, let
     * go, applied what the leader had written to its socket: the grant, the
     * Commit's ops), never a torn one (the get checks every byte). */
    assert_true(got == EGM_OK || got == EGM_ERR_NOT_FOUND);

    /* Another writer: its first slab comes from the same space. */
    streamer = egm_test_client(&ma, "shm", NULL);
    assert_non_null(streamer);
    char key[64];
    for (int i = 0; i < REUSED_KEYS; i++) {
        snprintf(key, sizeof(key), "reused-%d", i);
        assert_int_equal(egm_test_put_seeded(streamer, key, 8192, 100 + (unsigned)i), EGM_OK);
    }
    /* The first writer puts again: into a slab of the new leader. */
    for (int i = 0; i < REUSED_KEYS; i++) {
        snprintf(key, sizeof(key), "again-%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 8192, 200 + (unsigned)i), EGM_OK);
    }
    for (int i = 0; i < REUSED_KEYS; i++) {
        snprintf(key, sizeof(key), "reused-%d", i);
        got = egm_test_get_seeded(streamer, key, 8192, 100 + (unsigned)i);
        if (got != EGM_OK)
            fail_msg("%s, put at the new leader: %s after the first writer's puts", key,
                     egm_status_string(got));
        snprintf(key, sizeof(key), "again-%d", i);
        assert_int_equal(egm_test_get_seeded(client, key, 8192, 200 + (unsigned)i), EGM_OK);
    }
}

/* A writer places new objects in a slab granted early only within
 * place_within_ms (600 ms) of its request, until a Commit there is answered
 * (docs/ha.md "Grants the standbys do not hold yet"). With the standby
 * stopped, the first put's Commit waits for it; a second put of the same
 * client 500 ms after the grant was seen answered, past that bound (less the
 * writer's slack) but within the location bound (location_cache_ms, 1000 ms)
 * that would stop it too, asks for a new slab. Both puts succeed once the
 * leader stops waiting for the standby (after half a lease), and read back. */
static void test_early_slab_closes(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL); /* no slab yet: its first put asks */
    assert_non_null(client);
    putter_t p = {.client = client, .key = "first", .len = 8192, .seed = 1};
    pthread_t t;
    first_put_waits(http_a, &p, &t);
    uint64_t seen = egm__now_ms();
    egm__sleep_ms(500);
    double grants = egm_test_metric(http_a, "egm_master_slab_grants_total");
    uint64_t second_at = egm__now_ms() - seen;
    egm_status_t second = egm_test_put_seeded(client, "second", 8192, 2);
    assert_int_equal(pthread_join(t, NULL), 0);
    double after = egm_test_metric(http_a, "egm_master_slab_grants_total");
    fprintf(stderr,
            "early slab: the second put began %llu ms after the first's grant was seen; "
            "SlabGrants %.0f before it, %.0f after\n",
            (unsigned long long)second_at, grants, after);
    if (after < grants + 1)
        fail_msg("the second put, %llu ms after the grant, went into the slab granted early "
                 "(no new SlabGrant), past place_within_ms with no Commit there answered",
                 (unsigned long long)second_at);
    assert_int_equal(p.status, EGM_OK);
    assert_int_equal(second, EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "first", 8192, 1), EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "second", 8192, 2), EGM_OK);
    assert_int_equal(egm__process_signal(&mb.master, SIGCONT), EGM_OK);
}

/* A leader stopped with SIGTERM hands over at once: it gives its standby
 * in sync every change it lacks and leaves it in the in-sync set, then
 * resigns; the standby leads within a poll (ha_lease_ttl / 8), not after the
 * 5 x ha_lease_ttl a standby missing from the set waits (which it did
 * before: 10.3 s at a 2 s lease on the VM), with every object, those put
 * over shm (whose grants and Commits did not all wait for it) included. */
static void test_resign_hands_over(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    client = egm_test_client(&ma, "shm", NULL);
    assert_non_null(client);
    uint64_t first_put = egm__now_ms();
    put_sized("resign", 16);
    /* Their slab was granted early: its writer may copy into it until
     * place_within_ms + the copies' allowance after the answer, and the
     * leader resigns only after that (no new leader meanwhile). */
    assert_true(egm_test_metric(http_a, "egm_master_slab_grants_early_total") >= 1);
    uint64_t stopped = egm__now_ms();
    assert_int_equal(egm__process_signal(&ma.master, SIGTERM), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    uint64_t led = egm__now_ms();
    uint64_t took = led - stopped, ttl_ms = (uint64_t)atoi(ttl_text()) * 1000;
    fprintf(stderr,
            "resign: the standby led %llu ms after the leader's SIGTERM, %llu ms after the "
            "first put began\n",
            (unsigned long long)took, (unsigned long long)(led - first_put));
    if (led < first_put + EGM_SLAB_EARLY_PLACE_MS + EGM_SLAB_EARLY_COPY_MS)
        fail_msg("the standby led %llu ms after a grant answered early: the leader resigned while "
                 "its writer could still copy into the slab",
                 (unsigned long long)(led - first_put));
    if (took >= 3 * ttl_ms)
        fail_msg("the standby took %llu ms to lead after the leader resigned (5 x ha_lease_ttl "
                 "is what a standby out of the in-sync set waits)",
                 (unsigned long long)took);
    int code = -1;
    assert_int_equal(egm__process_wait(&ma.master, WAIT_MS, &code), EGM_OK);
    check_sized("resign", 16);
}

/* The in-sync set in etcd (docs/ha.md "Taking over"): the epoch it was
 * written at, read now. */
static long long insync_epoch(void)
{
    egm_etcd_t *etcd;
    egm_etcd_kv_t kv;
    assert_int_equal(egm__etcd_create(etcd_members[0].endpoint, 2000, &etcd), EGM_OK);
    assert_int_equal(egm__etcd_get(etcd, "egmstore/egmstore/master/insync", &kv, NULL), EGM_OK);
    long long epoch = atoll(kv.value);
    egm__etcd_kv_cleanup(&kv);
    egm__etcd_destroy(etcd);
    return epoch;
}

/* A leader deposed while etcd works (stopped with SIGSTOP past its lease,
 * then let go) writes nothing to the in-sync set on its way out: the set is
 * its successor's by then. (Before, it took its standbys out of it, writing
 * the set at its own old epoch over the new leader's; the new leader's own
 * standbys would then have waited 5 x ha_lease_ttl at its death.) */
static void test_deposed_leader_leaves_insync(void **state)
{
    (void)state;
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = pair_in_sync(&http_a, &http_b);
    assert_int_equal(insync_epoch(), epoch_a);
    assert_int_equal(egm__process_signal(&ma.master, SIGSTOP), EGM_OK);
    long long epoch_b = wait_leads(http_b, 0);
    assert_true(epoch_b > epoch_a);
    long long written = -1;
    for (uint64_t until = egm__now_ms() + WAIT_MS; written != epoch_b && egm__now_ms() < until;
         egm__sleep_ms(50))
        written = insync_epoch();
    assert_int_equal(written, epoch_b); /* B wrote its own set at its takeover */
    assert_int_equal(egm__process_signal(&ma.master, SIGCONT), EGM_OK);
    int code = -1;
    assert_int_equal(egm__process_wait(&ma.master, WAIT_MS, &code), EGM_OK);
    assert_int_equal(code, 1); /* it found itself deposed and exited */
    if (insync_epoch() != epoch_b)
        fail_msg("the deposed leader (epoch %lld) wrote the in-sync set over its successor's "
                 "(epoch %lld): it now says epoch %lld",
                 epoch_a, epoch_b, insync_epoch());
}

/* etcd of three members: losing one (SIGKILL), wherever the masters'
 * calls were going, changes nothing (the leader keeps leading past several
 * lease renewals, puts go on); then the leader's death is still a failover
 * on the two members left. The member killed is usually etcd's own raft
 * leader: the two left elect another before they answer again (1 s of
 * election timeout, more after a split vote: 3 s seen in a TSan run on two
 * cores), so the masters' lease here is at least 8 s, as a deployment's
 * must outlast an etcd election (docs/ha.md). */
static void test_etcd_member_loss(void **state)
{
    (void)state;
    char endpoints[256], master_addr[300];
    ttl_floor_s = 8;
    start_etcd(3);
    snprintf(endpoints, sizeof(endpoints), "%s;%s;%s", etcd_members[0].endpoint,
             etcd_members[1].endpoint, etcd_members[2].endpoint);
    unsigned http_a = 0, http_b = 0;
    long long epoch_a = start_pair(endpoints, &ma, &http_a, &mb, &http_b, NULL);
    snprintf(master_addr, sizeof(master_addr), "etcd://%s", endpoints);
    const char *provider[] = {"--master", master_addr, NULL};
    assert_true(egm_test_start_provider(&ma, "16MiB", provider) >= 0);
    const char *pairs[] = {NULL, NULL};
    char pair[320];
    snprintf(pair, sizeof(pair), "master_server_addr=%s", master_addr);
    pairs[0] = pair;
    client = egm_test_client(&ma, "tcp", pairs);
    assert_non_null(client);

    /* The first member is the one every etcd call tries first. */
    assert_int_equal(egm__process_signal(&etcd_members[0].proc, SIGKILL), EGM_OK);
    int rounds = 2 * atoi(ttl_text()) * 2; /* two lease TTLs, a put every 500 ms */
    for (int i = 0; i < rounds; i++) {
        char key[16];
        snprintf(key, sizeof(key), "k%d", i);
        assert_int_equal(egm_test_put_seeded(client, key, 4096, (unsigned)i), EGM_OK);
        egm__sleep_ms(500);
    }
    assert_int_equal(wait_leads(http_a, http_b), epoch_a);

    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    assert_true(wait_leads(http_b, 0) > epoch_a);
    egm_status_t s = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS; s != EGM_OK && egm__now_ms() < until;
         egm__sleep_ms(20))
        s = egm_test_put_seeded(client, "after", 4096, 9);
    assert_int_equal(s, EGM_OK);
    assert_int_equal(egm_test_get_seeded(client, "after", 4096, 9), EGM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cut_off_leader_exits, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unconfirmed_change_not_acknowledged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_described_commits_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_described_removes_survive, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unanswered_remove_voided, setup, teardown),
        cmocka_unit_test_setup_teardown(test_grants_wait_when_set, setup, teardown),
        cmocka_unit_test_setup_teardown(test_late_grant_placed_again, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unconfirmed_early_slab_failover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_slab_closes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resign_hands_over, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deposed_leader_leaves_insync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_etcd_member_loss, setup, teardown),
    };
    /* EGM_TEST_FILTER: run only the cases it names (cmocka's pattern), e.g. while developing. */
    if (getenv("EGM_TEST_FILTER") != NULL)
        cmocka_set_test_filter(getenv("EGM_TEST_FILTER"));
    return cmocka_run_group_tests(tests, NULL, NULL);
}
