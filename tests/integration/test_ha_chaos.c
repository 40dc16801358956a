/* Chaos test of master HA (issue 19), driven by the reference model
 * (tests/support/model.h): an etcd of three members, three masters with
 * enable_ha, three providers (one segment each, room for everything: no
 * eviction) and two clients of this process following etcd://, both putting
 * with replica_num 2 (one placed per key by the master, one in slabs of its
 * own, 128 KiB each: a SlabGrant every few puts, most answered before the
 * standbys hold them, docs/ha.md). A background writer puts, re-puts and removes its own keys the
 * whole time, faults included. Until the time is up (EGM_CHAOS_SECONDS, default 75), the test
 * writes a round of puts of new keys, new versions and removes, then injects one fault, in
 * rotation:
 *  1. SIGKILL of the leader (found through each master's /health "role"):
 *     the test puts until one succeeds (the time from the kill is measured),
 *     waits for a new leader and restarts the old one as a standby;
 *  2. SIGKILL of a provider and a replacement started at once; the test waits
 *     until the leader has dropped the victim and its
 *     egm_master_objects_under_replicated reads 0 (re-replication done), so
 *     that the next provider kill never finds an object with one copy;
 *  3. SIGKILL of a standby, restarted;
 *  4. SIGKILL of one etcd member, held down for two lease TTLs of puts, then
 *     restarted.
 * After each fault and its recovery (one leader, two standbys in sync, every
 * process up), the writer pauses and every key the model knows is read back:
 * a committed key must answer its version byte for byte (a not-found is a
 * LOSS: no provider kill excuses any, since the one before was repaired), a
 * removed or never-stored key must be absent, an uncertain one (a put or
 * remove whose outcome a fault hid) may be any version it may hold, or
 * absent; every committed object must have its two replicas (StatKey) once
 * re-replication's queue has drained with the writers stopped (a put the
 * background writer committed after a provider's kill into a slab with an
 * extent there has one replica until it is repaired), and
 * the leader's accounting must match what was found (keys, bytes of two
 * replicas each, nothing pending). At the end everything (etcd,
 * masters, providers) is SIGKILLed and restarted: objects lived in memory, so
 * the test asserts only that the cluster comes back, that none of the old
 * keys reads back (nor wrongly), and that new puts are served.
 *
 * Environment: EGM_CHAOS_SECONDS (time of faults; `make test-chaos` runs 300),
 * EGM_TEST_HA_TTL (masters' ha_lease_ttl, default 4: a loaded run must never
 * lose a lease by itself), EGM_CHAOS_SEED (the sizes and keys' sequence; the
 * faults' timing is not reproducible). The summary line "ha chaos: ..." says
 * what was injected and found. Every wait is bounded by a generous deadline
 * and asserts no speed. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>
#include <cmocka.h>
#include <egmstore/egmstore.h>
#include "common/clock.h"
#include "support/cluster.h"
#include "support/etcd.h"
#include "support/http_get.h"
#include "support/model.h"

#define WAIT_MS 90000 /* any one recovery step; generous on two loaded cores */
#define N_ETCD 3
#define N_MASTERS 3
#define N_PROVIDERS 3
#define PROVIDER_SIZE "160MiB"
#define MAX_LEN 49152   /* object sizes 1..MAX_LEN bytes */
#define MAIN_KEYS 1536  /* keys "c0000".. of the test's own rounds */
#define WRITER_KEYS 384 /* keys "w000".. of the background writer */
#define ROUND_OPS 48    /* operations of one round */
#define PROBE_LEN 4096  /* puts that measure a failover */

enum { FAULT_LEADER, FAULT_PROVIDER, FAULT_STANDBY, FAULT_ETCD, N_FAULTS };
static const char *const fault_names[N_FAULTS] = {"leader", "provider", "standby", "etcd-member"};

static egm_test_etcd_t etcd[N_ETCD];
static int n_etcd;
static char endpoints[256], master_url[300];
static egm_test_cluster_t masters[N_MASTERS];
static unsigned http[N_MASTERS];
static egm_test_cluster_t providers[N_PROVIDERS]; /* one provider each, at index 0 */
static egm_client_t *client;                      /* the test's: placed per key */
static egm_model_t *model;

static struct {
    unsigned faults[N_FAULTS];
    unsigned failovers, unplanned_failovers, unplanned_exits;
    uint64_t puts_ok, puts_failed, removes;
    uint64_t longest_kill_to_put_ms, verifications;
    /* SlabGrants answered before the standbys held them, by leaders killed */
    uint64_t early_grants;
    long long epoch; /* the leader's, after the last recovery */
} stats;

static uint64_t rng_state; /* the test's own; the writer has its own */

static uint64_t rnd(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : def;
}

static const char *ttl_text(void)
{
    return env_or("EGM_TEST_HA_TTL", "4");
}

/* ---- masters ------------------------------------------------------------- */

static int master_up(int i)
{
    return masters[i].master.pid > 0;
}

/* "leader", "standby" or "" (no answer), and the epoch, from a master's /health. */
static void role_of(int i, char *role, size_t len, long long *epoch_p)
{
    char body[4096];
    role[0] = '\0'; /* when no answer */
    if (!master_up(i) || egm_test_http_get(http[i], "/health", body, sizeof(body)) != 200)
        return;
    egm_test_health_role(body, role, len, epoch_p);
}

static long long health_number(int i, const char *field)
{
    char body[4096];
    if (!master_up(i) || egm_test_http_get(http[i], "/health", body, sizeof(body)) != 200)
        return -1;
    return egm_test_health_number(body, field);
}

static void start_master(int i)
{
    const char *flags[] = {"--enable-ha", "true", "--etcd-endpoints", endpoints, "--ha-lease-ttl",
                           ttl_text(),    NULL};
    if (egm_test_start_master_http(&masters[i], flags, &http[i]) != 0)
        fail_msg("master %d did not start", i);
}

/* A master the test did not kill has exited (a lost lease: it exits to be
 * restarted, docs/ha.md): counted, reaped and restarted as a supervisor would. */
static void restart_exited_masters(void)
{
    for (int i = 0; i < N_MASTERS; i++) {
        int code = -1;
        if (master_up(i) && egm__process_wait(&masters[i].master, 0, &code) == EGM_OK) {
            fprintf(stderr, "ha chaos: master %d exited by itself (status %d); restarting it\n", i,
                    code);
            stats.unplanned_exits++;
            egm__process_cleanup(&masters[i].master);
            start_master(i);
        }
    }
}

/* The master that leads (its index) once the cluster is whole again: one
 * leader, the other masters standbys, the leader counting them all in sync.
 * A new epoch where the test caused no failover is counted as unplanned. */
static int wait_cluster_ready(int failover_caused, long long *epoch_p)
{
    char role[32];
    long long epoch = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50)) {
        restart_exited_masters();
        int leader = -1, standbys = 0;
        for (int i = 0; i < N_MASTERS; i++) {
            long long e = 0;
            role_of(i, role, sizeof(role), &e);
            if (strcmp(role, "leader") == 0) {
                if (leader >= 0)
                    fail_msg("masters %d and %d both say they lead", leader, i);
                leader = i;
                epoch = e;
            } else if (strcmp(role, "standby") == 0) {
                standbys++;
            }
        }
        if (leader >= 0 && standbys == N_MASTERS - 1 &&
            health_number(leader, "standbys_in_sync") == N_MASTERS - 1) {
            if (epoch != stats.epoch && stats.epoch != 0 && !failover_caused)
                stats.unplanned_failovers++;
            stats.epoch = epoch;
            if (epoch_p != NULL)
                *epoch_p = epoch;
            return leader;
        }
    }
    fail_msg("no leader with %d standbys in sync within %d ms", N_MASTERS - 1, WAIT_MS);
    return -1;
}

/* The index of the master that says it leads now, or -1. */
static int current_leader(void)
{
    char role[32];
    for (int i = 0; i < N_MASTERS; i++) {
        role_of(i, role, sizeof(role), NULL);
        if (strcmp(role, "leader") == 0)
            return i;
    }
    return -1;
}

static long long leader_metric(const char *name)
{
    int l = current_leader();
    return l >= 0 ? egm_model_master_metric(http[l], name) : -1;
}

/* ---- providers ----------------------------------------------------------- */

static void start_provider(int i)
{
    egm_test_cluster_init(&providers[i]);
    size_t len = strlen(master_url); /* checked to fit when it was made */
    memcpy(providers[i].master_addr, master_url, len + 1);
    /* One segment per provider: two replicas are on two providers. */
    const char *flags[] = {"--max-mr-size", PROVIDER_SIZE, NULL};
    if (egm_test_start_provider(&providers[i], PROVIDER_SIZE, flags) != 0)
        fail_msg("provider %d did not start", i);
}

static size_t provider_segments(int i)
{
    char needle[32];
    snprintf(needle, sizeof(needle), ":%d/", (int)providers[i].providers[0].pid);
    return egm_model_segments_matching(client, needle, NULL, 0);
}

/* ---- the writers --------------------------------------------------------- */

static egm_status_t put_version(egm_client_t *c, const char *key, unsigned version, size_t len)
{
    static const egm_replicate_config_t rc = {.replica_num = 2};
    void *buf = malloc(len);
    assert_non_null(buf);
    egm_model_fill(key, version, buf, len);
    egm_model_put_begin(model, key, version, len);
    egm_status_t s = egm_put(c, key, buf, len, &rc);
    egm_model_put_end(model, key, version, s);
    free(buf);
    return s;
}

/* Counts of a writer's operations (the test's rounds and the background
 * writer each have their own; summed at the end). */
typedef struct {
    uint64_t puts_ok, puts_failed, removes, model_failures;
} op_counts_t;

static void do_put(egm_client_t *c, const char *key, unsigned version, size_t len, op_counts_t *n)
{
    if (put_version(c, key, version, len) == EGM_OK)
        n->puts_ok++;
    else
        n->puts_failed++;
}

static void do_remove(egm_client_t *c, const char *key, int force, op_counts_t *n)
{
    egm_status_t s = egm_remove(c, key, force);
    n->removes++;
    if (egm_model_remove(model, key, s) != 0)
        n->model_failures++; /* NOT_FOUND for a committed key: a loss */
}

/* One operation on key: a committed key gets a new version (forced remove,
 * then put) or is removed; any other gets a put of its next version (an
 * uncertain one removed first, half the time). */
static void key_op(egm_client_t *c, const char *key, unsigned *next_version, int remove_pct,
                   op_counts_t *n, uint64_t *rng)
{
    size_t len = 1 + (size_t)(rnd(rng) % MAX_LEN);
    long committed = egm_model_committed(model, key);
    if (committed >= 0) {
        if ((int)(rnd(rng) % 100) < remove_pct) {
            do_remove(c, key, (int)(rnd(rng) % 2), n);
            return;
        }
        do_remove(c, key, 1, n);
    } else if (*next_version > 0 && rnd(rng) % 2) {
        do_remove(c, key, 1, n);
    }
    do_put(c, key, (*next_version)++, len, n);
}

typedef struct {
    egm_client_t *client; /* in slabs of its own */
    atomic_int stop, pause, paused;
    unsigned versions[WRITER_KEYS];
    op_counts_t n;
    uint64_t ops, rng;
    pthread_t thread;
} writer_t;

static writer_t writer;
static op_counts_t main_ops;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    while (!atomic_load(&w->stop)) {
        if (atomic_load(&w->pause)) {
            atomic_store(&w->paused, 1);
            egm__sleep_ms(5);
            continue;
        }
        atomic_store(&w->paused, 0);
        char key[16];
        unsigned idx = (unsigned)(rnd(&w->rng) % WRITER_KEYS);
        snprintf(key, sizeof(key), "w%03u", idx);
        key_op(w->client, key, &w->versions[idx], 30, &w->n, &w->rng);
        w->ops++;
        egm__sleep_ms(10); /* leave the two cores to the cluster */
    }
    atomic_store(&w->paused, 1);
    return NULL;
}

static void writer_pause(void)
{
    atomic_store(&writer.pause, 1);
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(2))
        if (atomic_load(&writer.paused))
            return;
    fail_msg("the background writer did not pause within %d ms", WAIT_MS);
}

static void writer_resume(void)
{
    atomic_store(&writer.paused, 0);
    atomic_store(&writer.pause, 0);
}

static unsigned main_versions[MAIN_KEYS];
static unsigned main_next; /* keys c0000..c(main_next-1) exist or existed */

/* The test's round of writes: new keys, new versions, removes. */
static void write_round(void)
{
    for (int op = 0; op < ROUND_OPS; op++) {
        unsigned r = (unsigned)(rnd(&rng_state) % 100), idx;
        if ((r < 50 || main_next == 0) && main_next < MAIN_KEYS)
            idx = main_next++;
        else
            idx = (unsigned)(rnd(&rng_state) % main_next);
        char key[16];
        snprintf(key, sizeof(key), "c%04u", idx);
        key_op(client, key, &main_versions[idx], 40, &main_ops, &rng_state);
    }
}

/* ---- verification -------------------------------------------------------- */

/* Every key the model knows reads back as it allows (a get failing otherwise
 * than not-found is retried until a deadline: the cluster has recovered, so
 * that must pass), and the leader's accounting matches what was found. */
static void verify(const char *after)
{
    writer_pause();
    size_t n = 0;
    char **keys = egm_model_keys(model, &n);
    uint64_t found = 0, bytes = 0, failures = 0, until = egm__now_ms() + WAIT_MS;
    for (size_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t len = 0;
        egm_status_t s;
        while ((s = egm_get(client, keys[i], &data, &len)) != EGM_OK && s != EGM_ERR_NOT_FOUND &&
               egm__now_ms() < until)
            egm__sleep_ms(50);
        if (egm_model_check(model, keys[i], s, data, len) != 0)
            failures++;
        if (s == EGM_OK) {
            found++;
            bytes += (((uint64_t)len + 63) & ~(uint64_t)63) * 2;
            egm_buffer_free(data);
        } else if (s != EGM_ERR_NOT_FOUND) {
            fprintf(stderr, "ha chaos: get \"%s\" still fails after %s: %s\n", keys[i], after,
                    egm_status_string(s));
            failures++;
        }
        free(keys[i]);
    }
    free(keys);
    egm_model_stats_t ms = egm_model_stats(model);
    if (failures != 0 || ms.lost != 0 || ms.wrong != 0 || main_ops.model_failures != 0 ||
        writer.n.model_failures != 0)
        fail_msg("after %s: %llu of %zu keys failed the model (lost %llu, wrong %llu so far)",
                 after, (unsigned long long)failures, n, (unsigned long long)ms.lost,
                 (unsigned long long)ms.wrong);
    /* Every object found has its two replicas (placed on two providers, or
     * restored by re-replication after a provider's kill): else the next
     * provider kill may lose it. The writers ran on after fault_provider saw
     * re-replication done, and a put committed meanwhile into a slab whose
     * other extent was on the killed provider has one live replica until it
     * is repaired in turn: with every writer stopped, the queue is let drain
     * first. */
    long long under = leader_metric("egm_master_objects_under_replicated");
    if (under > 0)
        fprintf(stderr,
                "ha chaos: after %s: %lld objects being re-replicated as the writers stopped\n",
                after, under);
    for (uint64_t t = egm__now_ms() + WAIT_MS; under != 0 && egm__now_ms() < t; egm__sleep_ms(50))
        under = leader_metric("egm_master_objects_under_replicated");
    if (under != 0)
        fail_msg("after %s: egm_master_objects_under_replicated is %lld %d ms after the writers "
                 "stopped",
                 after, under, WAIT_MS);
    keys = egm_model_keys(model, &n);
    size_t single = 0;
    for (size_t i = 0; i < n; i++) {
        if (egm_model_committed(model, keys[i]) >= 0 &&
            egm_model_record_placement(model, client, keys[i]) == EGM_OK) {
            egm_id_t ids[EGM_MODEL_MAX_REPLICAS];
            size_t r = egm_model_placement(model, keys[i], ids, EGM_MODEL_MAX_REPLICAS);
            if (r != 2 && single++ < 10)
                fprintf(stderr, "ha chaos: after %s: \"%s\" has %zu replicas\n", after, keys[i], r);
        }
        free(keys[i]);
    }
    free(keys);
    if (single != 0)
        fail_msg("after %s: %zu committed objects do not have 2 replicas", after, single);
    /* The accounting: the leader's keys and bytes are exactly what was found,
     * two replicas each (re-replication has ended). Counters of a master lag
     * nothing here, but its /metrics is asked again for a while in case. */
    int leader = -1, matched = -1;
    for (uint64_t t = egm__now_ms() + 10000; matched != 0 && egm__now_ms() < t; egm__sleep_ms(200))
        if ((leader = current_leader()) >= 0)
            matched = egm_model_check_master(http[leader], found, bytes);
    if (matched != 0)
        fail_msg("after %s: the leader's accounting does not match the %llu objects found", after,
                 (unsigned long long)found);
    stats.verifications++;
    egm_model_census_t c = egm_model_census(model);
    fprintf(stderr,
            "ha chaos: after %s: %zu keys, %zu committed, %zu uncertain, %zu absent; %llu found "
            "and verified\n",
            after, c.keys, c.committed, c.uncertain, c.absent, (unsigned long long)found);
    writer_resume();
}

/* ---- faults -------------------------------------------------------------- */

static unsigned probes;

/* Puts new keys until one succeeds; the ms from `since`. */
static uint64_t put_until_ok(uint64_t since)
{
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50)) {
        char key[32];
        snprintf(key, sizeof(key), "p%05u", probes++);
        egm_status_t s = put_version(client, key, 0, PROBE_LEN);
        if (s == EGM_OK) {
            main_ops.puts_ok++;
            return egm__now_ms() - since;
        }
        main_ops.puts_failed++;
    }
    fail_msg("no put succeeded within %d ms", WAIT_MS);
    return 0;
}

static void fault_leader(int leader)
{
    long long old_epoch = stats.epoch, epoch = 0;
    long long early = egm_model_master_metric(http[leader], "egm_master_slab_grants_early_total");
    if (early > 0) /* its writers copied into slabs the standbys did not hold yet */
        stats.early_grants += (uint64_t)early;
    uint64_t killed = egm__now_ms();
    assert_int_equal(egm__process_signal(&masters[leader].master, SIGKILL), EGM_OK);
    uint64_t ms = put_until_ok(killed);
    if (ms > stats.longest_kill_to_put_ms)
        stats.longest_kill_to_put_ms = ms;
    int code;
    assert_int_equal(egm__process_wait(&masters[leader].master, WAIT_MS, &code), EGM_OK);
    egm__process_cleanup(&masters[leader].master);
    /* A new leader serves (the put above went through it); the old one
     * comes back as a standby. */
    start_master(leader);
    int now = wait_cluster_ready(1, &epoch);
    if (now == leader || epoch <= old_epoch)
        fail_msg("after the leader's kill master %d leads at epoch %lld (was %d at %lld)", now,
                 epoch, leader, old_epoch);
    stats.failovers++;
    fprintf(stderr,
            "ha chaos: leader %d killed: first put after %llu ms; master %d leads (epoch %lld)\n",
            leader, (unsigned long long)ms, now, epoch);
}

static unsigned provider_kills;

static void fault_provider(void)
{
    int victim = (int)(provider_kills++ % N_PROVIDERS);
    uint64_t killed = egm__now_ms();
    int victim_pid = (int)providers[victim].providers[0].pid;
    assert_true(provider_segments(victim) >= 1);
    assert_int_equal(egm__process_signal(&providers[victim].providers[0], SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&providers[victim].providers[0], WAIT_MS, NULL), EGM_OK);
    egm__process_cleanup(&providers[victim].providers[0]);
    start_provider(victim); /* the replacement */
    /* The leader drops the victim's segment, then restores every object's
     * second replica (the next provider kill must find two of each). */
    char needle[32];
    snprintf(needle, sizeof(needle), ":%d/", victim_pid);
    size_t listed = 1;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until && listed != 0;
         egm__sleep_ms(50))
        listed = egm_model_segments_matching(client, needle, NULL, 0);
    if (listed != 0)
        fail_msg("the leader still lists the killed provider's segment after %d ms", WAIT_MS);
    uint64_t dropped = egm__now_ms();
    long long under = -1;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until && under != 0;
         egm__sleep_ms(50))
        under = leader_metric("egm_master_objects_under_replicated");
    if (under != 0)
        fail_msg("egm_master_objects_under_replicated is %lld %d ms after the drop", under,
                 WAIT_MS);
    fprintf(stderr,
            "ha chaos: provider %d (pid %d) killed: dropped after %llu ms, re-replicated %llu ms "
            "later\n",
            victim, victim_pid, (unsigned long long)(dropped - killed),
            (unsigned long long)(egm__now_ms() - dropped));
}

static unsigned standby_kills;

static void fault_standby(int leader)
{
    int victim = (leader + 1 + (int)(standby_kills++ % (N_MASTERS - 1))) % N_MASTERS;
    assert_int_equal(egm__process_signal(&masters[victim].master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&masters[victim].master, WAIT_MS, NULL), EGM_OK);
    egm__process_cleanup(&masters[victim].master);
    /* Puts go on while the leader drops it from the in-sync set. */
    uint64_t ms = put_until_ok(egm__now_ms());
    start_master(victim);
    fprintf(stderr, "ha chaos: standby %d killed: a put went through in %llu ms; restarted\n",
            victim, (unsigned long long)ms);
}

static unsigned etcd_kills;

static void fault_etcd(void)
{
    int victim = (int)(etcd_kills++ % N_ETCD);
    assert_int_equal(egm__process_signal(&etcd[victim].proc, SIGKILL), EGM_OK);
    int code;
    assert_int_equal(egm__process_wait(&etcd[victim].proc, WAIT_MS, &code), EGM_OK);
    /* Two lease TTLs of puts without it: the leader renews through the others. */
    uint64_t until = egm__now_ms() + 2000 * (uint64_t)atoi(ttl_text());
    while (egm__now_ms() < until) {
        put_until_ok(egm__now_ms());
        egm__sleep_ms(100);
    }
    if (egm_test_etcd_restart(&etcd[victim]) != 0)
        fail_msg("etcd member %d did not come back", victim);
    fprintf(stderr, "ha chaos: etcd member %d killed for %d s, restarted\n", victim,
            2 * atoi(ttl_text()));
}

/* ---- the test ------------------------------------------------------------ */

static int setup(void **state)
{
    (void)state;
    for (int i = 0; i < N_MASTERS; i++)
        egm_test_cluster_init(&masters[i]);
    for (int i = 0; i < N_PROVIDERS; i++)
        egm_test_cluster_init(&providers[i]);
    n_etcd = 0;
    client = NULL;
    model = NULL;
    memset(&writer, 0, sizeof(writer));
    return 0;
}

static void stop_writer(void)
{
    if (writer.client != NULL) {
        atomic_store(&writer.stop, 1);
        pthread_join(writer.thread, NULL);
        egm_client_destroy(writer.client);
        writer.client = NULL;
    }
}

static int teardown(void **state)
{
    (void)state;
    stop_writer();
    egm_client_destroy(client);
    client = NULL;
    for (int i = 0; i < N_PROVIDERS; i++)
        egm_test_cluster_stop(&providers[i]);
    for (int i = 0; i < N_MASTERS; i++)
        egm_test_cluster_stop(&masters[i]);
    for (int i = 0; i < n_etcd; i++)
        egm_test_etcd_stop(&etcd[i]);
    n_etcd = 0;
    egm_model_destroy(model);
    model = NULL;
    return 0;
}

static egm_client_t *new_client(const char *slab_bytes)
{
    char addr[320], slabs[64];
    snprintf(addr, sizeof(addr), "master_server_addr=%s", master_url);
    snprintf(slabs, sizeof(slabs), "slab_bytes=%s", slab_bytes);
    const char *pairs[] = {addr, slabs, "replica_num=2", NULL};
    egm_client_t *c = egm_test_client(&masters[0], "auto", pairs);
    assert_non_null(c);
    return c;
}

/* Everything SIGKILLed and started again: no object survives (memory), the
 * cluster comes back and serves new puts, and no old key reads back. */
static void full_restart(void)
{
    stop_writer();
    for (int i = 0; i < N_PROVIDERS; i++)
        egm__process_signal(&providers[i].providers[0], SIGKILL);
    for (int i = 0; i < N_MASTERS; i++)
        egm__process_signal(&masters[i].master, SIGKILL);
    for (int i = 0; i < N_ETCD; i++)
        egm__process_signal(&etcd[i].proc, SIGKILL);
    for (int i = 0; i < N_PROVIDERS; i++)
        egm__process_cleanup(&providers[i].providers[0]);
    for (int i = 0; i < N_MASTERS; i++)
        egm__process_cleanup(&masters[i].master);
    if (egm_test_etcd_cluster_restart(etcd, N_ETCD) != 0)
        fail_msg("etcd did not come back after the full restart");
    for (int i = 0; i < N_MASTERS; i++)
        start_master(i);
    long long epoch = 0;
    int leader = wait_cluster_ready(1, &epoch);
    for (int i = 0; i < N_PROVIDERS; i++)
        start_provider(i);
    /* Whatever the model knew, nothing may read back now but as it allows,
     * and nothing does: the objects were in the killed providers' memory. */
    size_t n = 0;
    char **keys = egm_model_keys(model, &n);
    for (size_t i = 0; i < n; i++)
        egm_model_uncertain(model, keys[i]);
    uint64_t old_found = 0;
    for (size_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t len = 0;
        egm_status_t s;
        uint64_t until = egm__now_ms() + WAIT_MS;
        while ((s = egm_get(client, keys[i], &data, &len)) != EGM_OK && s != EGM_ERR_NOT_FOUND &&
               egm__now_ms() < until)
            egm__sleep_ms(50);
        assert_int_equal(egm_model_check(model, keys[i], s, data, len), 0);
        if (s == EGM_OK) {
            old_found++;
            egm_buffer_free(data);
        }
        assert_true(s == EGM_OK || s == EGM_ERR_NOT_FOUND);
        free(keys[i]);
    }
    free(keys);
    assert_int_equal(old_found, 0);
    for (unsigned i = 0; i < 64; i++) {
        char key[32];
        snprintf(key, sizeof(key), "after-restart-%u", i);
        egm_status_t s = EGM_ERR_UNREACHABLE;
        for (uint64_t until = egm__now_ms() + WAIT_MS; s != EGM_OK && egm__now_ms() < until;
             egm__sleep_ms(50))
            s = put_version(client, key, 1000 + i, 1 + (size_t)(rnd(&rng_state) % MAX_LEN));
        assert_int_equal(s, EGM_OK);
    }
    uint64_t found = 0, bytes = 0;
    assert_int_equal(egm_model_verify_all(model, client, 2, &found, &bytes), 0);
    assert_int_equal(found, 64);
    assert_int_equal(egm_model_check_master(http[leader], found, bytes), 0);
    fprintf(stderr,
            "ha chaos: full restart: master %d leads (epoch %lld); %zu old keys none found, 64 new "
            "puts read back\n",
            leader, epoch, n);
}

static void test_chaos(void **state)
{
    (void)state;
    int seconds = atoi(env_or("EGM_CHAOS_SECONDS", "75"));
    rng_state = strtoull(env_or("EGM_CHAOS_SEED", "0"), NULL, 10);
    if (rng_state == 0)
        rng_state = (uint64_t)time(NULL);
    fprintf(stderr, "ha chaos: %d s of faults, ha_lease_ttl %s, seed %llu\n", seconds, ttl_text(),
            (unsigned long long)rng_state);
    memset(&stats, 0, sizeof(stats));
    memset(main_versions, 0, sizeof(main_versions));
    main_next = 0;
    probes = provider_kills = standby_kills = etcd_kills = 0;
    memset(&main_ops, 0, sizeof(main_ops));
    model = egm_model_create();
    assert_non_null(model);

    assert_int_equal(egm_test_etcd_cluster_start(etcd, N_ETCD, endpoints, sizeof(endpoints)), 0);
    n_etcd = N_ETCD;
    snprintf(master_url, sizeof(master_url), "etcd://%s", endpoints);
    assert_true(strlen(master_url) < sizeof(providers[0].master_addr));
    for (int i = 0; i < N_MASTERS; i++)
        start_master(i);
    wait_cluster_ready(0, NULL); /* a provider needs a leader to start */
    for (int i = 0; i < N_PROVIDERS; i++)
        start_provider(i);
    client = new_client("0");
    writer.client = new_client("128KiB"); /* a SlabGrant every few puts */
    writer.rng = rng_state ^ 0x5bd1e995u;
    assert_int_equal(pthread_create(&writer.thread, NULL, writer_main, &writer), 0);

    uint64_t start = egm__now_ms(), end = start + (uint64_t)seconds * 1000;
    unsigned round = 0;
    while (egm__now_ms() < end) {
        int leader = wait_cluster_ready(0, NULL);
        write_round();
        int kind = (int)(round++ % N_FAULTS);
        stats.faults[kind]++;
        switch (kind) {
        case FAULT_LEADER:
            fault_leader(leader);
            break;
        case FAULT_PROVIDER:
            fault_provider();
            break;
        case FAULT_STANDBY:
            fault_standby(leader);
            break;
        default:
            fault_etcd();
            break;
        }
        wait_cluster_ready(kind == FAULT_LEADER, NULL);
        char after[64];
        snprintf(after, sizeof(after), "fault %u (%s)", round, fault_names[kind]);
        verify(after);
    }
    uint64_t faults_ms = egm__now_ms() - start;
    egm_model_census_t c = egm_model_census(model);
    egm_model_stats_t ms = egm_model_stats(model);
    uint64_t puts_ok = main_ops.puts_ok + writer.n.puts_ok;
    uint64_t puts_failed = main_ops.puts_failed + writer.n.puts_failed;
    fprintf(stderr,
            "ha chaos: %.0f s, %u faults (leader %u, provider %u, standby %u, etcd-member %u); "
            "%llu puts committed, %llu failed, %llu removes; %zu keys: %zu committed, %zu "
            "uncertain, %zu absent; %llu gets verified in %llu verifications, %llu lost, %llu "
            "wrong; failovers %u (+%u unplanned, %u masters exited by themselves); longest leader "
            "kill to first put %llu ms; %llu SlabGrants answered before the standbys held them "
            "by the leaders killed\n",
            (double)faults_ms / 1000.0, round, stats.faults[FAULT_LEADER],
            stats.faults[FAULT_PROVIDER], stats.faults[FAULT_STANDBY], stats.faults[FAULT_ETCD],
            (unsigned long long)puts_ok, (unsigned long long)puts_failed,
            (unsigned long long)(main_ops.removes + writer.n.removes), c.keys, c.committed,
            c.uncertain, c.absent, (unsigned long long)ms.gets_verified,
            (unsigned long long)stats.verifications, (unsigned long long)ms.lost,
            (unsigned long long)ms.wrong, stats.failovers, stats.unplanned_failovers,
            stats.unplanned_exits, (unsigned long long)stats.longest_kill_to_put_ms,
            (unsigned long long)stats.early_grants);
    assert_int_equal(ms.lost, 0);
    assert_int_equal(ms.wrong, 0);
    assert_true(stats.faults[FAULT_LEADER] > 0);
    assert_true(stats.early_grants > 0); /* the leaders killed had answered grants early */

    if (getenv("EGM_CHAOS_NO_RESTART") == NULL)
        full_restart();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_chaos, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
